"""How glibc's allocator treats freed memory: kept for the next batch (every rule job,
`keep_freed_memory`), or given back layer by layer (the layer-streamed route,
`release_freed_memory`)."""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def keep_freed_memory(trim_bytes: int = 1 << 30, mmap_bytes: int = 32 << 20) -> bool:
    """Have glibc's malloc keep freed memory for reuse; False where the C library cannot.

    By default glibc returns the top of the heap to the system once more than about twice the
    largest recently freed block is free, so a model that frees a batch's activations faults
    them in again, page by page, in the next batch: a plain `transformers` loop over 992 wiki
    sequences took 1.2-1.5M page faults and 7-9% longer than with freed memory kept
    (benchmarks/bench_extract.py, routes plain and plain-kept). After this, blocks below
    `mmap_bytes` (glibc's largest allowed) come from the heap, and the heap shrinks only past
    `trim_bytes` free. Memory stays at the job's peak, which its `mem_mb` already budgets for.
    """
    return _set_malloc(mmap_bytes, trim_bytes)


def _set_malloc(mmap_bytes: int, trim_bytes: int) -> bool:
    """glibc's mmap and trim thresholds (which also stops the mmap threshold's growth)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library symbols, or no mallopt (macOS)
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_bytes)) and bool(
        mallopt(M_TRIM_THRESHOLD, trim_bytes)
    )


def release_freed_memory(threshold: int = 128 << 10) -> bool:
    """For layer-streamed jobs: have glibc map every block above `threshold` on its own and
    trim the heap past `threshold` free, so that a layer's freed matrices go back to the
    system before the next layer's are read (`keep_freed_memory` would keep them, and glibc's
    default threshold, which grows with the blocks freed, kept some). False where the C
    library cannot. At Llama-3.1-8B's shape (benchmarks/bench_scale.py, one sequence of 128)
    the mixing job peaked at 3,479 MiB in 454 s with it, and at 4,272 MiB in 421 s under
    glibc's default in an earlier run.
    """
    return _set_malloc(threshold, threshold)
