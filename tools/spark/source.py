"""The ``mqjournal`` data source: one input partition per sealed segment (small segments
grouped, a large one split by byte range at record boundaries), rows as Arrow record batches.

Paths are local paths or URIs that ``pyarrow.fs.FileSystem.from_uri`` understands (``hdfs://``,
``s3://``... with their credentials configured where the executors run), so the same job runs
on a laptop or a cluster: ``partitions()`` lists segment files on the driver, ``read()`` opens
its byte range on the executor. Damage never fails the job: a torn or corrupt frame is a row
with ``crc_ok = false`` and ``error`` set, and reading resumes at the next valid frame.

Options (all optional): ``body`` ("true" fills the body column), ``kinds`` (comma-separated
entry kinds), ``lsn_min``/``lsn_max``, ``segments`` (comma-separated sequence numbers),
``split_bytes`` (largest byte range per partition, default 16 MiB: a few partitions per core
keep the cores busy to the end), ``group_bytes`` (small segments are grouped up to this,
default 16 MiB), ``pushdown`` ("true"/"false"), ``queue_names`` (a JSON map of queue id to
name; without it the driver reads the QUEUE_ADD records of the segments up to the last one
planned: ``read_journal`` has the executors read them and passes the map).

Filter pushdown: with ``spark.sql.python.filterPushdown.enabled`` on when ``register`` is
called (or option ``pushdown=true``), filters on ``record_kind``, ``lsn`` and ``segment`` prune
partitions and rows; every filter is still handed back for Spark to re-check. PySpark 4.3.0
reuses a pushed-down read for a later query on the same DataFrame, so ``read_journal`` takes
pruning as arguments instead (a fresh load each call) and never uses pushdown: its answers are
right whatever the queries that follow.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ..segments import first_lsn, lsn_range_mask
from .columns import (HEADER_COLUMNS, NAMES, SCHEMA, EntryColumns, gc_paused,
                      queue_names_in)

DEFAULT_SPLIT = 16 << 20
BATCH_ROWS = 65536
MAX_FRAME = 16 << 20


def _fs_and_path(uri: str) -> Tuple[Any, str]:
    import pyarrow.fs as pafs
    if "://" in uri:
        return pafs.FileSystem.from_uri(uri)
    import os
    return pafs.LocalFileSystem(), os.path.abspath(uri)


@dataclass
class Split:
    """A byte range of one segment file."""

    sequence: int
    path: str
    size: int
    start: int
    stop: int


@dataclass
class JournalPartition:
    """One Spark task: byte ranges to read, and the queue-name map (picklable)."""

    splits: List[Split]
    names: Dict[int, str] = field(default_factory=dict)


def list_segments(root: str) -> List[Tuple[int, str, int]]:
    """(sequence, path, size) of the segment files under ``root/journal`` (driver side).

    Raises:
        MqStoreError: ``root`` holds no journal (or cannot be listed), said in one line.
    """
    import pyarrow.fs as pafs
    from mqstore.journal import MqStoreError
    from mqstore.journal.segment import parse_segment_name
    try:
        fs, base = _fs_and_path(root)
        infos = fs.get_file_info(pafs.FileSelector(base.rstrip("/") + "/journal"))
    except (OSError, ValueError) as exc:
        raise MqStoreError(f"no mqstore journal at {root}: {exc}".split("\n")[0],
                           hint="give the directory passed to Broker.open, or a URI of one "
                                "that every executor can read") from None
    out = []
    for info in infos:
        seq = parse_segment_name(info.base_name)
        if seq is not None and info.type == pafs.FileType.File:
            out.append((seq, info.path, info.size))
    return sorted(out)


def plan_partitions(segments: Sequence[Tuple[int, str, int]], split_bytes: int,
                    group_bytes: int) -> List[List[Split]]:
    """Group small segments and split large ones (byte ranges; record boundaries are found by
    the readers)."""
    parts: List[List[Split]] = []
    group: List[Split] = []
    size = 0
    for seq, path, total in segments:
        if total > split_bytes:
            if group:
                parts.append(group)
                group, size = [], 0
            for start in range(0, total, split_bytes):
                parts.append([Split(seq, path, total, start, min(total, start + split_bytes))])
            continue
        if group and size + total > group_bytes:
            parts.append(group)
            group, size = [], 0
        group.append(Split(seq, path, total, 0, total))
        size += total
    if group:
        parts.append(group)
    return parts


def prune_segments(root: str, segments: Sequence[Tuple[int, str, int]], opts: Dict[str, Any]
                   ) -> List[Tuple[int, str, int]]:
    """The segments a read with options ``opts`` must scan: those that can hold an LSN in
    ``[lsn_min, lsn_max]``, decided from the segments' headers alone (64 bytes each;
    ``tools.segments.lsn_range_mask``), and among them those ``segments`` names (all when
    unset)."""
    kept = list(segments)
    if opts["lsn_min"] is not None or opts["lsn_max"] is not None:
        fs, _ = _fs_and_path(root)
        mask = lsn_range_mask([first_lsn(path, fs) for _seq, path, _size in kept],
                              opts["lsn_min"], opts["lsn_max"])
        kept = [s for s, (below, above) in zip(kept, mask) if not below and not above]
    if opts["segments"] is not None:
        kept = [s for s in kept if s[0] in opts["segments"]]
    return kept


def queue_names_at(root: str, segments: Sequence[Tuple[int, str, int]]) -> Dict[int, str]:
    """Queue id -> name from the QUEUE_ADD records (read on the driver)."""
    names: Dict[int, str] = {}
    for _seq, found in _names_of_segments(root, ((seq, path) for seq, path, _ in segments)):
        names.update(found)
    return names


def queue_names_on_executors(spark: Any, root: str, segments: Sequence[Tuple[int, str, int]],
                             newest: Optional[int] = None) -> Dict[int, str]:
    """Queue id -> name from the QUEUE_ADD records of ``segments``: sealed segments from the
    catalogue (``tools.spark.catalogue``: their headers only), the rest read by the executors
    (a header walk per segment, near the data), so the driver reads no segment body. The same
    map as ``queue_names_at``. ``newest``: the store's newest segment (listed when not given).
    """
    from .catalogue import queue_names
    if not segments:
        return {}
    fs, _ = _fs_and_path(root)
    newest = list_segments(root)[-1][0] if newest is None else newest
    return queue_names(fs, segments, newest, lambda todo: names_by_segment(spark, root, todo))


def names_by_segment(spark: Any, root: str, segments: Sequence[Tuple[int, str, int]]
                     ) -> Dict[int, Dict[int, str]]:
    """Each segment's queue id -> name map, by sequence, read by the executors (one small job;
    only the maps come back)."""
    items = [(seq, path) for seq, path, _size in segments]
    sc = spark.sparkContext
    tasks = max(1, min(len(items), 2 * sc.defaultParallelism))
    return dict(sc.parallelize(items, tasks).mapPartitions(
        lambda part: _names_of_segments(root, part)).collect())


def _names_of_segments(root: str, items: Iterator[Tuple[int, str]]
                       ) -> Iterator[Tuple[int, Dict[int, str]]]:
    """(sequence, names) of each segment, on an executor."""
    fs, _ = _fs_and_path(root)
    for seq, path in items:
        with fs.open_input_file(path) as f:
            yield seq, queue_names_in(f.read(), MAX_FRAME)


def read_split(split: Split, cols: EntryColumns, root: str) -> Iterator[Dict[str, List[Any]]]:
    """Scan one byte range into ``cols`` (frames starting in it); yield column batches."""
    from mqstore.journal.format import SEGMENT_HEADER_SIZE, decode_segment_header
    from mqstore.journal.inspect import Damage
    from mqstore.journal.segment import find_valid_frames
    fs, _ = _fs_and_path(root)
    with fs.open_input_file(split.path) as f:
        header = decode_segment_header(f.read_at(SEGMENT_HEADER_SIZE, 0))
        if header is None:
            if split.start == 0:
                cols.add(split.sequence, Damage(0, split.size, "bad segment header"))
                yield cols.take()
            return
        base = 0 if split.start <= SEGMENT_HEADER_SIZE else split.start
        end = min(split.size, split.stop + MAX_FRAME)
        buf = f.read_at(end - base, base)
    first = SEGMENT_HEADER_SIZE if base == 0 else next(
        (o for o, _h in find_valid_frames(buf, header.generation, MAX_FRAME, -1)), len(buf))
    cols.scan(split.sequence, buf, header.generation, first, split.stop - base, base, MAX_FRAME)
    if len(cols):
        yield cols.take()


def to_batch(columns: Dict[str, List[Any]], wanted: Sequence[str]) -> Any:
    """An Arrow record batch with exactly the schema's types, for the ``wanted`` columns."""
    import pyarrow as pa
    types = {"segment": pa.int64(), "offset": pa.int64(), "lsn": pa.int64(),
             "record_kind": pa.string(), "transaction_id": pa.int64(),
             "message_id": pa.int64(), "address": pa.string(), "queue": pa.string(),
             "durable": pa.bool_(), "timestamp": pa.int64(), "expiration": pa.int64(),
             "scheduled_time": pa.int64(), "delivery_count": pa.int32(),
             "properties": pa.map_(pa.string(), pa.string()), "body_size": pa.int32(),
             "body": pa.binary(), "crc_ok": pa.bool_(), "error": pa.string(),
             "record_bytes": pa.int32()}
    return pa.RecordBatch.from_arrays([pa.array(columns[n], type=types[n]) for n in wanted],
                                      names=list(wanted))


