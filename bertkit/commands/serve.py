"""`bertkit serve --model RUN_DIR`: an HTTP server (FastAPI on uvicorn) with dynamic batching; see
`bertkit/serve/app.py` for the endpoints and their errors."""

from __future__ import annotations

import argparse

EXAMPLE = """example:
  bertkit serve --model runs/sst2 --port 8080
  curl -s localhost:8080/predict -H 'content-type: application/json' -d '{"texts": ["a gripping, funny film"]}'
  curl -s localhost:8080/embed -H 'content-type: application/json' \\
      -d '{"texts": ["EU rejects German call"], "layers": "last4", "pool": "mean"}'
  bertkit serve --model runs/sst2-int8        # a `bertkit export` folder: on ONNX Runtime (--backend auto)
endpoints: POST /predict (the run's task, as bertkit predict), POST /embed (as bertkit extract), GET /health,
GET /metadata, GET /openapi.json (schema), GET /docs.
"""


def run(args: argparse.Namespace) -> int:
    import gc
    import os
    import sys
    from concurrent.futures import ThreadPoolExecutor

    from ..errors import BertkitError, need_extra

    need_extra("bertkit serve", "serve", "fastapi", "starlette", "pydantic", "uvicorn")  # before the model loads
    import datasets
    import uvicorn

    from .. import feature_cache
    from ..serve.app import create_app
    from ..serve.engine import Engine
    from ..serve.schemas import Limits
    from .common import resolve_backend

    model_batch = 1 if args.model_batch is None else args.model_batch  # None: the engine's choice
    max_batch = 1 if args.max_batch is None else args.max_batch  # None: the app's choice by device
    for name, value in (("--max-batch", max_batch), ("--model-batch", model_batch),
                        ("--max-queue", args.max_queue), ("--max-items", args.max_items),
                        ("--max-text-chars", args.max_text_chars), ("--max-body-bytes", args.max_body_bytes),
                        ("--threads", 1 if args.threads is None else args.threads)):
        if value < 1:
            raise BertkitError(f"{name} must be at least 1 (got {value})")
    if args.max_wait_ms < 0:
        raise BertkitError(f"--max-wait-ms must be 0 or more (got {args.max_wait_ms})")
    if not 1 <= args.port <= 65535:  # uvicorn binds 99999 as 34463 and logs 99999
        raise BertkitError(f"--port must be 1-65535 (got {args.port})")
    if args.max_items > args.max_queue:  # such a request would get 429 for ever, on an empty queue too
        raise BertkitError(f"--max-items {args.max_items} is more than --max-queue {args.max_queue}: a request of "
                           "that many items could never be queued")
    datasets.disable_progress_bars()
    feature_cache.disable()  # request batches are not worth caching to disk (and would fill it)
    threads = args.threads or max(1, (os.cpu_count() or 2) - 1)
    model_thread = ThreadPoolExecutor(1, thread_name_prefix="bertkit-model")  # loads, warms up and runs the model
    backend = resolve_backend(args.backend, args.model)
    engine = model_thread.submit(Engine, args.model, backend=backend, precision=args.precision,
                                 batch_size=args.model_batch, embed_max_length=args.embed_max_length,
                                 allow_pickle=args.allow_pickle, threads=threads).result()
    model_thread.submit(engine.warm_up).result()
    app = create_app(engine, Limits(args.max_items, args.max_text_chars, args.max_body_bytes),
                     max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, max_queue=args.max_queue,
                     executor=model_thread)  # max_batch None: by the engine's device (`call_items`)
    print(f"bertkit serve: {args.model} on {engine.backend} in {engine.precision} ({engine.precision_reason}); "
          f"calls of up to {app.state.max_batch} items in model batches of {engine.batch_size}, {threads} "
          f"thread(s); POST {', '.join(r.path for r in app.routes if 'POST' in getattr(r, 'methods', ()))}, GET "
          "/health, /metadata, /docs", file=sys.stderr, flush=True)
    gc.collect()
    gc.freeze()  # what is loaded now (~0.5 M objects) lives as long as the server: collections stop walking it
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log)
    return 0


def register(subparsers, argv: list[str] | None = None) -> None:
    p = subparsers.add_parser("serve", help="serve a run over HTTP (predict, embed) with dynamic batching",
                              epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a fine-tuned run folder, any checkpoint folder or hub id (a base "
                                                  "model: /embed only), or a `bertkit export` folder (ONNX Runtime)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--backend", default="auto", choices=["auto", "torch", "onnx"],
                   help="auto (default): onnx (ONNX Runtime) for a `bertkit export` folder, torch for anything else")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"],
                   help="torch backend: auto = fp32 for a run that trained in fp32 (its own numbers), else bf16 where "
                        "the hardware computes it natively and faster, else fp32")
    p.add_argument("--max-batch", type=int,
                   help="items gathered into one model call (default 16 on a CPU, else 64); when more are waiting, "
                        "a call takes the oldest request and those closest to it in length (docs/serve-and-export.md)")
    p.add_argument("--model-batch", type=int,
                   help="items per forward pass inside a call, sorted by length (default 8 for fp32 on a CPU, else "
                        "16: a call's items have random lengths, and on a CPU less padding per batch costs less "
                        "than larger batches gain; docs/serve-and-export.md)")
    p.add_argument("--max-wait-ms", type=float, default=5.0,
                   help="longest wait for a batch to fill after its first request arrives (default 5)")
    p.add_argument("--max-queue", type=int, default=1024, help="items waiting before new requests get 429 "
                                                               "(default 1024)")
    p.add_argument("--max-items", type=int, default=256, help="items per request; more: 413 (default 256)")
    p.add_argument("--max-text-chars", type=int, default=20_000, help="characters per text; more: 413")
    p.add_argument("--max-body-bytes", type=int, default=2 * 1024 * 1024, help="request body size; more: 413")
    p.add_argument("--threads", type=int, help="intra-op threads of the model (default: cores - 1, at least 1: a core "
                   "is left to the HTTP side; with every core the model's OpenMP threads spin against it)")
    p.add_argument("--embed-max-length", type=int, default=512, help="/embed: longest sentence in word pieces")
    p.add_argument("--allow-pickle", action="store_true", help="also load pickle weights (trusted checkpoints)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (default info)")
    p.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=False,
                   help="log every request (default off)")
    p.set_defaults(func=run)
