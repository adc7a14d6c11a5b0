"""A group's SQL92 filter data across a broker restart, on the Java 4.9.8 broker and rmqgate alike:
both persist it (Java's config/consumerFilter.json, rmqgate's metadata, exported as that file in
the same shape), read it back dead, and a heartbeat of the same subVersion after the restart revives
it with the persisted expression, by which pulls without a subscription are then filtered."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests import java
from rmqgate.compat_tests.servers import BROKER_CONF, ServerProcess, discover_broker
from rmqgate.compat_tests.wire_client import (
    WireClient,
    create_routed_topic,
    decode_messages,
    dumps,
    heartbeat_body,
    loads,
)
from rmqgate.store.config_io import CONSUMER_FILTER_JSON
from rmqgate.tools.cli import main as rmqgate_main
from rmqgate.wire import fastjson
from rmqgate.wire.codes import RequestCode, ResponseCode

pytestmark = [pytest.mark.slow, pytest.mark.java]

TOPIC, GROUP = "FilterRestartTopic", "FilterRestartGroup"


def _heartbeat(expression: str, sub_version: int) -> bytes:
    body = loads(heartbeat_body("filter-cid", consumers=[{"group": GROUP, "topics": {TOPIC: "*"}}]))
    sub = body["consumerDataSet"][0]["subscriptionDataSet"][0]
    sub.update(expressionType="SQL92", subString=expression, subVersion=sub_version, codeSet=[], tagsSet=[])
    return dumps(body)


def _before_restart(broker: str, namesrv: str) -> None:
    """The topic, the group's heartbeat with ``a > 5`` (subVersion 100), two messages."""
    create_routed_topic(broker, namesrv, TOPIC, 1)
    with WireClient(broker) as c:
        assert c.invoke(RequestCode.HEART_BEAT, body=_heartbeat("a > 5", 100)).code == ResponseCode.SUCCESS
        for a in ("1", "9"):
            sent = c.send_message(TOPIC, f"a={a}".encode(), queue_id=0, properties={"a": a})
            assert sent.code == ResponseCode.SUCCESS, sent.remark


def _after_restart(broker: str) -> dict[str, Any]:
    """A pull without the subscription flag before any heartbeat, then after one of the same
    subVersion with another expression: codes and the ``a`` of each message pulled."""
    out: dict[str, Any] = {}
    with WireClient(broker) as c:
        out["before heartbeat"] = c.pull(GROUP, TOPIC, 0, 0).code
        out["heartbeat"] = c.invoke(RequestCode.HEART_BEAT, body=_heartbeat("a < 5", 100)).code
        got = c.pull(GROUP, TOPIC, 0, 0)
        out["pull"] = (got.code, [m.properties.get("a") for m in decode_messages(got.body)])
    return out


def _filter_file(path: Path) -> dict[str, Any]:
    """consumerFilter.json without its times (bornTime, deadTime, dead: when each broker stopped)."""
    text = re.sub(r'"(bornTime|deadTime)":\d+', r'"\1":0', path.read_text())
    data = fastjson.loads(re.sub(r'"dead":(true|false)', '"dead":false', text))
    return data


def test_filter_data_outlives_a_restart_as_java(tmp_path: Path) -> None:
    reason = java.missing()
    if reason:
        pytest.fail(reason)  # the java mark selects this module: a missing JDK is a failure, not a pass
    seen: dict[str, Any] = {}
    files: dict[str, dict[str, Any]] = {}
    # Java: stop (its shutdown persists consumerFilter.json) and start again on the same store
    namesrv = java.JavaNameServer(tmp_path / "java-namesrv")
    try:
        namesrv.wait_ready()
        broker = java.JavaBroker(tmp_path / "java-broker", namesrv.addr)
        try:
            broker.wait_ready()
            _before_restart(discover_broker(namesrv.addr)[0], namesrv.addr)
        finally:
            broker.stop()
        files["java"] = _filter_file(broker.store / "config" / CONSUMER_FILTER_JSON)
        again = java.JavaBroker(tmp_path / "java-broker", namesrv.addr, port=broker.port)
        try:
            again.wait_ready()
            seen["java"] = _after_restart(again.addr)
        finally:
            again.stop()
    finally:
        namesrv.stop()
    # rmqgate: the same on one store, its metadata exported as Java's file in between
    workdir = tmp_path / "rmqgate"
    workdir.mkdir()
    server = ServerProcess(workdir, conf=BROKER_CONF)
    try:
        server.wait_ready()
        _before_restart(server.broker, server.namesrv)
    finally:
        server.stop()
    assert (
        rmqgate_main(["store", "export-config", str(tmp_path / "exported"), "--store", str(server.store)])
        == 0
    )
    files["rmqgate"] = _filter_file(tmp_path / "exported" / CONSUMER_FILTER_JSON)
    server = ServerProcess(
        workdir, conf=BROKER_CONF, namesrv_port=server.namesrv_port, broker_port=server.broker_port
    )
    try:
        server.wait_ready()
        seen["rmqgate"] = _after_restart(server.broker)
    finally:
        server.stop()
    assert seen["rmqgate"] == seen["java"], seen
    assert seen["java"] == {
        "before heartbeat": ResponseCode.SUBSCRIPTION_NOT_EXIST,
        "heartbeat": ResponseCode.SUCCESS,
        "pull": (ResponseCode.SUCCESS, ["9"]),
    }
    assert files["rmqgate"] == files["java"], files
    assert files["java"]["filterDataByTopic"][TOPIC]["groupFilterData"][GROUP]["expression"] == "a > 5"
