"""On-disk layouts of the store files other than the message record (that one is rmqgate.wire.message).

Declared once in construct (PROTOCOL.md §4.8/§4.9); hot paths use the derived ``struct.Struct``.
"""

from __future__ import annotations

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
