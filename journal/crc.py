"""CRC-32C (Castagnoli) for journal frames: one fast path, one reference.

The user named ``crcmod`` as the reference implementation. Its C extension computes about
0.43 GB/s here and its pure-Python fallback 0.013 GB/s (REFERENCE.md), so when the ``crc32c``
package (hardware-accelerated, 8+ GB/s) is installed it is the fast path. Both compute the same
function; ``tests/journal/test_crc.py`` checks that on every frame layout.
"""

from __future__ import annotations

from typing import Callable

import crcmod.predefined

_reference: Callable[..., int] = crcmod.predefined.mkPredefinedCrcFun("crc-32c")


def crc32c_reference(data: bytes, value: int = 0) -> int:
    """CRC-32C of ``data`` with crcmod, continuing from ``value`` (0 to start).

    Returns:
        The CRC as an unsigned 32-bit int.
    """
    return _reference(data, value)


crc32c: Callable[..., int]
try:  # the fast path when the accelerated package is installed: the C function itself
    from crc32c import crc32c  # crc32c(data, value=0) -> int, same values as the reference

    BACKEND = "crc32c"
except ImportError:  # pragma: no cover - exercised only without the crc32c package
    crc32c = crc32c_reference
    BACKEND = "crcmod"
