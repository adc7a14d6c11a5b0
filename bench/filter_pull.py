"""Pull throughput with a SQL92 property filter next to the same pulls with a tag filter and with none.

One store of N messages (256-byte bodies; TAGS alternating TagA/TagB, KEYS, UNIQ_KEY and two user
properties "a" = i % 10 and "color"), 8 queues; each case pulls every queue from offset 0 to its end
in 32-message pulls through ``get_messages``, with what the broker's pull processor passes it: no
filter; the tag codes of "TagA" (ConsumeQueue tagsCode check, no record read for a mismatch); and
the compiled SQL92 filter data of "TAGS = 'TagA'" (the same messages: an expression true only for
some TAGS values also gets their tag codes, so the other records are skipped unread, and the rest
have their properties read and evaluated), "TAGS = 'TagA' AND a BETWEEN 3 AND 7" and
"a BETWEEN 3 AND 7 AND color <> 'blue'" (no TAGS condition: every record is read). Rates are messages
delivered per second and messages scanned per second, best of ``--repeat`` rounds (default 5), all
in one run on one store; the ratio SQL92 / tag is per round. Run:
``.venv/bin/python bench/filter_pull.py [N] [--repeat R]``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import print_table

from rmqgate.server.consumer_filter import build
from rmqgate.store.api import GetMessageStatus, StoreConfig
from rmqgate.store.message_store import DefaultMessageStore
from rmqgate.wire.message import MessageExt, java_string_hash

QUEUES = 8
COLORS = ("red", "green", "blue")
TAG_SQL = "TAGS = 'TagA'"
MIXED_SQL = "TAGS = 'TagA' AND a BETWEEN 3 AND 7"
PROPERTY_SQL = "a BETWEEN 3 AND 7 AND color <> 'blue'"


def broker_filter(sql: str) -> tuple[frozenset[int] | None, Callable]:
    """What the pull processor passes ``get_messages`` for a group subscribed with ``sql``."""
    data = build("BenchTopic", "BenchGroup", sql, "SQL92", 1)
    assert data is not None
    return data.tags_codes, data.compiled.matches


def fill(store: DefaultMessageStore, n: int) -> None:
    body = os.urandom(256)
    for i in range(n):
        store.put_message(
            MessageExt(
                "BenchTopic",
                body=body,
                queue_id=i % QUEUES,
                born_timestamp=1_763_780_000_000 + i,
                born_host=b"\x7f\x00\x00\x01",
                born_port=50000,
                properties={
                    "TAGS": "TagA" if i % 2 == 0 else "TagB",
                    "KEYS": f"key-{i}",
                    "UNIQ_KEY": f"7F00000100012A9F{i:016X}",
                    "a": str(i % 10),
                    "color": COLORS[i % 3],
                },
            )
        )
    store.commitlog.queue.flush()


def pull_all(
    store: DefaultMessageStore, tags: set[int] | None, props: Callable | None
) -> tuple[float, int, int]:
    """(seconds, messages delivered, messages scanned) pulling every queue to its end."""
    t = time.perf_counter()
    delivered = scanned = 0
    for q in range(QUEUES):
        off = 0
        while True:
            res = store.get_messages("BenchTopic", q, off, 32, tags_filter=tags, properties_filter=props)
            if res.status is GetMessageStatus.FOUND:
                delivered += res.message_count
            elif res.status is not GetMessageStatus.NO_MATCHED_MESSAGE:
                break
            scanned += res.next_begin_offset - off
            off = res.next_begin_offset
    return time.perf_counter() - t, delivered, scanned


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 100_000
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 5
    root = Path(tempfile.mkdtemp(prefix="rmqgate-filter-bench-"))
    try:
        store = DefaultMessageStore.open(
            StoreConfig(str(root), message_index_enable=False, mapped_file_size_commitlog=256 * 1024 * 1024)
        )
        fill(store, n)
        cases: dict[str, tuple[set[int] | None, Callable | None]] = {
            "no filter": (None, None),
            "tag TagA": ({java_string_hash("TagA")}, None),
            **{f"SQL92 {sql}": broker_filter(sql) for sql in (TAG_SQL, MIXED_SQL, PROPERTY_SQL)},
        }
        best: dict[str, tuple[float, int, int]] = {}
        ratios: list[float] = []
        for _ in range(repeat):
            this_round = {}
            for name, (tags, props) in cases.items():
                this_round[name] = pull_all(store, tags, props)
                if name not in best or this_round[name][0] < best[name][0]:
                    best[name] = this_round[name]
            ratios.append(this_round[f"SQL92 {TAG_SQL}"][0] / this_round["tag TagA"][0])
        store.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{n} messages, {QUEUES} queues, 32-message pulls, best of {repeat} rounds")
    tag_time = best["tag TagA"][0]
    print_table(
        ("filter", "delivered", "delivered msgs/s", "scanned msgs/s", "time / tag filter"),
        [
            (name, d, f"{d / dt:,.0f}", f"{s / dt:,.0f}", f"{dt / tag_time:.2f}x")
            for name, (dt, d, s) in best.items()
        ],
    )
    print(
        f"SQL92 {TAG_SQL!r} time / tag-filter time per round: "
        + ", ".join(f"{r:.2f}" for r in ratios)
        + f" (limit 2.00, worst {max(ratios):.2f})"
    )


if __name__ == "__main__":
    main()