def _options(options: Dict[str, str]) -> Dict[str, Any]:
    def num(key: str) -> Optional[int]:
        value = options.get(key)
        return int(value) if value not in (None, "") else None
    kinds = [k.strip().upper() for k in options.get("kinds", "").split(",") if k.strip()]
    segs = {int(s) for s in options.get("segments", "").split(",") if s.strip()}
    names = options.get("queue_names")
    return {"names": ({int(k): v for k, v in json.loads(names).items()}
                      if names is not None else None),
            "body": options.get("body", "false").lower() == "true", "kinds": kinds or None,
            "lsn_min": num("lsn_min"), "lsn_max": num("lsn_max"), "segments": segs or None,
            "split": num("split_bytes") or DEFAULT_SPLIT,
            "group": num("group_bytes") or DEFAULT_SPLIT}


def _reader_classes() -> Tuple[type, type]:
    from pyspark.sql.datasource import (DataSourceReader, EqualTo, GreaterThan,
                                        GreaterThanOrEqual, In, InputPartition, LessThan,
                                        LessThanOrEqual)

    class JournalReader(DataSourceReader):
        """Reads segments; no filter pushdown."""

        def __init__(self, path: str, options: Dict[str, str], schema: Any) -> None:
            self.path = path
            self.opts = _options(options)
            self.wanted = [f.name for f in schema.fields] if schema is not None else NAMES

        def partitions(self) -> List[Any]:
            everything = list_segments(self.path)
            segments = prune_segments(self.path, everything, self.opts)
            names = self.opts["names"]
            if names is None:  # read here, on the driver (``read_journal`` has them read
                # by the executors): a queue's QUEUE_ADD precedes every record naming it, so
                # no segment after the last planned one names one
                last = segments[-1][0] if segments else -1
                names = queue_names_at(self.path, [s for s in everything if s[0] <= last])
            return [InputPartition(JournalPartition(p, names))
                    for p in plan_partitions(segments, self.opts["split"], self.opts["group"])]

        def read(self, partition: Any) -> Iterator[Any]:
            partition = partition.value
            o = self.opts
            cols = EntryColumns(partition.names, o["body"] and "body" in self.wanted,
                                o["kinds"], o["lsn_min"], o["lsn_max"],
                                header_only=set(self.wanted) <= HEADER_COLUMNS)
            for split in partition.splits:
                # the collector stays paused until the column lists are gone: enabling it
                # while they live made it walk every value of the split
                with gc_paused():
                    arrows = [to_batch(batch, self.wanted)
                              for batch in read_split(split, cols, self.path)]
                for arrow in arrows:
                    for i in range(0, arrow.num_rows, BATCH_ROWS):  # zero-copy slices
                        yield arrow.slice(i, BATCH_ROWS)

    class PushdownJournalReader(JournalReader):
        """Also prunes by pushed filters on record_kind, lsn and segment; every filter is
        returned, so Spark still re-checks it."""

        def pushFilters(self, filters: List[Any]) -> Iterator[Any]:
            o = self.opts
            for f in filters:
                col = f.attribute[0] if len(f.attribute) == 1 else None
                if col == "record_kind" and isinstance(f, EqualTo):
                    o["kinds"] = [f.value] if o["kinds"] is None else \
                        [k for k in o["kinds"] if k == f.value]
                elif col == "record_kind" and isinstance(f, In):
                    o["kinds"] = list(f.value)
                elif col in ("lsn", "segment") and isinstance(
                        f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
                    self._bound(col, f)
                elif col == "segment" and isinstance(f, In):
                    o["segments"] = {int(v) for v in f.value}
                yield f

        def _bound(self, col: str, f: Any) -> None:
            o, v = self.opts, int(f.value)
            lo = v + 1 if isinstance(f, GreaterThan) else v if isinstance(
                f, (GreaterThanOrEqual, EqualTo)) else None
            hi = v - 1 if isinstance(f, LessThan) else v if isinstance(
                f, (LessThanOrEqual, EqualTo)) else None
            if col == "lsn":
                if lo is not None:
                    o["lsn_min"] = max(lo, o["lsn_min"] or lo)
                if hi is not None:
                    o["lsn_max"] = min(hi, o["lsn_max"] if o["lsn_max"] is not None else hi)
            else:
                segs = [s for s, _p, _z in list_segments(self.path)
                        if (lo is None or s >= lo) and (hi is None or s <= hi)]
                o["segments"] = set(segs) if o["segments"] is None else o["segments"] & set(segs)

    return JournalReader, PushdownJournalReader


def make_source(default_pushdown: bool) -> type:
    """The ``mqjournal`` DataSource class (pushdown default fixed at registration)."""
    from pyspark.sql.datasource import DataSource

    class MqJournalDataSource(DataSource):
        """``spark.read.format("mqjournal").load(store_directory)``."""

        PUSHDOWN = default_pushdown

        @classmethod
        def name(cls) -> str:
            return "mqjournal"

        def schema(self) -> str:
            return SCHEMA

        def reader(self, schema: Any) -> Any:
            plain, pushdown = _reader_classes()
            path = self.options.get("path") or self.options.get("paths")
            if path is None:
                raise ValueError("give the store directory: .load(path)")
            if isinstance(path, str) and path.startswith("["):
                path = path.strip("[]\"' ").split(",")[0].strip("\"' ")
            flag = self.options.get("pushdown")
            use = self.PUSHDOWN if flag is None else flag.lower() == "true"
            return (pushdown if use else plain)(path, dict(self.options), schema)

    return MqJournalDataSource


def register(spark: Any) -> None:
    """Register the ``mqjournal`` format with a SparkSession (pushdown follows the session's
    ``spark.sql.python.filterPushdown.enabled`` now)."""
    enabled = str(spark.conf.get("spark.sql.python.filterPushdown.enabled", "false")).lower()
    spark.dataSource.register(make_source(enabled == "true"))


def read_journal(spark: Any, path: str, columns: Optional[Sequence[str]] = None,
                 kinds: Optional[Sequence[str]] = None, lsn_min: Optional[int] = None,
                 lsn_max: Optional[int] = None, segments: Optional[Sequence[int]] = None,
                 body: bool = False) -> Any:
    """A DataFrame of the journal entries of the store at ``path`` (a fresh load: pruning by
    the arguments, never by pushed filters, so every later query on it is right). The queue
    names of the segments up to the last one the read plans come from the catalogue for
    sealed segments seen before, else from a first small job in which the executors walk them
    (``queue_names_on_executors``): the driver reads only segment headers.

    Args:
        columns: the columns to read (others are not built); all when ``None``.
        kinds: only these entry kinds (MESSAGE, ACK, DELIVERY, QUEUE_ADD...; DAMAGED rows
            are always kept).
        lsn_min, lsn_max: only records in this LSN range.
        segments: only these segment sequence numbers.
        body: fill the ``body`` column.

    Raises:
        MqStoreError: ``path`` holds no store (checked on the driver before any job).
    """
    everything = list_segments(path)  # no store: one line here, not a Spark traceback
    register(spark)
    options: Dict[str, str] = {"pushdown": "false"}
    if body:
        options["body"] = "true"
    if kinds:
        options["kinds"] = ",".join(k.upper() for k in kinds)
    if lsn_min is not None:
        options["lsn_min"] = str(lsn_min)
    if lsn_max is not None:
        options["lsn_max"] = str(lsn_max)
    if segments:
        options["segments"] = ",".join(str(s) for s in segments)
    planned = prune_segments(path, everything, _options(options))
    last = planned[-1][0] if planned else -1
    names = queue_names_on_executors(spark, path, [s for s in everything if s[0] <= last],
                                     everything[-1][0] if everything else None)
    options["queue_names"] = json.dumps(names)
    reader = spark.read.format("mqjournal").options(**options)
    if columns:
        from pyspark.sql.types import StructType
        full = StructType.fromDDL(SCHEMA)
        reader = reader.schema(StructType([full[c] for c in columns]))
    return reader.load(path)


__all__ = ["register", "read_journal", "plan_partitions", "pickle"]
