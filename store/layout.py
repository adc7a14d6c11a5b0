"""On-disk layouts of the store files other than the message record (that one is rmqgate.wire.message).

Declared once in construct (PROTOCOL.md §4.8/§4.9); hot paths use the derived ``struct.Struct``.
"""

from __future__ import annotations

import struct

from construct import Int32sb, Int64sb, Padding, Struct

from rmqgate.wire.layout import fixed_struct

#: ConsumeQueue unit (``ConsumeQueue.CQ_STORE_UNIT_SIZE``); logical offset n lives at byte n*20.
ConsumeQueueUnit = Struct(
    "commit_log_offset" / Int64sb,
    "size" / Int32sb,
    "tags_code" / Int64sb,
)

#: IndexFile header (``IndexHeader``), 40 bytes at offset 0.
IndexHeader = Struct(
    "begin_timestamp" / Int64sb,
    "end_timestamp" / Int64sb,
    "begin_phy_offset" / Int64sb,
    "end_phy_offset" / Int64sb,
    "hash_slot_count" / Int32sb,
    "index_count" / Int32sb,
)

#: One hash slot: the newest index number that hashed there (0 = empty).
IndexSlot = Struct("index" / Int32sb)

#: One linked index entry.
IndexEntry = Struct(
    "key_hash" / Int32sb,
    "phy_offset" / Int64sb,
    "time_diff" / Int32sb,  # seconds since begin_timestamp
    "prev_index" / Int32sb,
)

#: ``StoreCheckpoint``: a 4 KiB file, three int64 at its start.
Checkpoint = Struct(
    "physic_msg_timestamp" / Int64sb,
    "logics_msg_timestamp" / Int64sb,
    "index_msg_timestamp" / Int64sb,
    Padding(4096 - 24),
)
CHECKPOINT_FILE_SIZE = 4096

#: End-of-file filler of a CommitLog segment: remaining length + BLANK magic (``END_FILE_MIN_BLANK_LENGTH``).
BlankRecord = Struct("total_size" / Int32sb, "magic" / Int32sb)  # magic = BLANK_MAGIC (0xCBD43194)

CQ_UNIT = fixed_struct(ConsumeQueueUnit)
CQ_UNIT_SIZE = CQ_UNIT.size
INDEX_HEADER = fixed_struct(IndexHeader)
INDEX_HEADER_SIZE = INDEX_HEADER.size
INDEX_SLOT = fixed_struct(IndexSlot)
INDEX_ENTRY = fixed_struct(IndexEntry)
CHECKPOINT = fixed_struct(Checkpoint)
BLANK = fixed_struct(BlankRecord)
BLANK_MIN_LENGTH = BLANK.size

#: ``index.dispatch`` at the store root (rmqgate's own, not a RocketMQ file): the page shared by the
#: store process and its index dispatch process. The store publishes how far the CommitLog is written
#: and asks for flushes and the stop; the dispatcher publishes how far it has indexed and flushed.
IndexDispatchProgress = Struct(
    "generation" / Int64sb,  # store: changes at every open; a dispatcher of another generation quits
    "committed_offset" / Int64sb,  # store: every CommitLog byte below is a complete record
    "min_phy_offset" / Int64sb,  # store: CommitLog min offset (index files wholly below it expire)
    "flush_request" / Int64sb,  # store: bumped to ask for an index flush
    "stop" / Int64sb,  # store: 1 = index up to committed_offset, flush, exit
    "indexed_offset" / Int64sb,  # dispatcher: every record below is indexed
    "flushed_timestamp" / Int64sb,  # dispatcher: store time of the newest record indexed and flushed
    "flushed_request" / Int64sb,  # dispatcher: the flush_request the last flush answered
)
INDEX_DISPATCH_PROGRESS = fixed_struct(IndexDispatchProgress)


def field_structs(con: Struct) -> dict[str, tuple[int, struct.Struct]]:
    """Byte position and ``struct.Struct`` of each fixed-width field of a declaration."""
    out: dict[str, tuple[int, struct.Struct]] = {}
    pos = 0
    for sub in con.subcons:
        out[sub.name] = (pos, struct.Struct(sub.subcon.fmtstr))
        pos += sub.sizeof()
    return out


INDEX_DISPATCH_FIELDS = field_structs(IndexDispatchProgress)
