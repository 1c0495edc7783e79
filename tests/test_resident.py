"""Training data resident on the device (bertkit/training/resident.py), checked on the CPU: `--device-data on`
gathers from the training set collated once the very batches the per-batch collate gives, so a run trains to the
same weights, bit for bit, for every kind of batch (single texts, per-position labels, windows, choices, a plugin's
own collate), with and without length buckets; a collate that does more than pad keeps the per-batch path."""

from __future__ import annotations

import json
from contextlib import nullcontext
from types import SimpleNamespace

import datasets
import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli import main

from .conftest import cloze_registered, tiny_run_args

CASES = [("sst2", "0"), ("sst2", "3"), ("ner", "3"), ("qa", "3"), ("swag", "3"), ("cloze", "3")]


@pytest.mark.usefixtures("cpu_only")  # bit for bit on a CPU (a GPU's kernels may add in another order)
@pytest.mark.parametrize(("name", "buckets"), CASES)
def test_resident_batches_train_as_the_collated_ones(name, buckets, tmp_path_factory, tiny_bert, tmp_path):
    runs = {}
    with cloze_registered() if name == "cloze" else nullcontext():
        for mode in ("off", "on"):
            runs[mode] = tmp_path / mode
            args = tiny_run_args(tmp_path_factory, tiny_bert, name, runs[mode])
            assert main([*args, "--device-data", mode, "--max-steps", "6", "--eval-every", "6",
                         "--length-buckets", buckets, "--save-every", "0"]) == 0
    train = {k: json.loads((v / "metrics.json").read_text())["train"] for k, v in runs.items()}
    assert train["off"]["step"]["device_data"] == "data from the loader (--device-data off)"
    assert train["on"]["step"]["device_data"].startswith("data on the device (")
    assert train["on"]["examples_seen"] == train["off"]["examples_seen"] > 0
    a, b = (load_file(str(v / "model.safetensors")) for v in runs.values())
    for k in a:
        assert torch.equal(a[k], b[k]), k


class Noisy:
    """An adapter whose collate does more than pad: it draws a random token into every batch."""

    tokenizer = SimpleNamespace(pad_token_id=0)
    label_keys, sequence_outputs = ("labels",), ()

    def collate(self, rows):
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.tensor([r["input_ids"] + [0] * (width - len(r["input_ids"])) for r in rows])
        ids[:, 0] = torch.randint(1000, 2000, ())
        return {"input_ids": ids, "attention_mask": (ids != 0).long(),
                "labels": torch.tensor([r["labels"] for r in rows])}


def noisy_features(n: int = 40):
    ids = [[5] * (2 + i % 7) for i in range(n)]
    return datasets.Dataset.from_dict({"input_ids": ids, "labels": [i % 2 for i in range(n)],
                                       "length": [len(x) for x in ids]})


def test_a_collate_that_does_more_than_pad_keeps_the_per_batch_path():
    from bertkit.training.data import train_loader

    cpu = torch.device("cpu")
    _, _, resident = train_loader(noisy_features(), Noisy(), 8, 0, True, cpu, device_data="on")
    assert not resident.used and resident.reason.startswith("its batches are not the collate's: 'input_ids' differs")
    assert train_loader(noisy_features(), Noisy(), 8, 0, True, cpu, device_data="auto")[2].reason == \
        "no CUDA device (cpu)"
    assert train_loader(noisy_features(), Noisy(), 8, 0, True, cpu, device_data="on", processes=2)[2].reason == \
        "2 processes"
