"""Plain ACL (aclEnable=true, a plain_acl.yml) on rmqgate and the Java 4.9.8 broker with the same
accounts: stock 4.9.8 and 5.3.3 clients signing with AclClientRPCHook are let through or refused
alike, each refusal with the same response code and remark."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqgate.compat_tests import java
from rmqgate.compat_tests.conftest import _STARTED, Cluster, start_java_cluster
from rmqgate.compat_tests.java import CLIENT_VERSIONS, SERIALIZATIONS
from rmqgate.compat_tests.servers import BROKER_CONF, ServerProcess, discover_broker

pytestmark = [pytest.mark.slow, pytest.mark.java]

GROUP = "AclGroup"
#: one topic per client x headers run (the brokers live for the module)
TOPICS = {(v, s): f"AclTopic_{v}_{s}" for v in CLIENT_VERSIONS for s in SERIALIZATIONS}
KEYS = {
    "adminAk": "aclAdmin01", "adminSk": "adminSecret01",
    "userAk": "aclUser001", "userSk": "userSecret01",
    "subOnlyAk": "aclSubOnly1", "subOnlySk": "subOnlySecret1",
    "farAk": "aclFar0001", "farSk": "farSecret001",
    "nearAk": "aclNear001", "nearSk": "nearSecret01",
}  # fmt: skip


def _perms(perm: str) -> str:
    return "\n".join(f"      - {t}={perm}" for t in TOPICS.values())


PLAIN_ACL = f"""\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: {KEYS["adminAk"]}
    secretKey: {KEYS["adminSk"]}
    whiteRemoteAddress:
    admin: true
  - accessKey: {KEYS["userAk"]}
    secretKey: {KEYS["userSk"]}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
{_perms("PUB|SUB")}
    groupPerms:
      - {GROUP}=SUB
  - accessKey: {KEYS["subOnlyAk"]}
    secretKey: {KEYS["subOnlySk"]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
{_perms("SUB")}
  - accessKey: {KEYS["farAk"]}
    secretKey: {KEYS["farSk"]}
    whiteRemoteAddress: 10.0.0.*
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
  - accessKey: {KEYS["nearAk"]}
    secretKey: {KEYS["nearSk"]}
    whiteRemoteAddress: 127.0.0.1
    defaultTopicPerm: DENY
"""


@pytest.fixture(scope="module")
def acl_pair(
    java_classes: dict[int, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[java.BrokerPair]:
    """A fresh `rmqgate serve --acl` and a fresh Java pair, both with aclEnable=true and PLAIN_ACL."""
    workdir = tmp_path_factory.mktemp("acl-pair")
    gate_dir = workdir / "rmqgate"
    gate_dir.mkdir()
    (gate_dir / "plain_acl.yml").write_text(PLAIN_ACL)
    home = workdir / "java-home"  # the Java broker reads ROCKETMQ_HOME/conf/plain_acl.yml
    shutil.copytree(java.rocketmq_home() / "conf", home / "conf")
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    server = ServerProcess(
        gate_dir,
        conf=BROKER_CONF + "aclEnable = true\n",
        extra_args=("--acl", str(gate_dir / "plain_acl.yml")),
    )
    _STARTED.append(server)
    try:
        server.wait_ready()
        addr, name, cluster_name = discover_broker(server.namesrv)
        gate = Cluster(server.namesrv, addr, name, cluster_name, True, server.log_path, server.store)
        java_cluster, java_servers = start_java_cluster(
            workdir / "java", extra_conf=java.JAVA_BROKER_CONF + "aclEnable=true\n", home=home
        )
        try:
            yield java.BrokerPair(
                {"rmqgate": gate, "java": java_cluster}, java_classes, workdir / "client-logs"
            )
        finally:
            for jserver in reversed(java_servers):
                jserver.stop()
    finally:
        server.stop()


@pytest.mark.parametrize("version", CLIENT_VERSIONS, ids=lambda v: f"client{v}")
@pytest.mark.parametrize("serialization", SERIALIZATIONS)
def test_signed_clients_let_through_or_refused_as_java(acl_pair, version, serialization):
    results = acl_pair.run(
        "Acl", version, serialization, {"topic": TOPICS[version, serialization], "group": GROUP, **KEYS}
    )
    acl_pair.assert_same(results)
    gate, java_side = results["rmqgate"], results["java"]
    assert isinstance(gate, dict) and isinstance(java_side, dict)
    # every refusal with Java's code and remark (the remark names the AclException and where it is thrown)
    assert gate["data"] == java_side["data"], java.detail(results)
