"""Serving at the model's own cost: the CPU seconds `bertkit serve` spends per request, read from the server
process itself, beside what the same texts cost without a server: a one-at-a-time
`transformers.pipeline("text-classification")` call, and the bare model on length-sorted batches (tokenizer
included), in fp32 and bf16 (globally sorted, and in random groups as a server's calls hold them); with the
server's HTTP side (its main thread: uvicorn, the app, JSON) apart from its model thread, the items per model call,
p50/p99 latency and requests/s at 1, 8 and 64 concurrent clients.

    python benchmarks/serve_throughput.py --model runs/sst2                                       # the measurement
    python benchmarks/serve_throughput.py --model runs/sst2 --load httpx --requests 40 --concurrency 8  # smoke

Every request is one SST-2 dev sentence (`{"texts": [sentence]}`), cycling through the dev set. Each server
setting (`--servers`: server flags separated by ';', default its default precision, then --precision fp32) runs in
its own process on 127.0.0.1 with one intra-op thread (`--threads 1`, as every other row here: CPU seconds then
count the work, not threads spinning). First `--pipeline-requests` requests from asyncio + httpx clients in another
process warm it up, every answer checked to be its own sentence's; then the measured load comes from `wrk` (C, one
thread, `--seconds` per client count; each connection sends its next request when the last is answered), or with
`--load httpx` (where wrk is not installed) from the httpx clients again, which spend more of the shared cores
than the server does. The server's CPU seconds are its utime + stime (/proc/PID/stat, all its threads; the HTTP
side: its main thread, where uvicorn's event loop runs) over the load, divided by the requests answered. The
pipeline and the bare model run in this process, one torch thread, measured with `time.process_time()`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np  # noqa: E402
from onnx_setup import default_data_dir, dev_sentences  # noqa: E402


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """utime + stime of process `pid` (all its threads), or of its thread `tid`, in seconds."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = open(path).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(model: str, flags: list[str], timeout: float = 180) -> tuple[subprocess.Popen, str, str]:
    """`bertkit serve` in its own process; leading NAME=value words of `flags` are its environment (e.g.
    PYTHONPATH=../base: another checkout's server, for an A/B in one invocation)."""
    import httpx

    env = dict(os.environ)
    while flags and "=" in flags[0] and not flags[0].startswith("-"):
        name, value = flags[0].split("=", 1)
        env[name], flags = value, flags[1:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "bertkit.cli", "serve", "--model", model, "--port", str(port),
                             "--log-level", "warning", "--threads", "1", *flags], stderr=subprocess.PIPE, text=True,
                            env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                banner = next((line for line in iter(proc.stderr.readline, "") if "bertkit serve:" in line), "")
                return proc, url, banner.strip()
        except httpx.TransportError:
            time.sleep(0.25)
    proc.kill()
    raise SystemExit(f"the server did not start within {timeout} s")


async def load(url: str, texts: list[str], clients: int, requests: int) -> dict:
    """`requests` requests from `clients` concurrent clients: seconds, latencies and the labels served."""
    import httpx

    latencies, labels, counter = [], {}, iter(range(requests))

    async def client(http):
        for i in counter:  # shared: every request index is sent once
            text = texts[i % len(texts)]
            t0 = time.perf_counter()
            r = await http.post("/predict", json={"texts": [text]})
            latencies.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
            answer = r.json()["predictions"][0]
            assert answer["text"] == text, answer
            labels[text] = answer["label"]

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        t0 = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(client(http) for _ in range(clients))), 3600)
        return {"seconds": time.perf_counter() - t0, "latencies": latencies, "labels": labels}


def loader(args) -> None:
    """The load generator, in its own process: prints its result as JSON."""
    texts = dev_sentences(args.data_dir)
    print(json.dumps(asyncio.run(load(args.url, texts, args.clients, args.requests))))


WRK_SCRIPT = """
local bodies, i = {}, 0
for line in io.lines(os.getenv("BODIES")) do bodies[#bodies + 1] = line end
request = function()
  i = i % #bodies + 1
  return wrk.format("POST", "/predict", {["Content-Type"] = "application/json"}, bodies[i])
end
done = function(summary, latency, requests)
  io.write(string.format("WRK %d %d %d %d %d\\n", summary.requests, summary.errors.status + summary.errors.read
    + summary.errors.timeout, summary.duration, latency:percentile(50), latency:percentile(99)))
end
"""


