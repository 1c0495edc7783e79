"""`bertkit serve` as a real server process on 127.0.0.1, spoken to with a real HTTP client (httpx): answers equal
`bertkit predict` / `bertkit extract`, dynamic batching under concurrency, overload, bad requests, disconnects and
SIGTERM. Every loop is bounded in count and time."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time

import numpy as np
import pytest

from .conftest import NEGATIVE, POSITIVE, SENTENCES, cli_extract, cli_predict, server, server_output, tiny_run

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def sst2_run(tmp_path_factory, tiny_bert):
    return tiny_run(tmp_path_factory, tiny_bert, "sst2")


SST2_FLAGS = ["--max-items", "32", "--max-text-chars", "2000", "--max-body-bytes", "60000", "--embed-max-length", "64"]


@pytest.fixture(scope="module")
def sst2_server(sst2_run):
    with server(sst2_run, *SST2_FLAGS) as (url, proc):
        yield url, proc


@pytest.fixture(scope="module")
def cpu_sst2_server(sst2_run):
    """The same server on the CPU on any machine: for the CPU's defaults (a GPU's differ)."""
    with server(sst2_run, *SST2_FLAGS, cpu=True) as (url, proc):
        yield url, proc


def post(url: str, path: str, body, **kw):
    content = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return httpx.post(url + path, content=content, headers={**JSON, **kw.pop("headers", {})}, timeout=60, **kw)


def assert_same_predictions(served: list[dict], cli: list[dict], score_keys=("score",)):
    """Labels, tags, entities, answers identical; scores equal up to float rounding (other batch padding)."""
    assert len(served) == len(cli)
    for s, c in zip(served, cli, strict=True):
        assert s.keys() == c.keys()
        for k in s:
            if k in score_keys:
                assert s[k] == pytest.approx(c[k], abs=1e-5)
            elif k == "probabilities":
                assert s[k].keys() == c[k].keys() and all(s[k][n] == pytest.approx(c[k][n], abs=1e-5) for n in s[k])
            else:
                assert s[k] == c[k], k


# --- answers equal the CLI -----------------------------------------------------------------------------------------
def test_classification_equals_bertkit_predict(sst2_server, sst2_run, tmp_path):
    url, _ = sst2_server
    r = post(url, "/predict", {"texts": SENTENCES, "probs": True})
    assert r.status_code == 200, r.text
    assert_same_predictions(r.json()["predictions"], cli_predict(sst2_run, SENTENCES, tmp_path, "--probs"))
    r = post(url, "/predict", {"texts": SENTENCES[:2]})
    assert_same_predictions(r.json()["predictions"], cli_predict(sst2_run, SENTENCES[:2], tmp_path))


@pytest.mark.parametrize("settings", [("last", "concat", "mean"), ("0,-1", "none", "none"), ("1-2", "mean", "cls")])
def test_embed_equals_bertkit_extract(sst2_server, sst2_run, tmp_path, settings):
    url, _ = sst2_server
    layers, combine, pool = settings
    r = post(url, "/embed", {"texts": SENTENCES, "layers": layers, "combine": combine, "pool": pool})
    assert r.status_code == 200, r.text
    body = r.json()
    reference = cli_extract(sst2_run, SENTENCES, tmp_path, "--layers", layers, "--combine", combine, "--pool", pool)
    assert len(body["embeddings"]) == len(reference) == len(SENTENCES)
    for got, (words, expected) in zip(body["embeddings"], reference, strict=True):
        assert got["words"] == words
        np.testing.assert_allclose(np.asarray(got["vectors"]), expected, atol=1e-5)
    # pre-tokenised words give the same vectors as the text they were split from
    r = post(url, "/embed", {"words": [w for w, _ in reference], "layers": layers, "combine": combine, "pool": pool})
    assert [e["vectors"] for e in r.json()["embeddings"]] == [e["vectors"] for e in body["embeddings"]]


@pytest.mark.parametrize("name", ["rte", "ner", "qa"])
def test_pair_ner_and_qa_equal_bertkit_predict(tmp_path_factory, tiny_bert, tmp_path, name):
    run = tiny_run(tmp_path_factory, tiny_bert, name)
    if name == "rte":
        rows = [{"premise": p, "hypothesis": h} for p, h in zip(SENTENCES, reversed(SENTENCES), strict=True)]
        body = {"texts": [r["premise"] for r in rows], "text_pairs": [r["hypothesis"] for r in rows], "probs": True}
        flags = ("--probs",)
    elif name == "ner":
        rows = SENTENCES + ["Kowalczyk " * 30 + "visited Nairobi ."]  # longer than a window: merged windows
        body, flags = {"sentences": rows}, ()
    else:
        rows = [{"id": "q1", "question": "which colour is mentioned ?", "context": "the film was red and long"},
                {"question": "name the colour .", "context": " ".join(["the report said"] * 25) + " blue today"},
                {"id": 7, "question": "what color appears in the text ?", "context": "Green , said the cast"}]
        body, flags = {"questions": rows}, ()
    expected = cli_predict(run, rows, tmp_path, *flags)
    with server(run) as (url, _):
        r = post(url, "/predict", body)
        assert r.status_code == 200, r.text
        assert_same_predictions(r.json()["predictions"], expected)
        meta = httpx.get(url + "/metadata", timeout=10).json()
        assert meta["task"] == {"rte": "sequence-classification", "ner": "token-classification",
                                "qa": "question-answering"}[name] and "run_task" not in meta
        if name == "rte":
            assert meta["pairs"] is True and meta["labels"] == ["entailment", "not_entailment"]
            missing = post(url, "/predict", {"texts": ["a plot"]})
            assert missing.status_code == 400 and missing.json()["errors"][0]["field"] == "text_pairs"
            uneven = post(url, "/predict", {"texts": ["a", "b"], "text_pairs": ["c"]})
            assert uneven.status_code == 400 and uneven.json()["errors"][0]["field"] == "text_pairs"
        if name == "ner":
            words = post(url, "/predict", {"sentences": [["EU", "rejects", "German", "call"], "EU rejects"]})
            assert words.status_code == 200 and words.json()["predictions"][0]["tokens"] == ["EU", "rejects",
                                                                                           "German", "call"]
            empty = post(url, "/predict", {"sentences": ["fine", ["EU", " "]]})
            assert empty.status_code == 400 and empty.json()["errors"][0]["field"] == "sentences[1][1]"
        if name == "qa":
            bad = post(url, "/predict", {"questions": [{"question": "x ?"}]})
            assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "questions[0].context"
            bad = post(url, "/predict", {"questions": [{"question": " ", "context": "red"}]})
            assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "questions[0].question"
            # one question sent as predict reads it, not in a body of questions: the error shows the body's shape
            bad = post(url, "/predict", rows[0])
            assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "questions"
            shape = bad.json()["detail"].split("; a request looks like ", 1)[1]
            assert json.loads(shape) == meta["request"] and set(meta["request"]["questions"][0]) == {"question",
                                                                                                  "context"}
            assert post(url, "/predict", meta["request"]).status_code == 200


# --- bad requests: 400 or 413, naming the field, never 500 ---------------------------------------------------------
def chunks(n: int):
    yield b'{"texts": ["'
    for _ in range(n):
        yield b"a " * 1000
    yield b'"]}'


BAD = [  # (path, body, status, field); the server takes 32 items, 2000 characters a text, 60000 bytes a body
    ("/predict", '{"texts": [', 400, "body"),  # malformed JSON
    ("/predict", "", 400, "body"),  # no body
    ("/predict", '["a film"]', 400, "body"),  # not an object
    ("/predict", b'{"texts": ["\xff\xfe"]}', 400, "body"),  # not UTF-8
    ("/predict", {}, 400, "texts"),  # missing field
    ("/predict", {"texts": None}, 400, "texts"),
    ("/predict", {"texts": "a film"}, 400, "texts"),  # a string, not a list
    ("/predict", {"texts": ["fine", 3]}, 400, "texts[1]"),  # wrong item type
    ("/predict", {"texts": [["nested"]]}, 400, "texts[0]"),
    ("/predict", {"texts": []}, 400, "texts"),  # nothing to do
    ("/predict", {"texts": ["fine", "   "]}, 400, "texts[1]"),  # empty text
    ("/predict", b'{"texts": ["fine", "a \\ud800 b"]}', 400, "texts[1]"),  # a lone surrogate: was a 500, for the
    ("/embed", b'{"texts": ["a \\udfff"], "layers": "last"}', 400, "texts[0]"),  # call's other requests too
    ("/predict", {"texts": ["fine"], "temperature": 2}, 400, "temperature"),  # unknown field
    ("/predict", {"texts": ["fine"], "probs": "true"}, 400, "probs"),  # a string for a boolean
    ("/predict", {"texts": ["fine"], "text_pairs": ["pair"]}, 400, "text_pairs"),  # pairs for a single-text model
    ("/predict", {"texts": ["x"] * 33}, 413, "texts"),  # too many items
    ("/predict", {"texts": ["fine", "long " * 500]}, 413, "texts[1]"),  # a text over the size limit
    ("/predict", {"texts": ["a " * 40000]}, 413, "body"),  # a body over the size limit (Content-Length)
    ("/predict", chunks(80), 413, "body"),  # ... streamed without a Content-Length
    ("/embed", {"texts": ["EU rejects German call"], "layers": "7"}, 400, "layers"),  # no such layer
    ("/embed", {"texts": ["a"], "layers": "last", "pool": "max"}, 400, "pool"),
    ("/embed", {"texts": ["a"], "words": [["a"]], "layers": "last"}, 400, "texts"),  # both inputs
    ("/embed", {"layers": "last"}, 400, "texts"),  # neither
    ("/embed", {"words": [["EU", ""]], "layers": "last"}, 400, "words[0][1]"),  # empty word
    ("/embed", {"texts": ["fine", "word " * 100], "layers": "last"}, 400, "texts[1]"),  # over embed max length
    ("/embed", {"texts": ["fine", "\u0000"], "layers": "last"}, 400, "texts[1]"),  # a word without word pieces
]


@pytest.mark.parametrize("path,body,status,field", BAD, ids=[f"{i:02d}-{b[0][1:]}-{b[3]}" for i, b in enumerate(BAD)])
def test_bad_requests_name_the_field_and_the_reason(sst2_server, path, body, status, field):
    url, _ = sst2_server
    if hasattr(body, "__next__"):  # a generator: a chunked body
        r = httpx.post(url + path, content=body, headers=JSON, timeout=60)
    else:
        r = post(url, path, body)
    assert r.status_code == status, r.text
    error = r.json()["errors"][0]
    assert error["field"] == field and len(error["reason"]) > 5, r.text
    assert r.json()["detail"].startswith(field)
    assert post(url, "/predict", {"texts": ["still fine"]}).status_code == 200


def test_wrong_method_and_path_and_content_type(sst2_server):
    url, _ = sst2_server
    assert httpx.get(url + "/predict", timeout=10).status_code == 405
    assert httpx.post(url + "/nowhere", json={}, timeout=10).status_code == 404
    r = httpx.post(url + "/predict", data={"texts": "a film"}, timeout=10)  # a form, not JSON
    assert r.status_code == 400 and "application/json" in r.json()["errors"][0]["reason"]


def test_a_base_checkpoint_serves_embeddings_only(tiny_bert, tmp_path):
    reference = cli_extract(tiny_bert, SENTENCES[:3], tmp_path, "--layers", "last", "--pool", "cls")
    with server(tiny_bert) as (url, _):
        meta = httpx.get(url + "/metadata", timeout=10).json()
        assert meta["task"] is None and meta["endpoints"] == ["/embed"]
        r = post(url, "/predict", {"texts": ["a film"]})
        assert r.status_code == 404 and r.json()["detail"] == f"path: {tiny_bert} has no task head (a base " \
            "checkpoint): it serves /embed only"  # was "path: Not Found"
        r = post(url, "/embed", {"texts": SENTENCES[:3], "layers": "last", "pool": "cls"})
        assert r.status_code == 200 and r.json()["dim"] == 32
        for (_, expected), got in zip(reference, r.json()["embeddings"], strict=True):
            np.testing.assert_allclose(np.asarray(got["vectors"]), expected, atol=1e-5)


def test_metadata_health_and_openapi(cpu_sst2_server):
    url, _ = cpu_sst2_server
    meta = httpx.get(url + "/metadata", timeout=10).json()
    assert meta["task"] == "sequence-classification" and meta["labels"] == ["negative", "positive"]
    assert meta["precision"] == "fp32" and meta["max_length"] == 128 and meta["pairs"] is False
    assert meta["model_batch"] == 8  # fp32 on a CPU: smaller batches pad less (`model_batch`)
    assert meta["problem_type"] == "single_label_classification" and "run_task" not in meta
    assert meta["limits"]["max_items"] == 32 and meta["versions"]["torch"].startswith("2.")
    assert meta["request"] == {"texts": ["warm up"], "probs": False}  # an example body: what a client sends
    assert httpx.get(url + "/health", timeout=10).json()["status"] == "ok"
    schema = httpx.get(url + "/openapi.json", timeout=10).json()
    assert {"/predict", "/embed", "/health", "/metadata"} <= set(schema["paths"])
    predict = schema["paths"]["/predict"]["post"]
    assert {"200", "400", "413", "429"} <= set(predict["responses"]) and "422" not in predict["responses"]
    assert "texts" in schema["components"]["schemas"]["ClassifyRequest"]["properties"]


def test_model_batch_default_by_precision_and_device():
    from bertkit.serve.engine import model_batch

    assert model_batch("torch", "fp32", "cpu") == 8 and model_batch("torch", "bf16", "cpu") == 16
    assert model_batch("torch", "fp32", "cuda") == 16 and model_batch("onnx", "fp32", "cpu") == 16


def test_call_items_default_by_device(cpu_sst2_server):
    from bertkit.serve.engine import call_items

    assert call_items("cpu") == 16 and call_items("cuda") == 64
    url, _ = cpu_sst2_server  # started without --max-batch, on the CPU
    assert httpx.get(url + "/metadata", timeout=10).json()["batching"]["max_batch"] == 16


# --- concurrency ---------------------------------------------------------------------------------------------------
def text(client: int, request: int, item: int) -> str:
    word = (POSITIVE if (client + request + item) % 2 else NEGATIVE)[(client * 7 + request * 3 + item) % 8]
    return f"client {client} request {request} item {item} : the film was {word}" + " really" * (item * 5 % 11)


def test_64_concurrent_clients_each_get_their_own_answers_in_order(sst2_server, sst2_run, tmp_path):
    url, proc = sst2_server
    clients, requests = 64, 20
    sent = {(c, r): [text(c, r, i) for i in range(1 + (c + r) % 3)] for c in range(clients) for r in range(requests)}
    every = [t for texts in sent.values() for t in texts]  # all different
    reference = dict(zip(every, cli_predict(sst2_run, every, tmp_path), strict=True))
    before = httpx.get(url + "/health", timeout=10).json()

    async def client(http, c):
        answers, last = [], time.monotonic()
        for r in range(requests):
            try:
                resp = await http.post("/predict", json={"texts": sent[c, r]})
            except httpx.TransportError as e:  # what the connection had been doing, and what the server said
                raise AssertionError(f"client {c}, request {r}: {e!r} after {time.monotonic() - last:.1f} s since "
                                     f"its previous answer; the server's log: {server_output(proc)}") from e
            last = time.monotonic()
            answers.append((r, resp.status_code, resp.json()))
        return answers

    async def all_clients():
        limits = httpx.Limits(max_connections=clients)
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
            return await asyncio.wait_for(asyncio.gather(*(client(http, c) for c in range(clients))), 600)

    results = asyncio.run(all_clients())
    answered = 0
    for c, answers in enumerate(results):
        assert [r for r, _, _ in answers] == list(range(requests))
        for r, status, body in answers:
            assert status == 200, body
            got = body["predictions"]
            assert [p["text"] for p in got] == sent[c, r]  # its own items, in its own order
            for p in got:  # and the answer computed for that text, not a neighbour's
                assert p["label"] == reference[p["text"]]["label"]
                assert p["score"] == pytest.approx(reference[p["text"]]["score"], abs=1e-5)
            answered += 1
    assert answered == clients * requests
    after = httpx.get(url + "/health", timeout=10).json()
    assert after["accepted"] - before["accepted"] == clients * requests == after["answered"] - before["answered"]
    assert after["items"] - before["items"] == len(every)  # each item through the model once
    assert after["batches"] - before["batches"] < clients * requests  # and some requests shared a model call


def test_under_load_a_call_takes_the_oldest_then_the_nearest_in_length():
    from bertkit.serve.batcher import Batcher
    from bertkit.serve.engine import Job

    calls = []

    async def scenario():
        def run(jobs):
            calls.append([item if isinstance(item, str) else item["text"] for j in jobs for item in j.items])

        batcher = Batcher(run, max_batch=3, max_wait=0)
        jobs = [Job(("predict",), [{"text": "x" * n}]) for n in (50, 10, 48, 11, 52, 9, 30)]
        futures = [batcher.submit(job) for job in jobs]
        other = batcher.submit(Job(("embed", "-1"), ["y" * 50]))  # another kind of request: after its own kind
        gone = batcher.submit(Job(("predict",), [{"text": "x" * 49}]))
        gone.cancel()  # its client went away before it ran
        batcher.start()
        await asyncio.wait_for(asyncio.gather(*futures, other), 30)
        await batcher.close()
        return batcher.stats

    stats = asyncio.run(scenario())
    lengths = [[len(t) for t in call] for call in calls]
    assert lengths == [[50, 48, 52], [10, 11, 9], [30, 50]]  # oldest first; ties in arrival order
    assert stats["dropped"] == 1 and stats["items"] == 8
    calls.clear()

    async def light():  # no more waiting than a call takes: arrival order
        batcher = Batcher(lambda jobs: calls.append([len(j.items[0]["text"]) for j in jobs]), max_batch=8,
                          max_wait=0)
        futures = [batcher.submit(Job(("predict",), [{"text": "x" * n}])) for n in (50, 10, 48)]
        batcher.start()
        await asyncio.wait_for(asyncio.gather(*futures), 30)
        await batcher.close()

    asyncio.run(light())
    assert calls == [[50, 10, 48]]


@pytest.fixture(scope="module")
def patient_server(sst2_run):
    """A server that waits up to 300 ms for a batch of 16 items to fill."""
    with server(sst2_run, "--max-wait-ms", "300", "--max-batch", "16") as (url, proc):
        yield url, proc


def test_requests_arriving_together_share_model_calls_and_keep_their_order(patient_server):
    url, _ = patient_server
    before = httpx.get(url + "/health", timeout=10).json()

    async def together():
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=48)) as http:
            calls = [http.post("/predict", json={"texts": [text(c, 0, 0), text(c, 0, 1)]}) for c in range(24)]
            return await asyncio.wait_for(asyncio.gather(*calls), 120)

    responses = asyncio.run(together())
    assert [[p["text"] for p in r.json()["predictions"]] for r in responses] == [
        [text(c, 0, 0), text(c, 0, 1)] for c in range(24)]
    after = httpx.get(url + "/health", timeout=10).json()
    assert after["items"] - before["items"] == 48
    assert after["batches"] - before["batches"] <= 12  # 48 items in batches of up to 16 (not 24 calls)


def test_overload_gives_429_with_retry_after_and_the_server_keeps_serving(sst2_run):
    with server(sst2_run, "--max-queue", "4", "--max-items", "4", "--max-wait-ms", "400", "--max-batch", "64") as (
            url, _):
        async def burst():
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                calls = [http.post("/predict", json={"texts": [f"a good film {i}"]}) for i in range(24)]
                return await asyncio.wait_for(asyncio.gather(*calls), 120)

        responses = asyncio.run(burst())
        codes = [r.status_code for r in responses]
        assert set(codes) == {200, 429} and codes.count(200) >= 4
        refused = [r for r in responses if r.status_code == 429]
        assert all(int(r.headers["retry-after"]) >= 1 and r.json()["errors"][0]["reason"] for r in refused)
        after = post(url, "/predict", {"texts": ["still serving"]})
        assert after.status_code == 200 and after.json()["predictions"][0]["text"] == "still serving"
        health = httpx.get(url + "/health", timeout=10).json()
        assert health["refused"] == codes.count(429) and health["queued_items"] == 0


def test_a_client_that_disconnects_does_not_stall_the_others(patient_server):
    url, _ = patient_server
    port = int(url.rsplit(":", 1)[1])
    body = json.dumps({"texts": ["gone before the answer"]}).encode()
    for _ in range(3):  # clients that send a request and hang up at once
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    start = time.monotonic()
    r = post(url, "/predict", {"texts": ["a good film"]})
    assert r.status_code == 200 and time.monotonic() - start < 30
    for _ in range(100):  # the dropped requests leave the queue (bounded wait)
        health = httpx.get(url + "/health", timeout=10).json()
        if health["queued_items"] == 0 and health["accepted"] == health["answered"] + health["dropped"]:
            break
        time.sleep(0.1)
    assert health["dropped"] >= 1 and health["queued_items"] == 0


# --- SIGTERM -------------------------------------------------------------------------------------------------------
def test_sigterm_during_load_answers_every_accepted_request(sst2_run):
    with server(sst2_run, "--max-wait-ms", "300", "--max-batch", "16") as (url, proc):
        stop_sent, answers = asyncio.Event(), [0]

        async def client(http, c):
            ok, failed = 0, 0
            for r in range(200):  # keeps sending until the server stops taking requests
                try:
                    resp = await http.post("/predict", json={"texts": [text(c, r, 0)]})
                except httpx.TransportError:
                    failed += 1
                    if stop_sent.is_set():
                        break
                    continue
                assert resp.status_code == 200, resp.text
                assert resp.json()["predictions"][0]["text"] == text(c, r, 0)
                ok += 1
                answers[0] += 1
            return ok, failed

        async def load():
            async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=32)) as http:
                tasks = [asyncio.create_task(client(http, c)) for c in range(32)]
                for _ in range(1200):  # under load: 64 answers back, more than the clients' first round (a slow
                    if answers[0] >= 64:  # machine's first calls take seconds), and requests waiting in the batcher
                        break
                    await asyncio.sleep(0.05)
                proc.send_signal(signal.SIGTERM)
                stop_sent.set()
                return await asyncio.wait_for(asyncio.gather(*tasks), 120)

        results = asyncio.run(load())
        assert proc.wait(60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after its graceful shutdown
        log = server_output(proc)
        received = sum(ok for ok, _ in results)
        accepted = int(log.split("answered ")[1].split(" of ")[1].split()[0])
        answered = int(log.split("answered ")[1].split(" of ")[0])
        assert received > 32 and answered == accepted == received, log[-2000:]
        assert all(failed >= 1 for _, failed in results)  # every client saw the server stop taking requests


def test_auto_precision_says_it_follows_a_run_that_trained_in_fp32(sst2_run):
    from bertkit.serve.engine import Engine

    engine = Engine(str(sst2_run), threads=1)  # the tiny run trained in fp32 (TINY's --precision)
    assert engine.precision == "fp32" and engine.precision_reason == "auto: the run trained in fp32"
    assert Engine(str(sst2_run), precision="fp32", threads=1).precision_reason == "requested"


def test_a_request_that_fails_its_model_call_fails_alone(sst2_run, monkeypatch):
    """A model call holds the requests that arrived together: one whose items make it fail (a bug, not a refusal)
    gets its 500, the others their answers (found by using bertkit: a lone surrogate failed its neighbours)."""
    from bertkit.serve.engine import Engine
    from bertkit.tasks.classification_io import ClassifyRequest
    from bertkit.tasks.requests import RequestLimits

    engine = Engine(str(sst2_run), precision="fp32", threads=1)
    real = engine.task.predict_rows

    def predict_rows(rows, *args, **kw):
        if any(r["text"] == "boom" for r in rows):
            raise TypeError("a bug")
        return real(rows, *args, **kw)

    monkeypatch.setattr(engine.task, "predict_rows", predict_rows)
    jobs = [engine.predict_job(ClassifyRequest(texts), RequestLimits()) for texts in (["fine"], ["boom"], ["good"])]
    engine.run(jobs)
    assert [j.error for j in jobs] == [None, (500, "", "internal error while running the model (see the server log)"),
                                       None]
    assert [len(j.result) for j in (jobs[0], jobs[2])] == [1, 1]


def test_a_surrogate_pair_is_one_character_not_refused(sst2_server):
    url, _ = sst2_server
    r = post(url, "/predict", b'{"texts": ["\\ud83d\\ude00 fine"]}')  # an emoji as JSON escapes it
    assert r.status_code == 200 and r.json()["predictions"][0]["text"] == "\U0001F600 fine"


@pytest.mark.parametrize("flags, said", [
    (["--port", "99999"], "--port must be 1-65535 (got 99999)"),  # was bound as 34463, logged as 99999
    (["--threads", "0"], "--threads must be at least 1 (got 0)"),  # was run with 1, silently
    (["--max-queue", "4"], "--max-items 256 is more than --max-queue 4: a request of that many items could never "
                           "be queued"),  # was a 429 for ever
])
def test_serve_flags_that_cannot_work_are_one_line_before_the_model_loads(sst2_run, capsys, flags, said):
    from bertkit.cli import main

    assert main(["serve", "--model", str(sst2_run), *flags]) == 2
    assert capsys.readouterr().err == f"bertkit serve: error: {said}\n"
