"""Writer process for the crash tests: appends under SYNC_FLUSH from 8 asyncio tasks and prints
each sequence number once its append is durable (acknowledged). Killed with SIGKILL by the test."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time

from rmqgate.store.api import StoreConfig
from rmqgate.store.message_store import DefaultMessageStore
from rmqgate.wire.message import MessageExt

TOPIC = "Crash"
QUEUES = 4


def crash_config(root: str) -> StoreConfig:
    return StoreConfig(
        root,
        flush_disk_type="SYNC_FLUSH",
        mapped_file_size_commitlog=64 * 1024,
        mapped_file_size_consume_queue=40 * 20,
        max_hash_slot_num=256,
        max_index_num=400,
        flush_interval_consume_queue=50,
    )


def body_for(seq: int) -> bytes:
    rnd = random.Random(seq)
    return b"%d:" % seq + rnd.randbytes(rnd.randint(20, 3000))


def message_for(seq: int) -> MessageExt:
    return MessageExt(
        TOPIC,
        body=body_for(seq),
        queue_id=seq % QUEUES,
        born_timestamp=int(time.time() * 1000),
        properties={"SEQ": str(seq), "KEYS": f"seq-{seq}", "TAGS": f"t{seq % 3}"},
    )


async def main(root: str, start: int) -> None:
    store = DefaultMessageStore.open(crash_config(root))
    out = sys.stdout.fileno()
    next_seq = start
    lock = asyncio.Lock()

    async def worker() -> None:
        nonlocal next_seq
        while True:
            async with lock:
                seq = next_seq
                next_seq += 1
            res = store.put_message(message_for(seq))
            assert res.durable is not None
            status = await asyncio.wrap_future(res.durable)
            if status.name == "PUT_OK":
                os.write(out, b"%d\n" % seq)  # one write < PIPE_BUF: a line is never torn

    os.write(out, b"ready\n")
    await asyncio.gather(*(worker() for _ in range(8)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
