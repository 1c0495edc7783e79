"""Serving: requests/s and p50/p99 latency of `bertkit serve` (dynamic batching) at 1, 8 and 64 concurrent clients,
against one-at-a-time `transformers.pipeline("text-classification")` calls on the same texts.

Every request is one SST-2 dev sentence (`{"texts": [sentence]}`), cycling through the dev set. The server runs in
its own process on 127.0.0.1 (`--precision fp32` by default, like the pipeline; `--max-batch 64 --max-wait-ms 5`);
the clients are asyncio + httpx in this process, each sending its next request as soon as the last is answered, so
they share the machine's cores with the server (on a 2-core machine the client load is part of what is measured).
The pipeline row is the same sentences through `pipeline(...)(text)` one call at a time in this process: what a
user without a server does per request (given an export folder, on the run it was exported from). Every served
answer is checked to be its own sentence's, and the labels are compared with the pipeline's.

    python benchmarks/serve_throughput.py --model runs/sst2 --requests 2000                 # the measurement
    python benchmarks/serve_throughput.py --model runs/sst2 --requests 40 --pipeline-requests 20   # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from onnx_setup import default_data_dir, dev_sentences  # noqa: E402

from bertkit.models import resolve_model  # noqa: E402
from bertkit.utils import hardware  # noqa: E402


def start_server(model: str, flags: list[str], timeout: float = 180) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "bertkit.cli", "serve", "--model", model, "--port", str(port),
                             "--log-level", "warning", *flags])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.25)
    proc.kill()
    raise SystemExit(f"the server did not start within {timeout} s")


async def load(url: str, texts: list[str], clients: int, requests: int) -> tuple[float, np.ndarray, dict]:
    """`requests` requests from `clients` concurrent clients: (seconds, latencies, {text: label})."""
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
        return time.perf_counter() - t0, np.array(latencies), labels


def row(name: str, seconds: float, latencies: np.ndarray) -> str:
    p50, p99 = np.percentile(latencies, [50, 99]) * 1000
    return f"| {name} | {len(latencies)} | {len(latencies) / seconds:.1f} | {p50:.1f} | {p99:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a fine-tuned sequence-classification run folder")
    parser.add_argument("--data-dir", default=default_data_dir())
    parser.add_argument("--concurrency", default="1,8,64", help="client counts, comma-separated")
    parser.add_argument("--requests", type=int, default=2000, help="requests per concurrency level")
    parser.add_argument("--pipeline-requests", type=int, help="one-at-a-time pipeline calls (default --requests)")
    parser.add_argument("--precision", default="fp32", help="the server's --precision (default fp32, as pipeline)")
    parser.add_argument("--server-flags", default="--max-batch 64 --max-wait-ms 5",
                        help="more `bertkit serve` flags, e.g. '--backend onnx' with an export folder as --model")
    args = parser.parse_args()
    texts = dev_sentences(args.data_dir)
    proc, url = start_server(args.model, ["--precision", args.precision, *args.server_flags.split()])
    lines, served = [], {}
    try:
        asyncio.run(load(url, texts, 8, 64))  # warm-up
        for clients in [int(c) for c in args.concurrency.split(",")]:
            seconds, latencies, labels = asyncio.run(load(url, texts, clients, args.requests))
            served.update(labels)
            lines.append(row(f"bertkit serve, {clients} client{'s' if clients > 1 else ''}", seconds, latencies))
        health = httpx.get(url + "/health", timeout=10).json()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)

    from transformers import pipeline

    from bertkit.export.runtime import is_export, read_export

    # an export folder (--backend onnx) holds no torch weights: the pipeline loads the run it was exported from
    path = resolve_model(read_export(args.model)["source"] if is_export(args.model) else args.model)[0]
    pipe = pipeline("text-classification", model=path, tokenizer=path, device="cpu")
    for text in texts[:8]:
        pipe(text)  # warm-up
    latencies, agree, n = [], 0, args.pipeline_requests or args.requests
    t0 = time.perf_counter()
    for i in range(n):
        text = texts[i % len(texts)]
        t = time.perf_counter()
        label = pipe(text)[0]["label"]
        latencies.append(time.perf_counter() - t)
        agree += served.get(text, label) == label
    lines.append(row("pipeline, one call at a time", time.perf_counter() - t0, np.array(latencies)))

    print(f"\nServing {args.model} ({args.precision}, {args.server_flags}), one SST-2 dev sentence per request; "
          f"{hardware()}; {health['batches']} model calls for {health['items']} items "
          f"({health['items'] / max(health['batches'], 1):.1f} per call); pipeline labels equal the server's on "
          f"{agree} of {n}")
    print("| setting | requests | requests/s | p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
