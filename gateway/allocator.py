"""Make the C allocator give large freed buffers back to the operating system.

glibc serves big allocations with their own `mmap` (returned to the system on free) only above a
threshold that it raises, by default, to the size of each large block freed, up to 32 MiB. After
a burst of large frames (a 10 MB transcript page for each of several slow readers), the next
blocks of that size therefore come from the heap, where freed memory mostly stays with the
process: the daemon would keep hundreds of MiB long after the connections that needed them
closed. Fixing the threshold (`mallopt(M_MMAP_THRESHOLD)`) turns that adjustment off, so every
block at least `MMAP_THRESHOLD` long is mapped on its own and unmapped when freed.

Called once by `gatewayd` at start-up; a no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter number (malloc.h)."""
MMAP_THRESHOLD = 256 * 1024
"""Blocks at least this long are mapped on their own (glibc's initial default is 128 KiB)."""


def release_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at `threshold` bytes. True when it was set; False where the C
    library has no `mallopt` or refused (nothing changes then)."""
    try:
        # The symbols the process has loaded, the C library's among them. (Looking the library
        # up by name, `ctypes.util.find_library`, would start `ldconfig` at every start-up.)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))
