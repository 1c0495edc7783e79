import os
import subprocess
import sys

from .conftest import REPO


def test_notebook_example_runs_on_the_tiny_model(tiny_bert, sst2_dir, tmp_path):
    env = {**os.environ, "BERTKIT_EXAMPLE_MODEL": str(tiny_bert), "BERTKIT_EXAMPLE_DATA": str(sst2_dir),
           "BERTKIT_EXAMPLE_TRAIN": "256", "BERTKIT_EXAMPLE_OUT": str(tmp_path / "run"), "BERTKIT_EXAMPLE_LR": "1e-2",
           "BERTKIT_EXAMPLE_EPOCHS": "3"}  # 24 steps: 8 (one epoch at batch 32) are too few for the tiny model
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "sst2_notebook.py")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    accuracy = float(proc.stdout.split("dev accuracy:")[1].split()[0])
    assert accuracy >= 0.75
    assert "{0: 'negative', 1: 'positive'}" in proc.stdout


def run_example(name, env, args=()):
    proc = subprocess.run([sys.executable, str(REPO / "examples" / name), *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_ner_example_runs_on_the_tiny_model(tiny_bert, tmp_path):
    from .test_ner import write_conll

    data = tmp_path / "conll2003"
    data.mkdir()
    write_conll(data / "train.txt", 128, seed=0, long_every=16)
    write_conll(data / "valid.txt", 32, seed=1, long_every=8)
    out = run_example("ner_notebook.py", {"BERTKIT_EXAMPLE_MODEL": str(tiny_bert), "BERTKIT_EXAMPLE_DATA": str(data),
                                          "BERTKIT_EXAMPLE_OUT": str(tmp_path / "run"), "BERTKIT_EXAMPLE_LR": "1e-2",
                                          "BERTKIT_EXAMPLE_EPOCHS": "2"})
    assert 0 <= float(out.split("valid entity F1:")[1].split()[0]) <= 1
    assert "'entities'" in out and "'Brussels', 'to', 'London', '.'" in out  # raw text is split into words


def test_qa_example_runs_on_the_tiny_model(tiny_bert, tmp_path):
    from .test_qa import write_squad

    data = write_squad(tmp_path / "squad", n_train=64, n_dev=16)
    out = run_example("qa_notebook.py", {"BERTKIT_EXAMPLE_MODEL": str(tiny_bert), "BERTKIT_EXAMPLE_DATA": str(data),
                                         "BERTKIT_EXAMPLE_OUT": str(tmp_path / "run"), "BERTKIT_EXAMPLE_LR": "1e-2"})
    assert "validation EM / F1:" in out and "'answer'" in out and "| gold:" in out


def test_extract_example_runs_on_the_tiny_model(tiny_bert, tmp_path):
    out = run_example("extract_notebook.py", {"BERTKIT_EXAMPLE_MODEL": str(tiny_bert), "BERTKIT_EXAMPLE_LAYERS": "all",
                                              "BERTKIT_EXAMPLE_OUT": str(tmp_path / "feats")})
    assert "[(9, 64), (2, 64)]" in out and "[(32,), (32,)]" in out and "(9, 64)" in out.splitlines()[-2]


def test_casing_example_scores_a_casing_checkpoint_from_plain_transformers(tiny_bert, tmp_path):
    import bertkit

    from .test_ner import LABELS, write_conll

    ner = bertkit.TokenClassification.from_pretrained(str(tiny_bert), label_names=LABELS, casing=True)
    ner.save(tmp_path / "cased")
    out = run_example("ner_casing_plain.py", {}, [str(tmp_path / "cased"),
                                                  str(write_conll(tmp_path / "test.txt", 8, seed=2, long_every=4))])
    assert "type_vocab_size 4, bertkit_casing True; 8 sentences" in out
    assert "entity F1 with casing ids:" in out and "entity F1 without (all 0):" in out
