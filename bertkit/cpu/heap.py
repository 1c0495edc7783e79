"""Keep freed memory in the process heap while training on CPU (glibc's malloc, Linux).

glibc serves an allocation above its mmap threshold (adjusted between 128 KiB and 32 MiB) with a fresh `mmap`
and unmaps it on `free`. Every training step allocates such buffers: MiniLM's word-embedding gradient alone is
30,522 × 384 fp32 (47 MB), and more come from the fp32 gradients cast back from bf16. The kernel then maps and
zero-fills their pages one fault at a time, on every step. `keep_heap()` makes glibc serve large blocks from the
heap (M_MMAP_MAX 0) and keep freed memory there (a high M_TRIM_THRESHOLD), so the next step reuses pages that are
already mapped; PyTorch's CPU performance guides give the same advice by way of jemalloc or tcmalloc.
`release_heap()` restores mmap use (at the highest threshold glibc's own adjustment reaches) and returns the free
memory (`malloc_trim`). With another C library, or not on Linux, both do nothing. Tensors, numerics and saved
files are unaffected; only where the allocator gets its pages changes. Peak memory can grow, since the heap keeps
what it frees (docs/speed.md). Tested in tests/test_heap.py.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4  # from glibc's malloc.h
# glibc starts at a 128 KiB mmap threshold and raises it to the size of each mmapped block freed, up to 32 MiB
# (trim threshold twice that); any mallopt call ends that adjustment, so release_heap sets where it ends up.
MMAP_THRESHOLD_MAX, DEFAULT_MMAP_MAX = 32 * 1024 * 1024, 65536
_libc = None


def _glibc():
    global _libc
    if _libc is None:
        _libc = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                libc.gnu_get_libc_version  # noqa: B018 (raises AttributeError on musl and others)
                _libc = libc
            except (OSError, AttributeError):
                pass
    return _libc


def keep_heap() -> bool:
    """Serve large allocations from the heap and keep freed memory there. True if it took effect."""
    libc = _glibc()
    return bool(libc) and bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def release_heap(trim: bool = True) -> None:
    """glibc's mmap and trim behaviour again; with `trim`, the heap's free memory goes back to the system."""
    libc = _glibc()
    if libc:
        libc.mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)
        libc.mallopt(M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD_MAX)
        if trim:
            libc.malloc_trim(0)
