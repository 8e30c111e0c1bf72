"""Payload encoding for appends: msgpack with a per-thread packer, record-kind checks."""

from __future__ import annotations

import os
import threading
from typing import Any, List, Sequence, Tuple

import msgpack

from .errors import InvalidRecordError, RecordTooLargeError

_packer = threading.local()


def pack_records(records: Sequence[Tuple[int, Any]], max_frame: int, overhead: int
                 ) -> List[Tuple[int, bytes]]:
    """``(kind, packed payload)`` of each record, checked: kind 1..255, and each frame (its
    packed payload and ``overhead`` bytes) at most ``max_frame`` bytes. One packer for all
    (the per-record steps are a batch's, issue 38).

    Raises:
        InvalidRecordError: a kind or a payload that cannot be serialised.
        RecordTooLargeError: a frame over ``max_frame`` (``journal.errors``).
    """
    packer = getattr(_packer, "p", None)
    if packer is None:
        packer = _packer.p = msgpack.Packer(use_bin_type=True)
    out: List[Tuple[int, bytes]] = [None] * len(records)  # type: ignore[list-item]
    do = packer.pack
    try:
        for i, (kind, payload) in enumerate(records):
            if kind.__class__ is not int or not 0 < kind < 256:  # (int subclasses too)
                check_kind(kind)
            data = do(payload)
            if len(data) + overhead > max_frame:
                raise RecordTooLargeError(len(data) + overhead, max_frame)
            out[i] = (kind, data)
    except (TypeError, ValueError, OverflowError) as exc:
        _packer.p = None
        raise InvalidRecordError(f"payload cannot be serialised: {exc}") from exc
    return out


def check_kind(kind: int) -> int:
    """Return ``kind`` when it is a valid record kind (1..255), else raise InvalidRecordError."""
    if not isinstance(kind, int) or not 1 <= kind <= 255:
        raise InvalidRecordError(f"record kind must be an int in 1..255, not {kind!r}")
    return kind


def parent_of(path: str) -> str:
    """The parent directory of ``path`` ('.' for a bare name)."""
    return os.path.dirname(os.path.abspath(path)) or "."


