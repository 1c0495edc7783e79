"""Tokenised features are cached on disk by content and settings, reused, and can be switched off."""

from __future__ import annotations

import datasets

from bertkit import SequenceClassification


def _texts(n=40):
    return datasets.Dataset.from_dict({"text": [f"a film number {i} that was good" for i in range(n)],
                                       "label": [i % 2 for i in range(n)]})


def test_second_encode_reuses_the_cached_file(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    clf = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["negative", "positive"])
    first = clf.encode(_texts())
    files = sorted((tmp_path / "cache").glob("*.arrow"))
    assert len(files) == 1 and first.cache_files[0]["filename"] == str(files[0])
    mtime = files[0].stat().st_mtime_ns
    again = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["negative", "positive"])
    second = again.encode(_texts())
    assert second.cache_files[0]["filename"] == str(files[0]) and files[0].stat().st_mtime_ns == mtime
    assert second[:] == first[:]
    # anything that changes the features changes the key: other data, other max length
    clf.encode(_texts(41))
    SequenceClassification.from_pretrained(str(tiny_bert), label_names=["negative", "positive"],
                                           max_length=8).encode(_texts())
    assert len(list((tmp_path / "cache").glob("*.arrow"))) == 3
    short = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["negative", "positive"],
                                                   max_length=8).encode(_texts())
    assert max(short["length"]) == 8 and max(first["length"]) > 8


def test_selected_rows_are_hashed_not_the_parent_table(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    clf = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["negative", "positive"])
    a = clf.encode(_texts().select(range(10)))
    b = clf.encode(_texts().select(range(10, 20)))
    assert a["input_ids"] != b["input_ids"] and len(a) == len(b) == 10


def test_cache_off_keeps_features_in_memory(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTKIT_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    clf = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["negative", "positive"])
    features = clf.encode(_texts())
    assert features.cache_files == [] and not list(tmp_path.rglob("*.arrow"))


def test_a_cache_folder_that_cannot_be_written_is_said_once_and_the_run_goes_on(tiny_bert, sst2_dir, tmp_path,
                                                                                 monkeypatch, capsys):
    """A home that cannot be written (a container run under another user, HF_HOME pointed elsewhere) stopped every
    run with "Permission denied: /home/..." (the cache folder is made under it); a file where the folder should be
    refuses it the same way here, as root too."""
    from bertkit.cli import main

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "a-file" / "cache"))
    clf = SequenceClassification.from_pretrained(str(tiny_bert), label_names=["negative", "positive"])
    features = clf.encode(_texts())
    assert features.cache_files == [] and len(features) == 40
    clf.encode(_texts(41))
    err = capsys.readouterr().err
    assert err.count("feature cache off: ") == 1 and str(tmp_path / "a-file" / "cache") in err, err
    assert main(["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(sst2_dir), "--max-steps", "1",
                 "--precision", "fp32", "--output-dir", str(tmp_path / "run")]) == 0


def test_a_disk_too_full_for_an_entry_is_said_once_and_leaves_nothing_behind(tiny_bert, tmp_path):
    """The disk fills while datasets writes a cache entry (no file may pass 1 KiB: RLIMIT_FSIZE, in a process of its
    own): the features come from memory, equal to the cached ones, said once; datasets' temporary, which its own
    clean-up left (it raised again on the same disk), is removed. It was the run's traceback."""
    import json
    import os
    import subprocess
    import sys

    code = f"""import json, resource, datasets, torch._dynamo  # torch 2.8 writes a module when _dynamo is imported
from bertkit import SequenceClassification
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))
texts = datasets.Dataset.from_dict({{"text": [f"a film number {{i}} that was good" for i in range(400)],
                                    "label": [i % 2 for i in range(400)]}})
clf = SequenceClassification.from_pretrained({str(tiny_bert)!r}, label_names=["negative", "positive"])
first, again = clf.encode(texts), clf.encode(texts.select(range(300)))
print(json.dumps([first.cache_files, first[:]["input_ids"], again.cache_files, len(again)]))"""

    def encode(env: dict):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                              env={**os.environ, **env})
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.splitlines()[-1]), proc.stderr

    (_, reference, _, _), _ = encode({"BERTKIT_CACHE": "off"})
    (files, ids, files_again, n_again), err = encode({"BERTKIT_CACHE": str(tmp_path / "cache")})
    assert ids == reference and files == files_again == [] and n_again == 300
    assert err.count("feature cache off: ") == 1 and "File too large" in err, err
    assert list((tmp_path / "cache").iterdir()) == []  # no entry, no temporary
