"""The fold of runs of MESSAGE records, compiled: what a replay spends most of its time on.

A store's journal is mostly MESSAGE records, and a rebuild folds every one of them
(``StoreImage._add_message``: a message entry and one reference per queue). Over a run of
frames as the journal read them (``journal.FrameRun``), ``MessageFold`` hands the plain ones
(no properties, not paged, known queues: see ``recovery/_fold.c``) to the compiled
``recovery._fold.fold_messages``, which writes their entries into the tables' overlays in their
stored form, and applies the counts it returns. Every other record, and every record when the
extension was not built, goes through ``StoreImage.apply``, the reference: both leave the same
image (tests/recovery/test_fold_compiled.py).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from mqstore.journal import FrameRun
from .image import StoreImage
from .schema import RecordKind
from .tables import DELETED

try:
    from ._fold import fold_messages as _compiled
except ImportError:  # built without a compiler: StoreImage.apply folds every record
    _compiled = None

_MESSAGE = int(RecordKind.MESSAGE)


class MessageFold:
    """Folds runs of plain MESSAGE records into one image.

    Args:
        image: the image to fold into.
        compiled: the compiled fold (``None``: the extension is not there; ``__call__`` then
            folds nothing and the caller applies every record).
    """

    def __init__(self, image: StoreImage,
                 compiled: Optional[Callable[..., Any]] = _compiled) -> None:
        self.image = image
        self.compiled = compiled

    def __call__(self, run: FrameRun, index: int, from_lsn: int, limit: int
                 ) -> Tuple[int, int]:
        """Fold ``run.frames[index:]`` while they are plain MESSAGE records (passing over
        those with an LSN below ``from_lsn``), at most ``limit`` of them.

        Returns:
            (index of the first frame not taken, records folded). The frame at that index, if
            any, is for ``StoreImage.apply``.

        Raises:
            MemoryError: the image is then partly folded and must be dropped.
        """
        if self.compiled is None or index >= len(run.frames) or \
                run.frames[index].kind != _MESSAGE:
            return index, 0
        image = self.image
        t = image.tables
        nxt, folded, last_lsn, max_mid, qcounts, sizes = self.compiled(
            run.buf, run.base, run.sequence, run.frames, index, from_lsn, limit, _MESSAGE,
            image.queues, image.ledger.pages, DELETED, t.msg.dirty, t.msg.fresh, t.qref.dirty,
            t.qref.fresh, t.qref.new_keys)
        if folded:
            t.msg.count += folded
            for qid, n in qcounts.items():
                image.queues[qid].count += n
                image.counted.add(qid)
                t.qref.count += n
            image.ledger.grow(sizes)
            image.seglive[run.sequence] = image.seglive.get(run.sequence, 0) + folded
            if max_mid >= image.next_id:
                image.next_id = max_mid + 1
            if last_lsn > image.last_lsn:
                image.last_lsn = last_lsn
        return nxt, folded


__all__ = ["MessageFold"]
