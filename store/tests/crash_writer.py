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
        flush_consume_queue_thorough_interval=200,
    )


def body_for(seq: int) -> bytes:
    rnd = random.Random(seq)
    return b"%d:" % seq + rnd.randbytes(rnd.randint(20, 3000))


BATCH = 3  # every 4th append is a batch of this many messages (seq, seq+1, seq+2) to one queue


def message_for(seq: int, batch_of: int | None = None) -> MessageExt:
    props = {"SEQ": str(seq), "KEYS": f"seq-{seq}", "TAGS": f"t{seq % 3}"}
    if batch_of is not None:
        props["BATCH"] = str(batch_of)
    return MessageExt(
        TOPIC,
        body=body_for(seq),
        queue_id=(seq if batch_of is None else batch_of) % QUEUES,
        born_timestamp=int(time.time() * 1000),
        properties=props,
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
                n = BATCH if seq % 4 == 0 else 1
                next_seq += n
            if n == 1:
                res = store.put_message(message_for(seq))
            else:
                res = store.put_messages([message_for(seq + i, batch_of=seq) for i in range(n)])
            assert res.durable is not None
            status = await asyncio.wrap_future(res.durable)
            if status.name == "PUT_OK":
                # one write < PIPE_BUF: a line is never torn
                os.write(out, b"".join(b"%d\n" % (seq + i) for i in range(n)))

    os.write(out, b"ready\n")
    await asyncio.gather(*(worker() for _ in range(8)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
