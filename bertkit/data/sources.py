"""Where a run's data comes from: its local folder (`--data-dir`, else `$BERTKIT_DATA_DIR/<name>`), a named split's
file in it, or, with no local files, the recipe's hub dataset (the one hub loader of every task)."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from ..errors import BertkitError, DataError


def resolve_data_dir(cfg) -> Path | None:
    """`cfg.data_dir`, else `$BERTKIT_DATA_DIR/<name>`; None when neither exists (then the hub is tried)."""
    if cfg.data_dir:
        path = Path(cfg.data_dir)
        if not path.is_dir():
            raise BertkitError(f"--data-dir {path} is not a folder")
        return path
    root = os.environ.get("BERTKIT_DATA_DIR")
    if root and (Path(root) / cfg.name).is_dir():
        return Path(root) / cfg.name
    return None


def local_path(data_dir: Path | None, name: str) -> Path:
    path = Path(name)
    return path if path.is_absolute() or data_dir is None else data_dir / path


def _elsewhere(path: Path) -> Path | None:
    """A file of `path`'s name with another extension beside it, where `path` is missing (train.csv for train.tsv)."""
    if path.is_file() or not path.parent.is_dir():
        return None
    return next((p for p in sorted(path.parent.glob(glob.escape(path.stem) + ".*"))
                 if p.stem == path.stem and p.is_file()), None)


def training_file(cfg, data_dir: Path | None) -> Path:
    """The run's training file; where it is missing but a file of its name with another extension is there, that
    one is named with the flag that takes it."""
    path = local_path(data_dir, cfg.train_file)
    if (other := _elsewhere(path)) is not None:
        raise DataError(f"file not found (the training file); {other.name} is there: --train-file "
                        f"{Path(cfg.train_file).with_suffix(other.suffix)}", file=path)
    return path


def eval_paths(cfg, data_dir: Path | None) -> list[Path]:
    """The run's evaluation files. Without a data folder a recipe's own names (`dev.tsv`) are looked for in the
    working folder; one that is not there is named with that, and with the flags that say where it is."""
    paths = [local_path(data_dir, name) for name in cfg.validation_files]
    names = [p.stem for p in paths] + (["test"] if cfg.test_file else [])  # each split's name in the results
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        files = [str(name) for name, p in zip(cfg.validation_files, paths, strict=True) if p.stem == twice]
        files += [f"the test file {cfg.test_file}"] if twice == "test" and cfg.test_file else []
        raise BertkitError(f"{' and '.join(files)} would both be the split '{twice}' of the results (a split is "
                           "named by its file's name without the extension): rename one"
                           + (", or leave the test file out with --test-file none" if twice == "test" else ""))
    for i, path in enumerate(paths):
        if (other := _elsewhere(path)) is not None:
            names = [str(Path(n).with_suffix(other.suffix)) if j == i else n
                     for j, n in enumerate(cfg.validation_files)]
            raise DataError(f"file not found (an evaluation file); {other.name} is there: --validation-files "
                            f"{','.join(names)}", file=path)
        if data_dir is None and not path.is_absolute() and not path.is_file():
            raise DataError(f"file not found (an evaluation file, looked for in the working folder: there "
                            f"is no data folder, neither --data-dir nor $BERTKIT_DATA_DIR/{cfg.name}); name yours "
                            f"with --validation-files FILE, or the recipe's folder with --data-dir", file=path)
    return paths


def recipe_test_file_absent(cfg) -> bool:
    """A run on files of the working folder (the training file named by path, no data folder) whose recipe names
    a test file that is not there: the recipe's test file is its own data's, not this one's (nor the hub's)."""
    test = Path(cfg.test_file or "")
    return (bool(cfg.test_file) and resolve_data_dir(cfg) is None and Path(cfg.train_file or "").is_absolute()
            and not test.is_absolute() and not test.is_file())


def offline() -> bool:
    return os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1"


def load_hub_splits(cfg, splits: list[str] | None = None) -> list:
    """The recipe's hub dataset, one Dataset per split name (default `cfg.hub.splits`); a clear error offline."""
    hub = cfg.hub
    how = (f"No local data for '{cfg.name}'. Point bertkit at it with BERTKIT_DATA_DIR=/path/to/data "
           f"(a folder holding {cfg.name}/{cfg.train_file}) or --data-dir /path/to/{cfg.name}")
    if not hub.dataset:
        raise BertkitError(how + ".")
    if offline():
        raise BertkitError(how + f"; the hub copy ({hub.dataset}) cannot be used because HF_HUB_OFFLINE or "
                                 "HF_DATASETS_OFFLINE is set.")
    try:
        import datasets

        return [datasets.load_dataset(hub.dataset, hub.config, revision=hub.revision, split=s)
                for s in splits or hub.splits]
    except Exception as e:  # connection errors come in many types
        raise BertkitError(f"{how}; loading {hub.dataset} from the hub failed: {e}") from None


def main_split(cfg) -> str:
    """The split a run picks its best checkpoint on, `bertkit evaluate`'s default: the first validation file's stem
    ('dev', 'sts-dev', 'valid') where the data is local, else the hub's first split after the training one."""
    local = resolve_data_dir(cfg) is not None or any(Path(f).is_absolute() for f in cfg.validation_files)
    if local and cfg.validation_files:
        return Path(cfg.validation_files[0]).stem
    return cfg.hub.splits[1] if len(cfg.hub.splits) > 1 else "dev"


def split_path(cfg, split: str) -> Path | None:
    """The local file of a named split: the validation file whose stem is `split` ('dev'), or the test file
    ('test'); None when there is no local data, so the hub split of that name is to be used."""
    data_dir = resolve_data_dir(cfg)
    names = {Path(f).stem: f for f in cfg.validation_files}
    if cfg.test_file:
        names.setdefault("test", cfg.test_file)
    if data_dir is None and not Path(names.get(split, "")).is_absolute():
        if split not in cfg.hub.splits and split not in names:
            raise BertkitError(f"split '{split}' not known for {cfg.name} (hub splits: {cfg.hub.splits})")
        return None
    if split not in names:
        raise BertkitError(f"split '{split}' not known for {cfg.name} (local splits: {', '.join(names)}); "
                           "or pass --file")
    return local_path(data_dir, names[split])
