"""StoreCheckpoint: store timestamps of the newest records known flushed in CommitLog, ConsumeQueue, index."""

from __future__ import annotations

import mmap
import os
from operator import attrgetter
from pathlib import Path

from rmqgate.store.layout import CHECKPOINT, CHECKPOINT_FILE_SIZE, Checkpoint
from rmqgate.wire.layout import fixed_field_names

#: StoreCheckpoint attributes named as the file's fields, in its order
_FIELDS = fixed_field_names(Checkpoint)
_values = attrgetter(*_FIELDS)


class StoreCheckpoint:
    physic_msg_timestamp: int  # (the header fields, set from the file)
    logics_msg_timestamp: int
    index_msg_timestamp: int

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size != CHECKPOINT_FILE_SIZE:
            os.ftruncate(self._fd, CHECKPOINT_FILE_SIZE)
        self._mm = mmap.mmap(self._fd, CHECKPOINT_FILE_SIZE)
        for name, value in zip(_FIELDS, CHECKPOINT.unpack_from(self._mm, 0), strict=True):
            setattr(self, name, value)

    def min_timestamp(self) -> int:
        """``getMinTimestamp``: 3 s of slack before the older of the CommitLog/ConsumeQueue marks."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def flush(self) -> None:
        CHECKPOINT.pack_into(self._mm, 0, *_values(self))
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            self.flush()
            self._mm.close()
            os.close(self._fd)
            self._fd = -1
