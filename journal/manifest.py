"""The segment manifest: which segment files the journal holds, so a lost file is never missed.

Segment sequence numbers have gaps by design (a dead segment is deleted, compaction outputs take
numbers in between), so the files alone cannot tell a reclaimed segment from a lost one. The
manifest (``segments.manifest``, layout in ``journal.format``) lists every live segment and the
ones being deleted ("retiring"). It is rewritten atomically (temporary name, fdatasync, rename,
directory fsync) at each change, in this order with the files:

- a new segment: its file is created durably first, then listed; records go to it only after
  that, so an unlisted segment newer than every listed one holds no record (a roll cut short);
- a deleted segment (reclaim, compaction inputs): moved to "retiring" first, then unlinked; a
  retiring file found at open is deleted (the deletion is finished).

``reconcile`` applies these rules at open. A listed segment whose file is missing, a listed
journal without its manifest (segments carry ``SEGMENT_FLAG_LISTED``), an unlisted segment older
than the newest listed one, or a damaged manifest refuses the open with
``MissingSegmentError``/``CorruptJournalError``; nothing is deleted then. Salvage opens with
what is there, rewrites the manifest to match, renames an unlisted segment file aside
(``.unlisted``, kept) and reports every missing and unlisted file.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Set, Tuple

import msgpack

from . import seeded_bugs
from .errors import CorruptJournalError, MissingSegmentError
from .format import (MANIFEST_MAGIC, SEGMENT_FLAG_LISTED, SEGMENT_HEADER_SIZE,
                     decode_control, decode_segment_header, encode_control)
from .fs import FileSystem
from .segment import join, segment_name

MANIFEST_FILE = "segments.manifest"
UNLISTED_SUFFIX = ".unlisted"  # a segment file salvage set aside (kept, never read again)


class SegmentManifest:
    """The in-memory copy of the manifest of one journal directory; every change is saved
    before it returns (thread-safe).

    Args:
        fs: the file-system seam. directory: the journal directory.
        live: sequences of the live segments. retiring: sequences being deleted.
    """

    def __init__(self, fs: FileSystem, directory: str, live: Iterable[int] = (),
                 retiring: Iterable[int] = ()) -> None:
        self._fs = fs
        self._dir = directory
        self._lock = threading.Lock()
        self.live: Set[int] = set(live)
        self.retiring: Set[int] = set(retiring)

    @property
    def path(self) -> str:
        """The manifest file's path."""
        return join(self._dir, MANIFEST_FILE)

    @classmethod
    def load(cls, fs: FileSystem, directory: str) -> Optional["SegmentManifest"]:
        """The manifest stored in ``directory``, or ``None`` when there is none.

        Raises:
            CorruptJournalError: the file exists but is not a valid manifest.
            OSError: from the seam.
        """
        path = join(directory, MANIFEST_FILE)
        if not fs.exists(path):
            return None
        body = decode_control(fs.read_file(path), MANIFEST_MAGIC)
        try:
            plan = msgpack.unpackb(body, raw=False) if body is not None else None
            live = [int(s) for s in plan["live"]]
            retiring = [int(s) for s in plan["retiring"]]
        except (TypeError, ValueError, KeyError, msgpack.UnpackException):
            raise CorruptJournalError(path, 0, "the segment manifest is damaged "
                                               "(bad magic, length, CRC or content)") from None
        return cls(fs, directory, live, retiring)

    def save(self) -> None:
        """Write the manifest durably (temporary name, fdatasync, rename, directory fsync).

        Raises:
            OSError: from the seam; the previous manifest is then still in place.
        """
        with self._lock:
            body = msgpack.packb({"live": sorted(self.live), "retiring": sorted(self.retiring)})
            write_atomically(self._fs, self._dir, MANIFEST_FILE, encode_control(body,
                                                                                MANIFEST_MAGIC))

    def add(self, sequence: int) -> None:
        """List a new segment (after its file is durable, before any record goes to it)."""
        with self._lock:
            self.live.add(sequence)
        self.save()

    def retire(self, sequences: Iterable[int], added: Iterable[int] = ()) -> None:
        """Move ``sequences`` to "retiring" (before their files are unlinked), listing
        ``added`` (compaction outputs already under their final names) in the same write."""
        with self._lock:
            gone = set(sequences)
            self.live = (self.live - gone) | set(added)
            self.retiring |= gone
        self.save()

    def forget(self, sequences: Iterable[int]) -> None:
        """Drop retiring entries whose unlink is durable (saved with the next change)."""
        with self._lock:
            self.retiring -= set(sequences)


