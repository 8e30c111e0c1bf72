"""Relocation files: where a compaction moved each record, kept until an index no longer needs it.

Compaction moves the live records of some sealed segments into new ones and deletes the old
ones (``journal.compaction``). An index checkpoint taken before the compaction names records
by their old locations; the one the caller takes after it names the new ones. A crash between
the swap and that checkpoint used to leave an index that named segments that were gone, and
the next open rebuilt the whole index from the journal (issue 36: a rebuild after kill -9 in
one cycle of ten). So before its commit point the compaction writes ``{first output}.reloc``
(CRC-framed msgpack: inputs, outputs, and each moved record's old and new location, synced):
an open whose index predates the compaction maps the index's locations through it instead of
rebuilding. The files go once a checkpoint taken after them is durable (``forget``); an open
that rolls a compaction back removes its file with the outputs.

Cost: about 30 bytes per moved record on disk, read only by an open that needs it.
"""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple

import msgpack

from .format import RELOCATION_MAGIC, decode_control, encode_control
from .fs import FileSystem
from .manifest import write_atomically
from .segment import Location, join, parse_segment_name
from .waits import LENGTH_MASK, SHIFT, chunk_values

SUFFIX = ".reloc"


@dataclass(frozen=True)
class Relocation:
    """One compaction's moves: the segments it replaced, those it wrote, and old -> new
    location of every record it moved."""

    name: str
    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]
    moved: Dict[Location, Location]


def file_name(first_output: int) -> str:
    """The relocation file of the compaction whose first output is ``first_output``."""
    return f"{first_output:016d}{SUFFIX}"


def write(fs: FileSystem, directory: str, inputs: List[int], outputs: List[int],
          moved: Mapping[Location, Location]) -> str:
    """Write a compaction's relocation file durably (temporary name, fdatasync, rename,
    directory fsync); returns its name.

    Raises:
        OSError: from the seam (nothing of the compaction is committed yet).
    """
    flat: List[int] = []
    for old, new in moved.items():
        flat += (old.segment, old.offset, old.length, new.segment, new.offset, new.length)
    body = msgpack.packb({"inputs": inputs, "outputs": outputs, "moved": flat})
    name = file_name(outputs[0])
    write_atomically(fs, directory, name, encode_control(body, RELOCATION_MAGIC))
    return name


def load(fs: FileSystem, directory: str) -> List[Relocation]:
    """The relocation files in ``directory`` whose outputs are all there, oldest compaction
    first; one that is torn or damaged, or whose outputs are not all there (a compaction rolled
    back), is left out: it can tell nothing an open may rely on."""
    names = sorted(n for n in fs.listdir(directory) if n.endswith(SUFFIX))
    if not names:
        return []
    present = {parse_segment_name(n) for n in fs.listdir(directory)}
    out = []
    for name in names:
        body = decode_control(fs.read_file(join(directory, name)), RELOCATION_MAGIC)
        if body is None:
            continue
        data = msgpack.unpackb(body)
        if not set(data["outputs"]) <= present:
            continue
        flat = data["moved"]
        moved = {Location(flat[i], flat[i + 1], flat[i + 2]):
                 Location(flat[i + 3], flat[i + 4], flat[i + 5])
                 for i in range(0, len(flat), 6)}
        out.append(Relocation(name, tuple(data["inputs"]), tuple(data["outputs"]), moved))
    return out


def remove(fs: FileSystem, directory: str, names: Iterable[str]) -> int:
    """Delete relocation files (a checkpoint after them is durable, or their compaction was
    rolled back); returns how many.

    Raises:
        OSError: from the seam (a file left is harmless: an index newer than it ignores it).
    """
    n = 0
    for name in names:
        path = join(directory, name)
        if fs.exists(path):
            fs.unlink(path)
            n += 1
    if n:
        fs.fsync_dir(directory)
    return n


def stale(fs: FileSystem, directory: str) -> List[str]:
    """Relocation files whose compaction did not complete (an output is missing)."""
    names = [n for n in fs.listdir(directory) if n.endswith(SUFFIX)]
    if not names:
        return []
    kept = {r.name for r in load(fs, directory)}
    return [n for n in names if n not in kept]


def applying(relocations: List[Relocation], catalogue: Set[int]) -> List[Relocation]:
    """Those of ``relocations`` an index whose catalogue lists ``catalogue`` (segment
    sequences) predates: it lists one of their inputs. A later compaction's moves start from
    an earlier one's outputs, so the list is applied in order."""
    out: List[Relocation] = []
    known = set(catalogue)
    for r in relocations:
        if known & set(r.inputs):
            out.append(r)
            known |= set(r.outputs)
    return out


def relocated_liveness(state: Mapping[str, Any], moved: Mapping[Location, Location]
                       ) -> Dict[str, Any]:
    """A stored liveness state (``Liveness.restore_state``'s ``state``) with its tombstones
    and pins moved as compaction moved them at run time (``Liveness.relocate_tombstones``):
    pins keyed by a moved tombstone follow it; packed waiting tombstones that moved are
    regrouped under their new segments. Dead marks of the replaced segments are dropped by
    ``restore_state`` itself (those segments are gone)."""
    by_pos = {(o.segment, o.offset): n for o, n in moved.items()}
    moved_from = {o.segment for o in moved}

    def pins() -> Iterator[Tuple[List[int], List[List[int]]]]:
        for tomb_raw, targets_raw in state.get("pins", ()):
            tomb = Location(*tomb_raw)
            new = moved.get(tomb, tomb)
            yield ([new.segment, new.offset, new.length],
                   [list(moved.get(Location(*t), Location(*t))) for t in targets_raw])

    def waits() -> Iterator[Tuple[int, int, bytes]]:
        for sx, st, raw in state.get("waits", ()):
            if st not in moved_from:
                yield sx, st, raw
                continue
            regrouped: Dict[int, List[int]] = {}
            for packed in chunk_values(raw):
                new: Optional[Location] = by_pos.get((st, packed >> SHIFT))
                if new is not None and new.length <= LENGTH_MASK:
                    regrouped.setdefault(new.segment, []).append(
                        new.offset << SHIFT | new.length)
            for seg, values in sorted(regrouped.items()):
                arr = array("Q", values)
                if sys.byteorder != "little":  # pragma: no cover (stored little-endian)
                    arr.byteswap()
                yield sx, seg, arr.tobytes()

    out = dict(state)
    out["pins"] = pins()
    out["waits"] = waits()
    return out


__all__ = ["Relocation", "SUFFIX", "applying", "file_name", "load", "relocated_liveness",
           "remove", "stale", "write"]
