"""Payload encoding for appends: msgpack with a per-thread packer, record-kind checks."""

from __future__ import annotations

import os
import threading
from typing import Any

import msgpack

from .errors import InvalidRecordError

_packer = threading.local()


def pack(payload: Any) -> bytes:
    """msgpack-encode a payload (bin type for bytes, str for text).

    Raises:
        InvalidRecordError: the value cannot be serialised.
    """
    packer = getattr(_packer, "p", None)
    if packer is None:
        packer = _packer.p = msgpack.Packer(use_bin_type=True)
    try:
        return packer.pack(payload)
    except (TypeError, ValueError, OverflowError) as exc:
        _packer.p = None
        raise InvalidRecordError(f"payload cannot be serialised: {exc}") from exc


def check_kind(kind: int) -> int:
    """Return ``kind`` when it is a valid record kind (1..255), else raise InvalidRecordError."""
    if not isinstance(kind, int) or not 1 <= kind <= 255:
        raise InvalidRecordError(f"record kind must be an int in 1..255, not {kind!r}")
    return kind


def parent_of(path: str) -> str:
    """The parent directory of ``path`` ('.' for a bare name)."""
    return os.path.dirname(os.path.abspath(path)) or "."


