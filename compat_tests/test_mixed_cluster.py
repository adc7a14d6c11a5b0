"""Split roles: `rmqgate serve --role namesrv` and a separate `--role broker` registering with it.

With --namesrv the broker process registers with that (possibly Java) name server instead.
"""

from __future__ import annotations

import pytest

from rmqgate.compat_tests.servers import BROKER_CONF, ServerProcess
from rmqgate.compat_tests.wire_client import (
    PULL_SUBSCRIPTION,
    WireClient,
    decode_messages,
    loads,
    wait_until,
)
from rmqgate.wire.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.slow


def broker_names(namesrv: str) -> dict[str, str]:
    with WireClient(namesrv) as ns:
        info = ns.cluster_info()
    return {name: bd["brokerAddrs"].get("0") for name, bd in (info.get("brokerAddrTable") or {}).items()}


@pytest.fixture
def namesrv_only(request, tmp_path_factory, cluster):
    """A name server of its own: the cluster's when the suite did not start rmqgate itself (an
    external cluster, or the stock Java name server with --target java), else `--role namesrv`."""
    if not cluster.started_here or request.config.getoption("--target") == "java":
        yield cluster.namesrv
        return
    server = ServerProcess(tmp_path_factory.mktemp("namesrv"), role="namesrv")
    try:
        server.wait_ready()
        yield server.namesrv
    finally:
        server.stop()


def test_broker_process_registers_with_separate_namesrv(namesrv_only, tmp_path, uniq):
    name = uniq("mixed-broker").replace("_", "-")
    conf = BROKER_CONF.replace("brokerName = compat-broker-a", f"brokerName = {name}").replace(
        "brokerClusterName = CompatCluster", "brokerClusterName = MixedCluster"
    )
    broker = ServerProcess(tmp_path, role="broker", namesrv_addr=namesrv_only, conf=conf)
    try:
        broker.wait_ready()
        assert wait_until(lambda: broker_names(namesrv_only).get(name) == broker.broker, timeout=30), (
            f"broker {name} at {broker.broker} never registered: {broker_names(namesrv_only)}"
        )
        topic = uniq()
        with WireClient(broker.broker) as b, WireClient(namesrv_only) as ns:
            assert b.create_topic(topic, 2).code == ResponseCode.SUCCESS
            assert wait_until(lambda: ns.route(topic).code == ResponseCode.SUCCESS, timeout=30)
            route = loads(ns.route(topic).body)
            assert [bd["brokerAddrs"]["0"] for bd in route["brokerDatas"]] == [broker.broker]
            assert b.send_message(topic, b"mixed", queue_id=1).code == ResponseCode.SUCCESS
            resp = b.pull("g", topic, 1, 0, sys_flag=PULL_SUBSCRIPTION, subscription="*")
            assert resp.code == ResponseCode.SUCCESS
            assert [bytes(m.body) for m in decode_messages(resp.body)] == [b"mixed"]
            info = ns.cluster_info()
            assert name in info["clusterAddrTable"]["MixedCluster"]
    finally:
        code = broker.stop()
    assert code == 0, f"broker exited with {code} on SIGTERM"
    # clean shutdown unregisters from the name server (no 120 s expiry wait)
    assert wait_until(lambda: name not in broker_names(namesrv_only), timeout=10), broker_names(namesrv_only)
    with WireClient(namesrv_only) as ns:
        assert (
            ns.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code
            == ResponseCode.TOPIC_NOT_EXIST
        )


@pytest.mark.rmqgate_only
def test_namesrv_only_process_serves_no_broker_codes(namesrv_only):
    """rmqgate answers 3 for codes its role does not serve (a Java name server stays silent)."""
    with WireClient(namesrv_only) as ns:
        resp = ns.invoke(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "t"}, b"x")
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def test_clean_restart_keeps_topics_messages_and_offsets(tmp_path, uniq):
    """SIGTERM, then `rmqgate serve` again on the same store and ports: nothing a client saw is lost."""
    topic, group = uniq(), uniq("cg")
    first = ServerProcess(tmp_path, role="all")
    ports = {"namesrv_port": first.namesrv_port, "broker_port": first.broker_port}
    try:
        first.wait_ready()
        assert wait_until(
            lambda: broker_names(first.namesrv).get("compat-broker-a") == first.broker, timeout=30
        )
        with WireClient(first.broker) as b:
            assert b.create_topic(topic, 2).code == ResponseCode.SUCCESS
            ids = [
                b.send_message(topic, f"m{i}".encode(), queue_id=i % 2).ext_fields["msgId"] for i in range(6)
            ]
            resp = b.invoke(RequestCode.UPDATE_CONSUMER_OFFSET,
                            {"consumerGroup": group, "topic": topic, "queueId": 1, "commitOffset": 2})  # fmt: skip
            assert resp.code == ResponseCode.SUCCESS
    finally:
        assert first.stop() == 0
    second = ServerProcess(tmp_path, role="all", **ports)
    try:
        second.wait_ready()
        with WireClient(second.namesrv) as ns:
            assert wait_until(lambda: ns.route(topic).code == ResponseCode.SUCCESS, timeout=30)
        with WireClient(second.broker) as b:
            bodies = []
            for q in (0, 1):
                resp = b.pull("reader", topic, q, 0, sys_flag=PULL_SUBSCRIPTION, subscription="*")
                assert resp.code == ResponseCode.SUCCESS
                bodies += [bytes(m.body).decode() for m in decode_messages(resp.body)]
            assert sorted(bodies) == [f"m{i}" for i in range(6)]
            q = b.invoke(
                RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": 1}
            )
            assert (q.code, q.ext_fields["offset"]) == (ResponseCode.SUCCESS, "2")
            # message ids (CommitLog offsets) stay valid
            view = b.invoke(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": int(ids[3][16:], 16)})
            assert view.code == ResponseCode.SUCCESS
            assert [bytes(m.body) for m in decode_messages(view.body)] == [b"m3"]
            # and the queues continue where they were
            resp = b.send_message(topic, b"after", queue_id=0)
            assert resp.ext_fields["queueOffset"] == "3"
    finally:
        assert second.stop() == 0
