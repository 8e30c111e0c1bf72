"""mqstore's recovery: the record schema, the image folded from records, the index, and the
open-time procedure that trusts or rebuilds the index. Imports only ``journal``."""

from .checkpoint import Checkpoint
from .errors import IndexInvalidError, MalformedRecordError, RecoveryError
from .image import (AddressImage, MessageImage, NullSink, QueueImage, RefImage,
                    StoreImage)
from .index import LmdbIndex
from .indexstore import IndexStore, MemoryIndex
from .relocation import relocate
from .schema import AckReason, RecordKind
from .store import (INDEX_DIR, JOURNAL_DIR, Progress, Recovered, RecoveryReport, rebuild,
                    recover, replay, write_index)

__all__ = [
    "AckReason", "AddressImage", "Checkpoint", "INDEX_DIR", "IndexInvalidError", "IndexStore",
    "JOURNAL_DIR", "LmdbIndex", "MalformedRecordError", "MemoryIndex", "MessageImage", "NullSink",
    "Progress", "QueueImage", "RecordKind", "Recovered", "RecoveryError", "RecoveryReport",
    "RefImage", "StoreImage", "rebuild", "recover", "relocate", "replay", "write_index",
]
