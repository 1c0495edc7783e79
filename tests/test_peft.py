"""LoRA and IA³ through peft: only the adapter and the head train; the run folder keeps the adapter and a merged plain
checkpoint that transformers loads without peft and that answers as the adapter model does; predict, serve, export
and extract take the run."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest
import torch

from bertkit.cli import main

from .conftest import REPO, fit, small_config, tiny_finetune

pytest.importorskip("peft")


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_bert, sst2_dir):
    out = tmp_path_factory.mktemp("lora") / "run"
    return tiny_finetune(tiny_bert, "sst2", sst2_dir, out, "--epochs", "2", "--peft", "lora", "--lora-r", "4",
                         "--lora-target", "query,value")


def test_only_the_adapter_and_the_head_train(tiny_bert, sst2_dir, tmp_path):
    from safetensors.torch import load_file

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task, result = fit(tiny_bert, small_config(sst2_dir, tmp_path / "run", peft="lora", lora_r=4))
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)]  # peft's, not the user's
    assert not type(task.model).__module__.startswith("peft")  # the merged plain model again
    assert all(p.requires_grad for p in task.model.parameters())  # trainable as before
    adapter = load_file(str(tmp_path / "run" / "checkpoints" / "best" / "adapter_model.safetensors"))
    assert adapter and all("lora_" in k or ".classifier." in k or ".pooler.dense." in k for k in adapter)
    assert any(".classifier." in k for k in adapter) and any("lora_A" in k for k in adapter)
    from transformers import AutoModelForSequenceClassification

    before = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2).state_dict()
    after = load_file(str(tmp_path / "run" / "model.safetensors"))
    words = "bert.embeddings.word_embeddings.weight"
    assert torch.equal(after[words], before[words])
    assert not torch.equal(after["bert.encoder.layer.0.attention.self.query.weight"],
                           before["bert.encoder.layer.0.attention.self.query.weight"])  # merged update
    assert torch.equal(after["bert.encoder.layer.0.attention.self.key.weight"],
                       before["bert.encoder.layer.0.attention.self.key.weight"])  # not adapted
    dev = [line.rsplit("\t", 1) for line in (sst2_dir / "dev.tsv").read_text().splitlines()[1:]]
    predicted = task.predict([t.strip() for t, _ in dev])  # the merged model answers as the run scored
    gold = ["positive" if y == "1" else "negative" for _, y in dev]
    right = sum(p["label"] == g for p, g in zip(predicted, gold, strict=True))
    assert right / len(dev) == result["dev"]["accuracy"]


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # PeftModel calls it
def test_the_merged_checkpoint_loads_without_peft_and_answers_as_the_adapter(lora_run, tiny_bert):
    code = ("import sys, json, torch\n"
            "from transformers import AutoModelForSequenceClassification as M, AutoTokenizer as T\n"
            f"run = {str(lora_run)!r}\n"
            "tok = T.from_pretrained(run)\n"
            "enc = tok(['a wonderful film', 'dull and boring , weak'], padding=True, return_tensors='pt')\n"
            "with torch.no_grad():\n"
            "    logits = M.from_pretrained(run).eval()(**enc).logits\n"
            "assert 'peft' not in sys.modules and 'bertkit' not in sys.modules\n"
            "print(json.dumps(logits.tolist()))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    merged = torch.tensor(json.loads(proc.stdout.strip().splitlines()[-1]))
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    base = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    adapted = PeftModel.from_pretrained(base, lora_run / "adapter").eval()
    enc = AutoTokenizer.from_pretrained(lora_run)(["a wonderful film", "dull and boring , weak"], padding=True,
                                                  return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(adapted(**enc).logits, merged, atol=1e-4, rtol=0)
    saved = (lora_run / "config.yaml").read_text()
    assert "peft:\n  method: lora\n  lora_r: 4" in saved


def test_predict_export_and_extract_take_a_lora_run(lora_run, tmp_path, capsys):
    import io

    sys.stdin = io.StringIO("a wonderful film\n")
    try:
        assert main(["predict", "--model", str(lora_run), "--input", "-", "--precision", "fp32"]) == 0
    finally:
        sys.stdin = sys.__stdin__
    assert json.loads(capsys.readouterr().out)["label"] in ("negative", "positive")
    assert main(["export", "--model", str(lora_run), "--format", "onnx", "--output", str(tmp_path / "onnx"),
                 "--layers", "last"]) == 0
    (tmp_path / "in.txt").write_text("a wonderful film\n")
    assert main(["extract", "--model", str(lora_run), "--input", str(tmp_path / "in.txt"), "--output",
                 str(tmp_path / "feats"), "--layers", "last", "--precision", "fp32"]) == 0


def test_ia3_trains_and_a_missing_target_layer_is_a_clear_error(tiny_bert, sst2_dir, tmp_path, capsys):
    _, result = fit(tiny_bert, small_config(sst2_dir, tmp_path / "ia3", peft="ia3", lora_target=["query", "value"],
                                            epochs=1))
    assert (tmp_path / "ia3" / "adapter" / "adapter_config.json").is_file() and result["train"]["steps"] == 16
    proc = subprocess.run([sys.executable, "-m", "bertkit", "finetune", "sst2", "--model", str(tiny_bert),
                           "--data-dir", str(sst2_dir), "--peft", "lora", "--lora-target", "no_such_layer",
                           "--max-steps", "2", "--output-dir", str(tmp_path / "bad")], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 2 and "--peft lora:" in proc.stderr and "--lora-target" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("model_type,method", [("mpnet", "lora"), ("electra", "ia3")])
def test_a_model_type_without_default_layers_is_said_before_it_loads(tiny_bert, sst2_dir, tmp_path, monkeypatch,
                                                                      capsys, model_type, method):
    import shutil

    import transformers

    model = tmp_path / model_type
    shutil.copytree(tiny_bert, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": model_type}))

    def no_load(cls, *args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(no_load))
    out = tmp_path / "run"
    code = main(["finetune", "sst2", "--model", str(model), "--data-dir", str(sst2_dir), "--peft", method,
                 "--max-steps", "1", "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"--peft {method}: peft has no default layers to adapt in a '{model_type}' model" in err
    assert "--lora-target" in err and not out.exists()