def write_atomically(fs: FileSystem, directory: str, name: str, data: bytes) -> None:
    """Replace ``directory/name`` with ``data`` durably: temporary name, fdatasync, rename,
    directory fsync. A crash leaves the old file or the new one.

    Raises:
        OSError: from the seam.
    """
    tmp = join(directory, name + ".tmp")
    handle = fs.open(tmp, create=True)
    try:
        fs.truncate(handle, 0)
        fs.pwrite(handle, data, 0)
        fs.fdatasync(handle)
    finally:
        fs.close(handle)
    fs.rename(tmp, join(directory, name))
    if not seeded_bugs.active("no_dir_fsync"):
        fs.fsync_dir(directory)


@dataclass
class Reconciled:
    """What ``reconcile`` decided: the segments to load, the manifest to keep, what is lost."""

    paths: List[Tuple[int, str]]
    manifest: Optional[SegmentManifest]
    missing: List[str] = field(default_factory=list)
    unlisted: List[str] = field(default_factory=list)


def reconcile(fs: FileSystem, directory: str, paths: List[Tuple[int, str]], read_only: bool,
              salvage: bool, swapped: Tuple[Set[int], Set[int]] = (set(), set())
              ) -> Reconciled:
    """Check the segment files found against the manifest (rules in the module docstring).

    Args:
        paths: (sequence, path) of the segment files found, in sequence order.
        read_only: change nothing (retiring files are left and skipped; no manifest written).
        salvage: open with what is there: missing and unlisted files are reported, not refused.
        swapped: (inputs, outputs) of a compaction that a read-only open views rolled forward.

    Returns:
        The segments to load and the manifest (``None`` only in read-only mode without one).

    Raises:
        MissingSegmentError: a listed segment's file is missing, or the manifest of a listed
            journal is (names every missing file). CorruptJournalError: a damaged manifest, or
            a segment file the manifest does not list. Nothing was changed then.
        OSError: from the seam.
    """
    try:
        manifest = SegmentManifest.load(fs, directory)
    except CorruptJournalError:
        if not salvage:
            raise
        manifest = None
    if manifest is None:
        return _without_manifest(fs, directory, paths, read_only, salvage)
    manifest.live = (manifest.live - swapped[0]) | swapped[1]
    found = dict(paths)
    out = Reconciled([], manifest)
    lost = sorted(manifest.live - set(found))
    out.missing = [join(directory, segment_name(s)) for s in lost]
    newest = max(manifest.live | manifest.retiring, default=0)
    retired: List[int] = []
    for seq, path in paths:
        if seq in manifest.live:
            out.paths.append((seq, path))
        elif seq in manifest.retiring:
            retired.append(seq)
        elif seq > newest:
            out.paths.append((seq, path))  # created at a roll cut short: holds no record
            manifest.live.add(seq)
        else:
            out.unlisted.append(path)
    if (out.missing or out.unlisted) and not salvage:
        if out.missing:
            raise MissingSegmentError(out.missing, manifest.path)
        raise CorruptJournalError(out.unlisted[0], 0, "a segment file the journal's manifest "
                                  "does not list (copied in, or left from another journal)")
    if read_only:
        return out
    for path in out.unlisted:  # salvage: set aside under a name no open reads, not deleted
        fs.rename(path, path + UNLISTED_SUFFIX)
    for seq in retired:
        fs.unlink(found[seq])
    if retired or out.unlisted:
        fs.fsync_dir(directory)
    manifest.live -= set(lost)
    manifest.retiring = set()
    manifest.save()
    return out


def _without_manifest(fs: FileSystem, directory: str, paths: List[Tuple[int, str]],
                      read_only: bool, salvage: bool) -> Reconciled:
    """No manifest: a new journal, or one written before manifests existed (listed now)."""
    listed = [p for _s, p in paths if _flags(fs, p) & SEGMENT_FLAG_LISTED]
    out = Reconciled(list(paths), None)
    if listed and not salvage:
        raise MissingSegmentError([join(directory, MANIFEST_FILE)], join(directory,
                                                                         MANIFEST_FILE))
    if listed:
        out.missing = [join(directory, MANIFEST_FILE)]
    if not read_only:
        out.manifest = SegmentManifest(fs, directory, [s for s, _p in paths])
        out.manifest.save()
    return out


def _flags(fs: FileSystem, path: str) -> int:
    handle = fs.open(path, read_only=True)
    try:
        header = decode_segment_header(fs.pread(handle, SEGMENT_HEADER_SIZE, 0))
    finally:
        fs.close(handle)
    return header.flags if header is not None else 0  # (a bad header is reported on load)