def wrk_load(url: str, texts: list[str], clients: int, seconds: int) -> dict:
    """`clients` connections of wrk (C, one thread: its load costs the cores little) for `seconds`, each request one
    text: {requests, errors, seconds, p50, p99 (ms)}."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bodies.jsonl").write_text("".join(json.dumps({"texts": [t]}) + "\n" for t in texts))
        (Path(tmp) / "load.lua").write_text(WRK_SCRIPT)
        out = subprocess.run(["wrk", "-t1", f"-c{clients}", f"-d{seconds}s", "--timeout", "60s", "-s",
                              str(Path(tmp) / "load.lua"), url], capture_output=True, text=True, check=True,
                             env={**os.environ, "BODIES": str(Path(tmp) / "bodies.jsonl")}).stdout
    n, errors, micros, p50, p99 = map(int, next(li for li in out.splitlines() if li.startswith("WRK ")).split()[1:])
    return {"requests": n, "errors": errors, "seconds": micros / 1e6, "p50": p50 / 1000, "p99": p99 / 1000}


def served(model: str, flags: list[str], args, texts: list[str]) -> tuple[list[dict], str, dict]:
    import httpx

    proc, url, banner = start_server(model, flags)
    rows = []
    try:  # warm-up, and every answer checked to be its own sentence's (the labels for the agreement below)
        labels = run_load(url, 8, args.pipeline_requests, args)["labels"]
        for clients in [int(c) for c in args.concurrency.split(",")]:
            health = httpx.get(url + "/health", timeout=10).json()
            before, before_http = cpu_seconds(proc.pid), cpu_seconds(proc.pid, proc.pid)
            if args.load == "wrk":
                result = wrk_load(url, texts, clients, args.seconds)
                assert result["errors"] == 0, result
                n, p50, p99 = result["requests"], result["p50"], result["p99"]
            else:
                result = run_load(url, clients, args.requests, args)
                n = args.requests
                p50, p99 = np.percentile(result["latencies"], [50, 99]) * 1000
            cpu, http = cpu_seconds(proc.pid) - before, cpu_seconds(proc.pid, proc.pid) - before_http
            after = httpx.get(url + "/health", timeout=10).json()
            calls = after["batches"] - health["batches"]
            rows.append({"clients": clients, "requests": n, "cpu_ms": 1000 * cpu / n, "http_ms": 1000 * http / n,
                         "rps": n / result["seconds"], "p50": p50, "p99": p99,
                         "items_per_call": (after["items"] - health["items"]) / calls})
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    return rows, banner, labels


def run_load(url: str, clients: int, requests: int, args) -> dict:
    cmd = [sys.executable, __file__, "--loader", "--url", url, "--clients", str(clients), "--requests",
           str(requests), "--data-dir", args.data_dir, "--model", "-"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def pipeline_cpu(path: str, texts: list[str], n: int) -> tuple[float, list[str]]:
    """CPU ms per one-at-a-time pipeline call (fp32, one thread), and its labels."""
    from transformers import pipeline

    pipe = pipeline("text-classification", model=path, tokenizer=path, device="cpu")
    for text in texts[:8]:
        pipe(text)  # warm-up
    labels = []
    t0 = time.process_time()
    for i in range(n):
        labels.append(pipe(texts[i % len(texts)])[0]["label"])
    return 1000 * (time.process_time() - t0) / n, labels


def bare_cpu(path: str, texts: list[str], batch: int, precision: str, groups: int = 0) -> float:
    """CPU ms per text of the model on length-sorted batches of `batch` texts, tokenizer included. `groups` > 0:
    the texts in random groups of that many (as a server's calls hold them), each sorted by length into batches."""
    import random

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    order = list(range(len(texts)))
    random.Random(0).shuffle(order)
    calls = [order[k:k + groups] for k in range(0, len(order), groups)] if groups else [order]
    batches = [sorted(call, key=lambda i: len(texts[i]))[k:k + batch] for call in calls
               for k in range(0, len(call), batch)]

    def once():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            for idx in batches:
                enc = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=128,
                          return_tensors="pt")
                model(**enc).logits.float().softmax(-1)

    once()  # warm-up
    t0 = time.process_time()
    once()
    return 1000 * (time.process_time() - t0) / len(texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a fine-tuned sequence-classification run folder")
    parser.add_argument("--data-dir", default=default_data_dir())
    parser.add_argument("--concurrency", default="1,8,64", help="client counts, comma-separated")
    parser.add_argument("--load", choices=["wrk", "httpx"], default="wrk" if shutil.which("wrk") else "httpx",
                        help="the load generator: wrk (C; Debian package `wrk`; default where installed) for "
                             "--seconds per level, or asyncio + httpx clients (Python: they need the cores "
                             "themselves) for --requests")
    parser.add_argument("--seconds", type=int, default=20, help="wrk: seconds per concurrency level")
    parser.add_argument("--requests", type=int, default=1000, help="httpx: requests per concurrency level")
    parser.add_argument("--pipeline-requests", type=int, default=400, help="one-at-a-time pipeline calls")
    parser.add_argument("--servers", default=";--precision fp32",
                        help="server settings to measure, ';'-separated `bertkit serve` flags (default: its "
                             "default, then --precision fp32), each after optional NAME=value words for its "
                             "environment; an export folder as --model needs --backend onnx")
    parser.add_argument("--loader", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--clients", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loader:
        return loader(args)
    import torch

    from bertkit.export.runtime import is_export, read_export
    from bertkit.models import resolve_model
    from bertkit.utils import hardware

    torch.set_num_threads(1)
    texts = dev_sentences(args.data_dir)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = ["| setting | clients | requests | CPU ms per request (per text) | of which HTTP side (main thread) | "
             "items per model call | requests/s | p50 ms | p99 ms |", "|---|---|---|---|---|---|---|---|---|"]
    all_labels, banners = {}, []
    for flags in args.servers.split(";"):
        rows, banner, labels = served(args.model, flags.split(), args, texts)
        banners.append(banner)
        all_labels[flags or "default"] = labels
        for r in rows:
            lines.append(f"| serve {flags or '(default)'} | {r['clients']} | {r['requests']} | {r['cpu_ms']:.2f} | "
                         f"{r['http_ms']:.2f} | {r['items_per_call']:.1f} | {r['rps']:.1f} | {r['p50']:.1f} | "
                         f"{r['p99']:.1f} |")
    path = resolve_model(read_export(args.model)["source"] if is_export(args.model) else args.model)[0]
    pipe_ms, pipe_labels = pipeline_cpu(path, texts, args.pipeline_requests)
    lines.append(f"| pipeline, one call at a time, fp32 | 1 | {args.pipeline_requests} | {pipe_ms:.2f} | | | | | |")
    for precision in ("fp32", "bf16"):
        for batch in (16, 64):
            ms = bare_cpu(path, texts, batch, precision)
            lines.append(f"| bare model, sorted batches of {batch}, {precision} | | {len(texts)} texts | {ms:.2f} "
                         "| | | | | |")
        for groups in (1, 8, 32):  # what a server's calls hold: a few texts of random lengths
            ms = bare_cpu(path, texts, 16, precision, groups)
            lines.append(f"| bare model, random groups of {groups} (sorted within, batches of 16), {precision} | | "
                         f"{len(texts)} texts | {ms:.2f} | | {groups} | | | |")
    agree = {name: sum(labels.get(t) == pipe_labels[i] for i, t in enumerate(texts[:args.pipeline_requests])
                       if t in labels) for name, labels in all_labels.items()}
    head = (f"`python {' '.join(sys.argv)}` — {started}; {hardware()}; one thread everywhere; the served labels "
            f"agree with the fp32 pipeline's on {agree} of {args.pipeline_requests} sentences.\n\n"
            + "\n".join(f"- {b}" for b in banners if b) + "\n\n")
    print(head + "\n".join(lines))


if __name__ == "__main__":
    main()
