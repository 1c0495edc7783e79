"""`bertkit export --format onnx` and the ONNX Runtime backend: every head and feature extraction within 1e-4 of
torch (fp32), `predict` / `evaluate` / `serve --backend onnx` answer as torch does, and int8 runs and answers."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from bertkit.cli import main

from .conftest import SENTENCES, bertkit_env, cli_extract, cli_predict, exported, hub_cache_with, server, tiny_run

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

INPUTS = {  # other batch sizes and lengths than the export's example; NER and QA with several windows
    "sst2": {"text": SENTENCES + ["x", "the film " * 50]},
    "rte": {"text": SENTENCES[:4], "text_pair": ["great", "awful cast", "a plot " * 40, "fine"]},
    "ner": {"tokens": [s.split() for s in SENTENCES] + [["Kowalczyk"] * 30 + ["visited", "Nairobi"]],
            "doc": list(range(len(SENTENCES) + 1))},
    "qa": {"question": ["which colour ?", "name the colour .", "what color appears ?"],
           "context": ["the film was red and long", " ".join(["the report said"] * 25) + " blue", "Green ."]},
}


def test_export_folder_is_self_describing_with_dynamic_axes(tmp_path_factory, tiny_bert):
    run, out = exported(tmp_path_factory, tiny_bert, "sst2")
    assert {"model.onnx", "features.onnx", "config.json", "config.yaml", "tokenizer.json", "export.json"} <= {
        p.name for p in out.iterdir()}
    info = json.loads((out / "export.json").read_text())
    assert info["precision"] == "fp32" and info["task_head"] == "SequenceClassification"
    assert info["task"] == "sequence-classification" and info["pipeline_tag"] == "text-classification"
    assert info["layers"] == [0, 1, 2] and info["graphs"]["model.onnx"]["outputs"] == ["logits"]
    assert all(g["max_abs_diff_fp32"] < 1e-4 for g in info["graphs"].values())
    graph = onnx.load(str(out / "model.onnx")).graph
    for i in graph.input:
        assert [d.dim_param for d in i.type.tensor_type.shape.dim] == ["batch", "sequence"]
    # ONNX Runtime alone (no bertkit, no torch) runs the graph with the saved tokenizer
    code = ("import sys, numpy as np, onnxruntime as ort; from tokenizers import Tokenizer; "
            f"t = Tokenizer.from_file({str(out / 'tokenizer.json')!r}); e = t.encode('a good film'); "
            f"s = ort.InferenceSession({str(out / 'model.onnx')!r}); "
            "x = {'input_ids': np.array([e.ids]), 'attention_mask': np.array([e.attention_mask]), "
            "'token_type_ids': np.array([e.type_ids])}; print(s.run(None, x)[0].shape); "
            "assert 'bertkit' not in sys.modules and 'torch' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "(1, 2)", done.stderr[-2000:]


@pytest.mark.parametrize("name", ["sst2", "rte", "ner", "qa"])
def test_onnx_outputs_equal_torch_on_every_head(tmp_path_factory, tiny_bert, name, monkeypatch):
    import datasets

    from bertkit.export.runtime import load_onnx_task
    from bertkit.inference import forward_all
    from bertkit.tasks import load_task

    run, out = exported(tmp_path_factory, tiny_bert, name, *(["--no-features"] if name != "sst2" else []))
    torch_task, onnx_task = load_task(str(run)), load_onnx_task(out)
    features = torch_task.encode(datasets.Dataset.from_dict(INPUTS[name]))
    if name in ("ner", "qa"):  # some inputs take several windows
        assert len(features) > len(next(iter(INPUTS[name].values())))
    # the graphs' whole outputs, not what an adapter keeps of them (QA: its answer candidates, tests/test_qa.py)
    monkeypatch.setattr(type(torch_task), "output_reducer", lambda self, features: None)
    expected = forward_all(torch_task, features, 3, "fp32")
    got = onnx_task.infer(features, 4)  # other batches: padding must not matter
    assert len(got) == len(expected)
    for e, g in zip(expected, got, strict=True):
        assert e.keys() == g.keys()
        for k in e:
            assert e[k].shape == g[k].shape
            np.testing.assert_allclose(g[k], e[k], atol=1e-4, rtol=0)
    if name == "ner":
        assert onnx_task.casing and onnx_task.model.config.type_vocab_size == 4  # a casing run


@pytest.mark.parametrize("settings", [("embeddings,all", "none", "none"), ("last", "concat", "mean"),
                                      ("1,2", "mean", "sentence-mean")])
def test_onnx_features_equal_torch(tmp_path_factory, tiny_bert, settings):
    from bertkit.export.runtime import OnnxFeatureExtractor
    from bertkit.extract import FeatureExtractor

    run, out = exported(tmp_path_factory, tiny_bert, "sst2")
    words = [s.split() for s in SENTENCES]
    layers, combine, pool = settings
    expected = FeatureExtractor(str(run), layers, combine, pool, precision="fp32", batch_size=4)(words)
    got = OnnxFeatureExtractor(out, layers, combine, pool, batch_size=3)(words)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, atol=1e-4, rtol=0)


def test_base_checkpoint_exports_chosen_layers_only(tiny_bert, tmp_path, capsys):
    from bertkit.errors import BertkitError
    from bertkit.export.runtime import OnnxFeatureExtractor

    out = tmp_path / "base"
    assert main(["export", "--model", str(tiny_bert), "--format", "onnx", "--output", str(out), "--layers", "-1"]) == 0
    info = json.loads((out / "export.json").read_text())
    assert info["layers"] == [2] and list(info["graphs"]) == ["features.onnx"] and info["task_head"] is None
    with pytest.raises(BertkitError, match=r"hidden states \[0\] are not in"):
        OnnxFeatureExtractor(out, "0", "concat", "mean")
    assert OnnxFeatureExtractor(out, "last", "concat", "cls")([["a", "film"]])[0].shape == (32,)
    assert main(["predict", "--model", str(out), "--backend", "onnx", "--input", str(tmp_path / "x.txt")]) == 2
    assert "not a fine-tuned checkpoint" in capsys.readouterr().err


@pytest.mark.usefixtures("cpu_only")  # torch's answers on the CPU, as ONNX Runtime's, to 1e-5
@pytest.mark.parametrize("name", ["sst2", "rte", "ner", "qa"])
def test_predict_backend_onnx_answers_as_torch(tmp_path_factory, tiny_bert, tmp_path, name):
    run, out = exported(tmp_path_factory, tiny_bert, name, *(["--no-features"] if name != "sst2" else []))
    data = INPUTS[name]
    if name == "sst2":
        rows, flags = data["text"], ("--probs",)
    elif name == "rte":
        rows = [{"premise": t, "hypothesis": p} for t, p in zip(data["text"], data["text_pair"], strict=True)]
        flags = ("--probs",)
    elif name == "ner":
        rows, flags = [" ".join(t) for t in data["tokens"]], ()
    else:
        rows = [{"question": q, "context": c} for q, c in zip(data["question"], data["context"], strict=True)]
        flags = ()
    expected = cli_predict(run, rows, tmp_path, *flags)
    got = cli_predict(out, rows, tmp_path, "--backend", "onnx", *flags)
    for e, g in zip(expected, got, strict=True):
        assert {k: v for k, v in e.items() if k not in ("score", "probabilities")} == {
            k: v for k, v in g.items() if k not in ("score", "probabilities")}
        if "score" in e:
            assert g["score"] == pytest.approx(e["score"], abs=1e-5)


def test_int8_export_runs_and_answers(tmp_path_factory, tiny_bert, tmp_path, capsys):
    import datasets

    from bertkit.export.runtime import load_onnx_task

    run, fp32 = exported(tmp_path_factory, tiny_bert, "sst2")
    _, int8 = exported(tmp_path_factory, tiny_bert, "sst2", "--quantize", "int8")
    info = json.loads((int8 / "export.json").read_text())
    assert info["precision"] == "int8" and info["quantize"] == "int8"
    assert (int8 / "model.onnx").stat().st_size < 0.5 * (fp32 / "model.onnx").stat().st_size
    got = cli_predict(int8, SENTENCES, tmp_path, "--probs")  # --backend auto: an export folder runs on onnx
    assert [g["text"] for g in got] == SENTENCES
    assert all(g["label"] in ("negative", "positive") and sum(g["probabilities"].values()) == pytest.approx(1)
               for g in got)
    a, b = load_onnx_task(fp32), load_onnx_task(int8)
    features = a.encode(datasets.Dataset.from_dict({"text": SENTENCES}))
    diff = max(float(np.abs(x["logits"] - y["logits"]).max())
               for x, y in zip(a.infer(features), b.infer(features), strict=True))
    assert 0 < diff < 1  # quantised, and still close to the fp32 graph
    data = tmp_path_factory.getbasetemp() / "deploy-runs" / "data-sst2"
    assert main(["evaluate", "--model", str(int8), "--task", "sst2", "--data-dir", str(data),
                 "--output", str(tmp_path / "eval.json")]) == 0
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["precision"] == "int8" and result["examples"] == 64
    # the accuracy is that of the int8 graph's own answers on the dev file
    dev = [line.rsplit("\t", 1) for line in (data / "dev.tsv").read_text().splitlines()[1:]]
    answers = cli_predict(int8, [t.strip() for t, _ in dev], tmp_path, "--backend", "onnx")
    right = sum(a["label"] == ["negative", "positive"][int(y)] for a, (_, y) in zip(answers, dev, strict=True))
    assert result["accuracy"] == pytest.approx(right / 64, abs=1e-12)


@pytest.mark.usefixtures("cpu_only")  # torch's answers on the CPU, as ONNX Runtime's, to 1e-5
def test_serve_backend_onnx_answers_as_torch(tmp_path_factory, tiny_bert, tmp_path):
    import httpx

    run, out = exported(tmp_path_factory, tiny_bert, "sst2")
    expected = cli_predict(run, SENTENCES, tmp_path, "--probs")
    reference = cli_extract(run, SENTENCES, tmp_path, "--layers", "last", "--pool", "first")
    with server(out) as (url, _):  # --backend auto: onnx for an export folder
        r = httpx.post(url + "/predict", json={"texts": SENTENCES, "probs": True}, timeout=60)
        assert r.status_code == 200, r.text
        for e, g in zip(expected, r.json()["predictions"], strict=True):
            assert g["label"] == e["label"] and g["score"] == pytest.approx(e["score"], abs=1e-5)
        r = httpx.post(url + "/embed", json={"texts": SENTENCES, "layers": "last", "pool": "first"}, timeout=60)
        for (words, vectors), got in zip(reference, r.json()["embeddings"], strict=True):
            assert got["words"] == words
            np.testing.assert_allclose(np.asarray(got["vectors"]), vectors, atol=1e-4)
        meta = httpx.get(url + "/metadata", timeout=10).json()
        assert meta["backend"] == "onnx" and meta["precision"] == "fp32"
        assert meta["embed"]["exported_layers"] == [0, 1, 2]


def test_onnx_backend_errors_are_one_line(tmp_path_factory, tiny_bert, tmp_path, capsys):
    run = tiny_run(tmp_path_factory, tiny_bert, "sst2")
    _, out = exported(tmp_path_factory, tiny_bert, "sst2")
    (tmp_path / "in.txt").write_text("a film\n")
    assert main(["predict", "--model", str(run), "--backend", "onnx", "--input", str(tmp_path / "in.txt")]) == 2
    assert "bertkit export --model" in capsys.readouterr().err
    assert main(["predict", "--model", str(out), "--backend", "onnx", "--precision", "bf16", "--input",
                 str(tmp_path / "in.txt")]) == 2
    assert "--precision bf16 is for the torch backend" in capsys.readouterr().err
    assert main(["export", "--model", str(run), "--format", "onnx", "--output", str(out)]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert main(["serve", "--model", str(run), "--backend", "onnx"]) == 2
    assert "not an ONNX export" in capsys.readouterr().err
    (tmp_path / "afile").write_text("")
    assert main(["export", "--model", str(run), "--format", "onnx", "--output", str(tmp_path / "afile")]) == 2
    assert f"output folder {tmp_path / 'afile'} is a file" in capsys.readouterr().err  # was "is not empty"
    said = "it is a `bertkit export` folder (ONNX), which ONNX Runtime runs"  # was: no model.safetensors
    text = str(tmp_path / "in.txt")
    for args in (["predict", "--backend", "torch", "--input", text],
                 ["extract", "--layers", "last", "--input", text, "--output", str(tmp_path / "f")]):
        assert main([args[0], "--model", str(out), *args[1:]]) == 2
        assert said in capsys.readouterr().err


def test_help_imports_neither_the_server_nor_onnx():
    code = ("import sys; from bertkit.cli import build_parser; p = build_parser(); "
            "p.parse_args(['serve', '--model', 'x']); p.parse_args(['export', '--model', 'x', '--format', 'onnx', "
            "'--output', 'y']); heavy = {'uvicorn', 'fastapi', 'starlette', 'onnx', 'onnxruntime', 'onnxscript'}; "
            "print(sorted(heavy & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=bertkit_env(), timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr[-2000:]


def test_a_hub_id_exports_from_the_hubs_cache_with_its_run_config(tmp_path_factory, tiny_bert, tmp_path, monkeypatch):
    hub_cache_with(tiny_run(tmp_path_factory, tiny_bert, "sst2"), tmp_path / "hub", "acme/tiny-sst2", monkeypatch)
    out = tmp_path / "onnx"
    assert main(["export", "--model", "acme/tiny-sst2", "--output", str(out), "--no-features"]) == 0
    info = json.loads((out / "export.json").read_text())
    assert info["source"] == "acme/tiny-sst2" and info["task"] == "sequence-classification"
    assert (out / "config.yaml").is_file()  # the run's settings came with it, as from a folder
