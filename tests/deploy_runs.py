"""Helpers for the serving and export tests: tiny fine-tuned runs of every head (made once per test session), a
real `bertkit serve` process on a free 127.0.0.1 port, and `bertkit predict` / `bertkit extract` references."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from bertkit.cli import main

from .conftest import REPO, write_sst2
from .test_ner import MAX_LENGTH, write_conll
from .test_pairs import write_rte
from .test_qa import SMALL, write_squad

TINY = ["--precision", "fp32", "--lr", "1e-2", "--batch-size", "16"]
SENTENCES = ["the film was good and funny", "a dull , boring plot", "wonderful cast", "the story is quite weak",
             "Peter Blackburn visited Paris with the United Nations today .", "Jordan met Smith in London"]


def tiny_run(tmp_path_factory, tiny_bert, name: str) -> Path:
    """A fine-tuned tiny run: sst2 (single texts), rte (pairs), ner (CoNLL-2003 with windows and casing), qa
    (SQuAD with several windows per context). Made once per session, shared by the test modules."""
    root = tmp_path_factory.getbasetemp() / "deploy-runs"
    out, data = root / name, root / f"data-{name}"
    if (out / "config.json").is_file():
        return out
    data.mkdir(parents=True, exist_ok=True)
    if name == "sst2":
        args = ["sst2", "--data-dir", str(write_sst2(data)), "--epochs", "2"]
    elif name == "rte":
        args = ["rte", "--data-dir", str(write_rte(data)), "--epochs", "2"]
    elif name == "ner":
        for split, n, seed in (("train", 256, 0), ("valid", 32, 1), ("test", 32, 2)):
            write_conll(data / f"{split}.txt", n, seed, long_every=16)
        args = ["conll2003", "--data-dir", str(data), "--epochs", "2", "--max-length", str(MAX_LENGTH), "--ner-casing"]
    else:
        args = ["squad", "--data-dir", str(write_squad(data, n_dev=16)), "--epochs", "1", "--skip-bad-examples",
                *SMALL]
    assert main(["finetune", *args, "--model", str(tiny_bert), *TINY, "--output-dir", str(out)]) == 0
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bertkit_env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@contextmanager
def server(model, *flags: str, startup_s: float = 120):
    """A `bertkit serve` process on a free port; yields (base url, process). Stopped with SIGTERM on exit (killed if
    it does not stop within 30 s)."""
    import httpx

    port = free_port()
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"bertkit-serve-{port}.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "bertkit.cli", "serve", "--model", str(model), "--port", str(port),
                             "--precision", "fp32", "--log-level", "warning", *flags], stdout=log,
                            stderr=subprocess.STDOUT, env=bertkit_env(), cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            assert proc.poll() is None, f"server exited with {proc.returncode}: {_tail(log)}"
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"server not up after {startup_s} s: {_tail(log)}"
            time.sleep(0.25)
        proc.log = log
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        log.close()


def _tail(log) -> str:
    log.flush()
    log.seek(0)
    return log.read()[-3000:]


def server_output(proc) -> str:
    return _tail(proc.log)


def cli_predict(model, rows: list, tmp_path: Path, *flags: str) -> list[dict]:
    """`bertkit predict` on `rows` (texts; or dicts for JSONL input: pairs, QA), as its JSONL rows."""
    path = tmp_path / f"in-{time.monotonic_ns()}.{'jsonl' if isinstance(rows[0], dict) else 'txt'}"
    path.write_text("".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in rows))
    out = tmp_path / f"out-{time.monotonic_ns()}.jsonl"
    assert main(["predict", "--model", str(model), "--input", str(path), "--output", str(out), "--precision", "fp32",
                 *flags]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def cli_extract(model, sentences: list[str], tmp_path: Path, *flags: str):
    """`bertkit extract` of raw-text lines, float32, as (words, array) per sentence."""
    from bertkit.extract import FeatureReader

    path = tmp_path / f"sentences-{time.monotonic_ns()}.txt"
    path.write_text("\n".join(sentences) + "\n")
    out = tmp_path / f"features-{time.monotonic_ns()}"
    assert main(["extract", "--model", str(model), "--input", str(path), "--output", str(out), "--dtype", "float32",
                 "--precision", "fp32", *flags]) == 0
    return list(FeatureReader(out))
