"""An idle connection on the Java 4.9.8 broker and rmqgate alike, both with
``serverChannelMaxIdleTimeSeconds=2``: a connection that sends nothing is closed by the broker (Netty's
IdleStateHandler on all-idle in Java), one that keeps sending requests is kept open."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rmqgate.compat_tests import java
from rmqgate.compat_tests.servers import BROKER_CONF, ServerProcess
from rmqgate.compat_tests.wire_client import WireClient, heartbeat_body
from rmqgate.wire.codes import RequestCode, ResponseCode

pytestmark = [pytest.mark.slow, pytest.mark.java]

IDLE_CONF = "serverChannelMaxIdleTimeSeconds=2\n"


def _closed_within(c: WireClient, seconds: float) -> bool:
    """Whether the broker closes ``c``'s connection (EOF or reset) within ``seconds``, sending nothing."""
    c.sock.settimeout(seconds)
    try:
        return c.sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def _idle_outcomes(broker: str) -> dict[str, str]:
    out: dict[str, str] = {}
    with WireClient(broker) as idle, WireClient(broker) as busy:
        started = time.monotonic()
        heartbeat = heartbeat_body("idle-cid")
        while time.monotonic() - started < 5:  # well past the 2 s idle limit
            assert busy.invoke(RequestCode.HEART_BEAT, body=heartbeat).code == ResponseCode.SUCCESS
            time.sleep(0.5)
        try:
            answered = busy.invoke(RequestCode.HEART_BEAT, body=heartbeat).code == ResponseCode.SUCCESS
        except OSError:
            answered = False
        out["connection sending every 0.5 s"] = "open" if answered else "closed"
        # the silent one has been silent for over 5 s by now: closed already, or within a check's time
        out["silent connection"] = "closed" if _closed_within(idle, 3) else "open"
    return out


def test_idle_connections_closed_as_java(tmp_path: Path) -> None:
    reason = java.missing()
    if reason:
        pytest.fail(reason)  # the java mark selects this module: a missing JDK is a failure, not a pass
    seen: dict[str, dict[str, str]] = {}
    namesrv = java.JavaNameServer(tmp_path / "java-namesrv")
    try:
        namesrv.wait_ready()
        broker = java.JavaBroker(
            tmp_path / "java-broker", namesrv.addr, extra_conf=java.JAVA_BROKER_CONF + IDLE_CONF
        )
        try:
            broker.wait_ready()
            seen["java"] = _idle_outcomes(broker.addr)
        finally:
            broker.stop()
    finally:
        namesrv.stop()
    server = ServerProcess(tmp_path, conf=BROKER_CONF + IDLE_CONF)
    try:
        server.wait_ready()
        seen["rmqgate"] = _idle_outcomes(server.broker)
    finally:
        server.stop()
    assert seen["java"] == {"silent connection": "closed", "connection sending every 0.5 s": "open"}, seen
    assert seen["rmqgate"] == seen["java"], seen
