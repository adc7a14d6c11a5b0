"""Recovery at open: the CommitLog is validated record by record (a torn tail is dropped by CRC),
ConsumeQueues are cut back to it, and what they and the index lack is re-dispatched from it
(RocketMQ's recoverNormally / recoverAbnormally and the reput that follows)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NamedTuple

from rmqgate.store.consume_queue import BLANK_SIZE, ConsumeQueue
from rmqgate.store.mapped_file import MappedFile
from rmqgate.wire.errors import MessageFormatError
from rmqgate.wire.message import decode_message

if TYPE_CHECKING:
    from rmqgate.store.message_store import DefaultMessageStore

_log = logging.getLogger(__name__)


class RecoveryLoss(NamedTuple):
    """What recovery cut: the CommitLog's valid end, the ConsumeQueue units (messages) that pointed
    past it or at records that do not check out, and the CommitLog bytes those units referenced past
    the valid end (a tail written to the queues but not, or not wholly, to the CommitLog)."""

    clean: bool
    commitlog_end: int
    messages: int
    bytes: int


def load_and_recover(store: DefaultMessageStore) -> None:
    """Load the CommitLog, ConsumeQueue and index files, find where the valid CommitLog ends (from
    the last three segments after a clean shutdown, else from the segment the checkpoint vouches
    for), drop what lies past it, and re-dispatch the records the ConsumeQueues and index lack."""
    cfg = store.config
    store.commitlog.queue.load()
    cq_root = store.root / "consumequeue"
    if cq_root.is_dir():
        for tdir in sorted(cq_root.iterdir()):
            if not tdir.is_dir():
                continue
            for qdir in sorted(tdir.iterdir()):
                if qdir.is_dir() and qdir.name.isdigit():
                    cq = ConsumeQueue(tdir.name, int(qdir.name), cq_root, cfg.mapped_file_size_consume_queue)
                    cq.load()
                    store.consume_queues[(tdir.name, int(qdir.name))] = cq
    index_rebuild_from = (
        store.index.load(store.last_exit_ok or store.same_boot, store.checkpoint.index_msg_timestamp)
        if store._index_inline
        else None  # the dispatcher process recovers its index files itself
    )
    for cq in store.consume_queues.values():
        cq.recover()

    files = store.commitlog.queue.files
    start = max(0, len(files) - 3) if store.last_exit_ok else _abnormal_start_file(store, files)
    end = store.commitlog.recover_end(start)
    store.commitlog.queue.set_positions(end)

    units_before = sum(cq.get_max_offset_in_queue() for cq in store.consume_queues.values())
    referenced_end = max((cq.max_physic_offset for cq in store.consume_queues.values()), default=-1)
    for cq in store.consume_queues.values():
        cq.truncate_dirty(end)
        if not store.last_exit_ok:
            _check_last_units(store, cq)
    units_after = sum(cq.get_max_offset_in_queue() for cq in store.consume_queues.values())
    loss = RecoveryLoss(store.last_exit_ok, end, units_before - units_after, max(0, referenced_end - end))
    store.recovery_loss = loss
    _log.log(
        logging.INFO if loss.clean and not loss.messages else logging.WARNING,
        "recovery (%s): CommitLog valid to offset %d; dropped %d messages, %d bytes past it",
        "clean shutdown" if loss.clean else "after a crash",
        loss.commitlog_end,
        loss.messages,
        loss.bytes,
    )
    min_phy = store.commitlog.get_min_offset()
    if store.last_exit_ok:
        reput_from = max([cq.max_physic_offset for cq in store.consume_queues.values()] + [min_phy])
    else:
        reput_from = files[start].file_from_offset if files else 0
        if index_rebuild_from is not None:
            reput_from = min(reput_from, index_rebuild_from)
    store.recovered_from = reput_from
    store.reput(reput_from, end)
    for key, cq in store.consume_queues.items():
        cq.correct_min_offset(min_phy)
        store.topic_queue_table[key] = cq.get_max_offset_in_queue()


def _abnormal_start_file(store: DefaultMessageStore, files: list[MappedFile]) -> int:
    """Newest segment whose first record is older than everything the checkpoint vouches for."""
    limit = store.checkpoint.min_timestamp()
    if store._index_inline:
        limit = min(limit, store.checkpoint.index_msg_timestamp)
    for i in range(len(files) - 1, -1, -1):
        try:
            msg = decode_message(files[i].buf, 0, with_body=False)
        except MessageFormatError:
            continue
        if msg.store_timestamp and msg.store_timestamp <= limit:
            return i
    return 0


def _check_last_units(store: DefaultMessageStore, cq: ConsumeQueue) -> None:
    """After a crash, drop trailing ConsumeQueue units that don't describe their CommitLog record.
    A unit below the CommitLog's first segment stays: its record expired (an idle queue), and
    dropping it would hand its queue offsets out again."""
    min_phy = store.commitlog.get_min_offset()
    first = cq.get_min_offset_in_queue()
    offset = cq.get_max_offset_in_queue()
    while offset > first:  # back from the last unit to the first that checks out; one cut
        unit = cq.get_unit(offset - 1)
        if unit is None or unit[0] < min_phy or unit[1] == BLANK_SIZE:
            break
        phys, size, _ = unit
        rec = store.commitlog.record_at(phys)
        if rec is not None and len(rec) == size:
            try:
                m = decode_message(rec, 0, with_body=False)
                if m.topic == cq.topic and m.queue_id == cq.queue_id and m.queue_offset == offset - 1:
                    break
            except MessageFormatError:
                pass
        offset -= 1
    cq.truncate_to(offset)
