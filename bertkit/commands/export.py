"""`bertkit export --model RUN_DIR --format onnx --output DIR [--quantize int8]`: a run (or any BERT checkpoint) as
ONNX graphs for ONNX Runtime, checked against torch; `bertkit predict|evaluate|serve --model DIR`
run them (see `bertkit/export/onnx.py` for the folder's layout)."""

from __future__ import annotations

import argparse

EXAMPLE = """example:
  bertkit export --model runs/sst2 --format onnx --output runs/sst2-onnx
  bertkit export --model runs/sst2 --format onnx --output runs/sst2-int8 --quantize int8
  echo "a gripping, funny film" | bertkit predict --model runs/sst2-onnx --input -    # runs on ONNX Runtime
  bertkit export --model minilm-l6 --format onnx --output minilm-onnx --layers last4   # feature extraction only
"""


def run(args: argparse.Namespace) -> int:
    import sys

    from ..export.onnx import export_onnx

    info = export_onnx(args.model, args.output, quantize=args.quantize, layers=args.layers,
                       features=not args.no_features)
    graphs = ", ".join(f"{name} (max |torch - onnx| {g['max_abs_diff_fp32']:.1e} in fp32)"
                       for name, g in info["graphs"].items())
    print(f"wrote {graphs}{' quantised to int8' if args.quantize else ''} to {args.output}", file=sys.stderr)
    return 0


def register(subparsers, argv: list[str] | None = None) -> None:
    p = subparsers.add_parser("export", help="export a run to ONNX (optionally int8) for ONNX Runtime",
                              epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True,
                   help="a fine-tuned run folder, a checkpoint folder or hub id, or minilm-l6")
    p.add_argument("--format", default="onnx", choices=["onnx"], help="export format (onnx, the default)")
    p.add_argument("--output", required=True, help="output folder (must not exist or be empty)")
    p.add_argument("--quantize", choices=["int8"], help="dynamic int8 quantisation of the weights (onnxruntime)")
    p.add_argument("--layers", default="embeddings,all",
                   help="hidden states in features.onnx, as `bertkit extract --layers` (default: every one)")
    p.add_argument("--no-features", action="store_true", help="export only the task head (no features.onnx)")
    p.set_defaults(func=run)
