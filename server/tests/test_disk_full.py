"""A send refused because the store takes no writes (disk full, slave, shut down) is answered as 4.9.8's
SendMessageProcessor answers it: SERVICE_NOT_AVAILABLE with the partitions' use quoted by diskUtil()."""

from __future__ import annotations

import re
from pathlib import Path

from rmqgate.server.testing import LocalBroker, async_test, send_v2
from rmqgate.store.clean import disk_used_percent
from rmqgate.wire.codes import ResponseCode


@async_test
async def test_a_send_to_a_full_disk_is_refused_with_the_disk_use_in_the_remark(tmp_path: Path) -> None:
    async with LocalBroker(str(tmp_path / "store")) as lb:
        c = await lb.client()
        assert (await c.invoke(send_v2("T", b"before"))).code == ResponseCode.SUCCESS
        lb.broker.store._disk_full = True  # what the cleaner sets over diskSpaceWarningLevelRatio
        refused = await c.invoke(send_v2("T", b"refused"))
        lb.broker.store._disk_full = False
        again = await c.invoke(send_v2("T", b"after"))
        await c.aclose()
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
    m = re.fullmatch(
        r"service not available now\. It may be caused by one of the following reasons: the broker's disk is "
        r"full \[CL: (.{5}) CQ: (.{5}) INDEX: (.{5})\], messages are put to the slave, message store has been "
        r"shut down, etc\.",
        refused.remark or "",
    )
    assert m, refused.remark
    store = tmp_path / "store"  # (no index directory yet reads -1, as Java's for a missing path)
    expected = [disk_used_percent(store / d) / 100 for d in ("commitlog", "consumequeue", "index")]
    assert [float(v) for v in m.groups()] == expected
    assert all(len(v) == 5 for v in m.groups())  # %5.2f
    assert again.code == ResponseCode.SUCCESS
