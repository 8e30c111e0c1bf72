"""The queue-name catalogue of the Spark source: queue id -> name from the QUEUE_ADD records of
each sealed segment, cached on the driver's disk by the segment's sequence and generation.

A sealed segment never changes: a compaction that rewrites one gives the new file a new random
generation (``journal.format``), so ``(sequence, generation)``, read from the 64-byte header,
names its contents for good; the file's size and modification time join the key, so a copy
changed afterwards (damaged, or edited by a test) is read again. The first query on a store
has the executors walk the segments it needs (``source.queue_names_on_executors``) and caches
what each sealed one holds; later queries read headers only, plus the newest segment, which
may still grow and is never cached.

The cache lives in ``$MQSTORE_CATALOGUE`` (default ``~/.cache/mqstore/catalogue``), one small
JSON file per segment, written under a temporary name and renamed. A file that cannot be read
is ignored and rewritten; an unwritable directory only costs the walk again next time.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

SegmentList = Sequence[Tuple[int, str, int]]


def catalogue_dir() -> str:
    """Where the catalogue is kept (``$MQSTORE_CATALOGUE``, else ``~/.cache/mqstore/catalogue``)."""
    return os.environ.get("MQSTORE_CATALOGUE") or os.path.join(
        os.path.expanduser("~"), ".cache", "mqstore", "catalogue")


Key = Tuple[int, int, int, int]  # sequence, generation, size, modification time (ns)


def segment_key(fs: Any, path: str) -> Optional[Key]:
    """The catalogue key of a segment file: its header's sequence and generation, its size and
    modification time (``None``: no valid header)."""
    from mqstore.journal.format import SEGMENT_HEADER_SIZE, decode_segment_header
    with fs.open_input_file(path) as f:
        header = decode_segment_header(f.read_at(SEGMENT_HEADER_SIZE, 0))
    if header is None:
        return None
    info = fs.get_file_info(path)
    return (header.sequence, header.generation, int(info.size or 0), int(info.mtime_ns or 0))


def _file(directory: str, key: Key) -> str:
    return os.path.join(directory, "{:020d}-{:016x}-{}-{}.json".format(*key))


def _load(directory: str, key: Key) -> Optional[Dict[int, str]]:
    try:
        with open(_file(directory, key), encoding="utf-8") as f:
            return {int(k): str(v) for k, v in json.load(f).items()}
    except (OSError, ValueError, AttributeError):
        return None


def _store(directory: str, key: Key, names: Dict[int, str]) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({str(k): v for k, v in names.items()}, f)
        os.replace(tmp, _file(directory, key))
    except OSError:
        pass  # a cache: the walk runs again next time


def queue_names(fs: Any, segments: SegmentList, newest: int,
                walk: Callable[[SegmentList], Dict[int, Dict[int, str]]],
                directory: Optional[str] = None) -> Dict[int, str]:
    """Queue id -> name from the QUEUE_ADD records of ``segments`` (in sequence order, as a
    replay applies them).

    Args:
        fs: the ``pyarrow.fs`` file system the segments are on.
        segments: (sequence, path, size) of the segments to take names from.
        newest: the sequence of the store's newest segment (not sealed: never cached).
        walk: reads the segments it is given, returning each one's names by sequence (the
            executors' job).
        directory: the catalogue's directory (default ``catalogue_dir()``).
    """
    directory = directory or catalogue_dir()
    found: Dict[int, Dict[int, str]] = {}
    missing: List[Tuple[int, str, int]] = []
    keys: Dict[int, Optional[Key]] = {}
    for seq, path, size in segments:
        key = keys[seq] = segment_key(fs, path) if seq != newest else None
        cached = _load(directory, key) if key is not None else None
        if cached is None:
            missing.append((seq, path, size))
        else:
            found[seq] = cached
    if missing:
        walked = walk(missing)
        for seq, names in walked.items():
            found[seq] = names
            key = keys.get(seq)
            if key is not None and key[0] == seq:
                _store(directory, key, names)
    merged: Dict[int, str] = {}
    for seq in sorted(found):
        merged.update(found[seq])
    return merged
