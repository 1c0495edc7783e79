"""Does SIGTERM at the worst moment leave an output's temporary behind? Sends it the instant the temporary appears.

    python benchmarks/sigterm_race.py --command extract --model minilm-l6 --runs 24
    python benchmarks/sigterm_race.py --command predict --model runs/sst2 --runs 12
    python benchmarks/sigterm_race.py --command extract --model minilm-l6 --code /tmp/old   # another checkout

Each run starts `bertkit COMMAND` on 60,000 short sentences, polls the output's folder without sleeping until the
temporary appears (`.feats.*.tmp`, `.out.jsonl.*.tmp`), waits 0 to 2 ms more and sends SIGTERM. A run is good when
the exit code is 143 and the folder is empty. Prints each run and the count of bad ones (`tests/test_cli.py` sends
it once a run, polling every 20 ms; this is that test many times over, at the worst moment).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--command", choices=["extract", "predict"], default="extract")
    ap.add_argument("--model", required=True, help="extract: a model; predict: a fine-tuned run folder")
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--code", default=str(Path(__file__).resolve().parents[1]), help="the checkout to run")
    args = ap.parse_args()
    random.seed(0)
    work = Path(tempfile.mkdtemp(prefix="sigterm-race-"))
    text = work / "in.txt"
    text.write_text("".join(f"sentence {i} of a film that was fine\n" for i in range(60_000)))
    env = dict(os.environ, PYTHONPATH=args.code, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    bad = 0
    for run in range(args.runs):
        out = work / f"out{run}"
        out.mkdir()
        dest = out / ("feats" if args.command == "extract" else "out.jsonl")
        cmd = [sys.executable, "-m", "bertkit", args.command, "--model", args.model, "--input", str(text),
               "--output", str(dest)] + (["--layers", "last"] if args.command == "extract" else [])
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, cwd=work)  # `-m` puts the cwd first
        while not os.listdir(out) and proc.poll() is None:  # spins: the window is well under a millisecond
            pass
        time.sleep(random.choice([0, 0, 0, 0.0001, 0.0005, 0.002]))
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
        left = sorted(p.name for p in out.iterdir())
        good = proc.returncode == 143 and not left
        bad += not good
        print(f"run {run}: exit {proc.returncode}, left {left}" + ("" if good else f": {err.splitlines()[-1:]}"),
              flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print(f"{bad} of {args.runs} runs left something or did not exit 143")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
