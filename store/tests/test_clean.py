"""CleanService's disk marks as 4.9.8's CleanCommitLogService.isSpaceToDelete sets RunningFlags' DISK_FULL."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

import rmqgate.store.clean as clean
from rmqgate.store.api import PutMessageStatus
from rmqgate.store.message_store import DefaultMessageStore
from rmqgate.store.tests.test_message_store import cfg, msg

Usage = collections.namedtuple("Usage", "total used free")


def test_a_full_disk_takes_writes_again_only_at_the_forcible_clean_ratio(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Marked full over 90 %, cleared only at 85 % or below: between the two the mark stays as it was
    (a filling disk keeps taking writes up to 90 %, a full one stays refused until 85 %)."""
    usage = {"used": 50}
    monkeypatch.setattr(clean.shutil, "disk_usage", lambda _p: Usage(100, usage["used"], 100 - usage["used"]))
    s = DefaultMessageStore.open(cfg(tmp_path, disk_max_used_space_ratio=95), start_services=False)

    def put_after_clean(used: int) -> PutMessageStatus:
        usage["used"] = used
        s.clean_expired_files()
        return s.put_message(msg()).status

    try:
        assert put_after_clean(88) is PutMessageStatus.PUT_OK  # filling: not full yet
        assert put_after_clean(90) is PutMessageStatus.PUT_OK  # (over 0.90, not at it)
        assert put_after_clean(91) is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert put_after_clean(88) is PutMessageStatus.SERVICE_NOT_AVAILABLE  # still marked full
        assert put_after_clean(86) is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert put_after_clean(85) is PutMessageStatus.PUT_OK
        assert put_after_clean(89) is PutMessageStatus.PUT_OK
    finally:
        s.shutdown()
