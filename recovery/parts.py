"""What the parts of ``StoreImage`` use of one another: the one declaration of its shared state
and of each method one part calls and another defines.

``StoreImage`` (``recovery.image``) is one class assembled from parts, each a mixin kept to one
subject: ``ReferenceSettling`` (``recovery.settling``), ``SegmentHolds`` (``recovery.holds``),
``ReferenceMoves`` (``recovery.moves``) and ``QueueDeletions`` (``recovery.deletions``). Every
part derives from :class:`ImageParts`, so it comes after all of them in the method resolution
order: a method declared here is always the defining part's (or ``StoreImage``'s) at run time,
whatever the order of the bases. The declarations raise ``NotImplementedError`` if nothing
defines them. All are traits, as mypyc compiles a class with several bases.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from mypy_extensions import trait

from mqstore.journal import Location
from .entries import AddressImage, DeletedQueueImage, MessageImage, QueueImage, RefImage


@trait
class ImageParts:
    """The state and the methods ``StoreImage``'s parts share (see the module docstring)."""

    # StoreImage's state (set in StoreImage.__init__)
    tables: Any
    ledger: Any
    queues: Dict[int, QueueImage]
    addresses: Dict[int, AddressImage]
    settings: Dict[str, Tuple[Dict[str, Any], Location]]
    deleted: List[DeletedQueueImage]
    seglive: Dict[int, int]
    dirty: set
    counted: set
    released: Optional[Callable[[MessageImage, bool], None]]
    _replaced: Dict[Tuple[int, int], RefImage]
    _folding: Optional[Location]
    _sink: Any

    # StoreImage's
    def message(self, mid: int) -> Optional[MessageImage]:
        raise NotImplementedError

    def messages(self) -> Iterator[MessageImage]:
        raise NotImplementedError

    def ref(self, qid: int, mid: int, msg: Optional[MessageImage] = None
            ) -> Optional[RefImage]:
        raise NotImplementedError

    def refs(self, qid: int) -> Iterator[RefImage]:
        raise NotImplementedError

    def _key(self, qid: int, ref: RefImage) -> bytes:
        raise NotImplementedError

    # SegmentHolds'
    def _hold(self, loc: Optional[Location]) -> None:
        raise NotImplementedError

    def _drop(self, loc: Optional[Location]) -> None:
        raise NotImplementedError

    def _superseded(self, loc: Optional[Location], sink: Any) -> None:
        raise NotImplementedError

    # ReferenceMoves'
    def all_scheduled(self, qid: int) -> Iterator[RefImage]:
        raise NotImplementedError

    def _due_gone(self, location: Location) -> None:
        raise NotImplementedError

    # ReferenceSettling's
    def _ack(self, p: Mapping[str, Any], sink: Any) -> Optional[Location]:
        raise NotImplementedError

    def _unplace(self, queue: QueueImage, ref: RefImage, msg: Optional[MessageImage]) -> None:
        raise NotImplementedError

    def _remove_ref(self, queue: QueueImage, ref: RefImage, msg: Optional[MessageImage],
                    sink: Any, placed: bool = True) -> None:
        raise NotImplementedError

    def _release_msg(self, msg: MessageImage, sink: Any,
                     key: Optional[bytes] = None) -> None:
        raise NotImplementedError

    def _tx_done(self, location: Location) -> bool:
        raise NotImplementedError
