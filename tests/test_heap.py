"""bertkit.heap: freed gradient-sized buffers stay mapped while training, and go back to the system after."""

from __future__ import annotations

import resource

import pytest
import torch

from bertkit.cpu import heap

from .conftest import fit, small_config

pytestmark = pytest.mark.skipif(not heap._glibc(), reason="glibc's mallopt only")


def _faults_of_fresh_buffer(n_bytes: int) -> int:
    """Minor page faults taken by allocating and zero-filling a buffer, after one the same size was freed."""
    torch.zeros(n_bytes // 4)  # allocated and freed: its memory is what the next one can reuse
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.zeros(n_bytes // 4)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def test_kept_heap_reuses_pages_and_release_returns_them():
    size = 64 * 2**20  # larger than glibc's largest mmap threshold (32 MiB), like MiniLM's 47 MB embedding gradient
    pages = size // resource.getpagesize()
    try:
        assert heap.keep_heap()
        for _ in range(4):  # the first cycles may still grow the heap with fresh pages (seen: up to two)
            _faults_of_fresh_buffer(size)
        kept = sorted(_faults_of_fresh_buffer(size) for _ in range(3))[1]  # steady state, as over training steps
        held = _resident_bytes()  # the freed buffers stay mapped in the heap
    finally:
        heap.release_heap()
    returned = held - _resident_bytes()
    assert kept < pages // 10  # the freed buffer's pages were reused, not faulted in again
    assert returned > size // 2  # release_heap handed the freed memory back to the system


@pytest.mark.usefixtures("cpu_only")  # the trainer keeps the heap when it trains on a CPU only
@pytest.mark.parametrize("enabled", [True, False])
def test_trainer_keeps_heap_while_training_and_releases_after(tiny_bert, sst2_dir, tmp_path, monkeypatch, enabled):
    calls = []
    monkeypatch.setattr(heap, "keep_heap", lambda: calls.append("keep") or True)
    monkeypatch.setattr(heap, "release_heap", lambda: calls.append("release"))
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "run", epochs=1, precision="bf16", keep_heap=enabled),
        callbacks=[lambda trainer, state: calls.append("step")])
    steps = calls.count("step")
    if not enabled:
        assert steps and calls == ["step"] * steps
        return
    kept = False
    for call in calls:  # every training step runs with the heap kept; evaluation and saving run with it given back
        if call == "step":
            assert kept
        kept = call == "keep" if call != "step" else kept
    assert steps and calls[0] == "keep" and calls[-1] == "release" and calls.count("release") >= 2


def test_evaluation_and_saving_run_with_the_kept_heap_given_back(monkeypatch):
    """Between training stretches the kept heap is released (trimmed) and kept again afterwards, also when the
    block raises; nothing happens where keep_heap was not applied."""
    from bertkit.cpu import heap
    from bertkit.training.changes import heap_released

    calls = []
    monkeypatch.setattr(heap, "release_heap", lambda trim=True: calls.append("release"))
    monkeypatch.setattr(heap, "keep_heap", lambda: calls.append("keep") or True)
    with heap_released(["fast_dropout", "keep_heap"]):
        assert calls == ["release"]
    assert calls == ["release", "keep"]
    with pytest.raises(RuntimeError), heap_released(["keep_heap"]):
        raise RuntimeError
    assert calls == ["release", "keep", "release", "keep"]
    with heap_released(["fast_dropout"]):
        pass
    assert calls == ["release", "keep", "release", "keep"]


@pytest.mark.parametrize("batch, length, kept", [(16, 256, True), (8, 384, True), (16, 384, False)])
def test_heap_is_kept_only_for_micro_batches_of_at_most_4096_positions(tiny_bert, batch, length, kept):
    """Above 4096 positions per micro-batch the kept heap held 25 % more memory (docs/memory.md): not applied."""
    from types import SimpleNamespace

    from bertkit.config import run_config
    from bertkit.tasks import SequenceClassification
    from bertkit.training.changes import model_changes

    task = SequenceClassification.from_pretrained(str(tiny_bert), ["a", "b"])
    cfg = run_config(name="heap", model=str(tiny_bert), batch_size=batch, max_length=length, precision="bf16",
                     label_names=["a", "b"])
    lines = []
    calls = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(heap, "keep_heap", lambda: calls.append("keep") or True)
        mp.setattr(heap, "release_heap", lambda: calls.append("release"))
        with model_changes(SimpleNamespace(model=task.model, uses_pooler=False), cfg, cpu=True, precision="bf16",
                           log=lines.append) as applied:
            assert ("keep_heap" in applied) is kept
    assert (calls == ["keep", "release"]) is kept and (calls == []) is not kept
    assert any("keep_heap left off for micro-batches of 16 × 384" in line for line in lines) is not kept
