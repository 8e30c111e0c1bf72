"""``mqstore export --parquet DIR OUT``: the entries of a store's sealed segments as Parquet,
one file per segment, added incrementally.

A journal asked many questions pays to convert once: Parquet is several times smaller and
answers column queries with a fraction of the CPU of a journal scan. Each sealed segment (every
one but the newest, which the store may still append to) becomes
``OUT/<sequence>-<generation>.parquet`` with the Spark source's columns (``tools.spark``'s
``SCHEMA``; bodies only with ``with_body``). A rerun writes only the sealed segments that have no
file yet, so after more segments seal it gives what a fresh export gives. A segment the store
has since reclaimed or compacted away keeps its file: the export is also the journal's history
(a fresh export of the store as it is now lacks it). Each file is written under a temporary
name, synced and renamed, so an interrupted export (even by a power cut) leaves no partial file
a rerun would take as done.
Read the directory with ``spark.read.parquet(OUT)`` or ``pyarrow.parquet.read_table(OUT)``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Set, Tuple

from mqstore.journal import MqStoreError
from mqstore.journal.format import decode_segment_header
from .segments import MAX_FRAME, SegmentFile, read_segment, segment_files

FILE = re.compile(r"^(\d{20})-([0-9a-f]{16})\.parquet$")


@dataclass
class ParquetExport:
    """What one export did: segment sequences written now, sequences whose file was already
    there, and the rows written now."""

    written: List[int] = field(default_factory=list)
    kept: List[int] = field(default_factory=list)
    rows: int = 0


def file_name(sequence: int, generation: int) -> str:
    """The Parquet file of one segment: ``<sequence, 20 digits>-<generation, 16 hex>.parquet``
    (the generation tells a rewritten segment from the one exported before)."""
    return f"{sequence:020d}-{generation:016x}.parquet"


def exported(out: str) -> Set[Tuple[int, int]]:
    """(sequence, generation) of the segment files already in ``out``."""
    if not os.path.isdir(out):
        return set()
    found = set()
    for name in os.listdir(out):
        m = FILE.match(name)
        if m:
            found.add((int(m.group(1)), int(m.group(2), 16)))
    return found


def _sync_directory(path: str) -> None:
    """Make a rename in ``path`` durable (fsync of the directory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def export_parquet(directory: str, out: str, with_body: bool = False,
                   progress: Optional[Callable[[SegmentFile], None]] = None) -> ParquetExport:
    """Export the sealed segments of the store in ``directory`` that ``out`` lacks.

    Raises:
        MqStoreError: no store in ``directory``; ``out`` exists and is not a directory; pyarrow
            is not installed (``pip install mqstore[spark]``).
    """
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise MqStoreError("the Parquet export needs pyarrow",
                           hint="pip install 'mqstore[spark]'") from None
    from .spark.columns import NAMES, EntryColumns, gc_paused, queue_names_in
    from .spark.source import to_batch
    files = segment_files(directory)
    if os.path.exists(out) and not os.path.isdir(out):
        raise MqStoreError(f"{out} exists and is not a directory",
                           hint="give a new or an earlier export's directory")
    os.makedirs(out, exist_ok=True)
    done = exported(out)
    report = ParquetExport()
    names: dict = {}
    for f in files[:-1]:  # the newest segment may still grow: not sealed
        buf = read_segment(f.path)
        if progress:
            progress(f)
        names.update(queue_names_in(buf, MAX_FRAME))
        header = decode_segment_header(buf)
        generation = header.generation if header is not None else 0
        if (f.sequence, generation) in done:
            report.kept.append(f.sequence)
            continue
        cols = EntryColumns(names, with_body)
        with gc_paused():
            cols.scan_segment(f.sequence, buf, MAX_FRAME)
            columns = cols.take()
        del buf
        table = pa.Table.from_batches([to_batch(columns, NAMES)])
        final = os.path.join(out, file_name(f.sequence, generation))
        partial = final + ".partial"
        with open(partial, "wb") as sink:
            pq.write_table(table, sink)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(partial, final)
        _sync_directory(out)
        report.written.append(f.sequence)
        report.rows += table.num_rows
    return report
