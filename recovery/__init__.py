"""mqstore's recovery: the record schema, the image folded from records, the index, and the
open-time procedure that trusts or rebuilds the index. Imports only ``journal``."""

from recovery.checkpoint import Checkpoint
from recovery.errors import IndexInvalidError, MalformedRecordError, RecoveryError
from recovery.image import (AddressImage, MessageImage, NullSink, QueueImage, RefImage,
                            StoreImage)
from recovery.index import LmdbIndex
from recovery.indexstore import IndexStore, MemoryIndex
from recovery.relocation import relocate
from recovery.schema import AckReason, RecordKind
from recovery.store import (INDEX_DIR, JOURNAL_DIR, Progress, Recovered, RecoveryReport, recover,
                            replay, write_index)

__all__ = [
    "AckReason", "AddressImage", "Checkpoint", "INDEX_DIR", "IndexInvalidError", "IndexStore",
    "JOURNAL_DIR", "LmdbIndex", "MalformedRecordError", "MemoryIndex", "MessageImage", "NullSink",
    "Progress", "QueueImage", "RecordKind", "Recovered", "RecoveryError", "RecoveryReport",
    "RefImage", "StoreImage", "recover", "relocate", "replay", "write_index",
]
