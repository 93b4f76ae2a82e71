"""Keeping the process's memory from creeping up (glibc malloc settings).

Each password check (scrypt) allocates 16 MiB.  glibc serves that from mmap at first, but its
dynamic mmap threshold then rises past 16 MiB, after which such blocks come from the arena of
whichever thread-pool thread ran the check -- and stay there: with 20 store threads a server
that had seen a burst of logins kept ~320 MiB it no longer used (measured in bench/RESULTS.md:
1,000 idle connections took 401 MiB; with the threshold pinned, 108 MiB).  Pinning the
threshold (which turns off its adjustment) sends every large block back to the system when
it is freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024


def pin_malloc_threshold() -> bool:
    """Pin glibc's mmap threshold; False where there is no glibc (nothing to do)."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False
