"""Plain ACL (aclEnable=true, a plain_acl.yml) on rmqgate and the Java 4.9.8 broker with the same
accounts: stock 4.9.8 and 5.3.3 clients signing with AclClientRPCHook are let through or refused
alike, each refusal with the same response code and remark."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqgate.compat_tests import java
from rmqgate.compat_tests.conftest import Cluster, started_pair
from rmqgate.compat_tests.java import CLIENT_VERSIONS, SERIALIZATIONS
from rmqgate.compat_tests.servers import BROKER_CONF
from rmqgate.compat_tests.wire_client import WireClient
from rmqgate.server.acl import sign_request
from rmqgate.wire.codes import RequestCode, SerializeType

pytestmark = [pytest.mark.slow, pytest.mark.java]

GROUP = "AclGroup"
#: one topic per client x headers run (the brokers live for the module)
TOPICS = {(v, s): f"AclTopic_{v}_{s}" for v in CLIENT_VERSIONS for s in SERIALIZATIONS}
CPP_TOPIC = "AclTopic_cpp"
TX_TOPICS = {(v, s): f"AclTxTopic_{v}_{s}" for v in CLIENT_VERSIONS for s in SERIALIZATIONS}
KEYS = {
    "adminAk": "aclAdmin01", "adminSk": "adminSecret01",
    "userAk": "aclUser001", "userSk": "userSecret01",
    "subOnlyAk": "aclSubOnly1", "subOnlySk": "subOnlySecret1",
    "farAk": "aclFar0001", "farSk": "farSecret001",
    "nearAk": "aclNear001", "nearSk": "nearSecret01",
}  # fmt: skip


def _perms(perm: str) -> str:
    return "\n".join(f"      - {t}={perm}" for t in (*TOPICS.values(), *TX_TOPICS.values(), CPP_TOPIC))


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
    with started_pair(
        workdir,
        java_classes,
        gate_conf=BROKER_CONF + "aclEnable = true\n",
        gate_args=("--acl", str(gate_dir / "plain_acl.yml")),
        java_conf=java.JAVA_BROKER_CONF + "aclEnable=true\n",
        java_home=home,
    ) as pair:
        yield pair


@java.BY_CLIENT
@java.BY_HEADERS
def test_signed_clients_let_through_or_refused_as_java(acl_pair, version, serialization):
    results = acl_pair.run(
        "Acl", version, serialization, {"topic": TOPICS[version, serialization], "group": GROUP, **KEYS}
    )
    acl_pair.assert_same(results)
    gate, java_side = results["rmqgate"], results["java"]
    assert isinstance(gate, dict) and isinstance(java_side, dict)
    # every refusal with Java's code and remark (the remark names the AclException and where it is thrown)
    assert gate["data"] == java_side["data"], java.detail(results)


@java.BY_CLIENT
@java.BY_HEADERS
def test_transactions_and_check_back_with_acl_as_java(acl_pair, version, serialization):
    """A signed TransactionMQProducer: commit delivers, rollback does not, UNKNOW is settled by the
    broker's check-back and the producer's signed END_TRANSACTION (which needs a valid signature and
    no permission, as 4.9.8's validator parses it); a key without PUB is refused the half message."""
    topic = TX_TOPICS[version, serialization]
    results = acl_pair.run("AclTransaction", version, serialization, {"topic": topic, "group": GROUP, **KEYS})
    acl_pair.assert_same(results)
    gate, java_side = results["rmqgate"], results["java"]
    assert isinstance(gate, dict) and isinstance(java_side, dict)
    assert gate["data"] == java_side["data"], java.detail(results)
    refused = gate["data"]["half message without PUB on the topic"]
    assert refused["code"] == 1 and f"No default permission for topic:{topic}, " in refused["remark"]


def _normalized(text: str, cluster: Cluster) -> str:
    """mqadmin's output without what differs by name: addresses, names, the ACL file's path, times,
    column padding."""
    out = text.replace(cluster.broker, "BROKER").replace(cluster.broker_name, "NAME")
    out = out.replace(cluster.cluster_name, "CLUSTER")
    out = re.sub(r"\S*plain_acl\.yml", "ACLFILE", out)
    out = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "TIME", out)
    out = re.sub(r"@[0-9a-f]+\b", "@HASH", out)  # an object's identity hash, as mqadmin prints it
    return re.sub(r"\d{13}", "TIMESTAMP", re.sub(r"[ \t]+", " ", out))


def test_mqadmin_acl_commands_as_java(acl_pair, tmp_path):
    """updateAclConfig, clusterAclConfigVersion, updateGlobalWhiteAddr and deleteAccessConfig through
    the stock mqadmin, signing as the admin account (conf/tools.yml): same output on both brokers."""
    tools_home = tmp_path / "tools-home"  # mqadmin signs with rocketmq.home.dir/conf/tools.yml
    shutil.copytree(java.rocketmq_home() / "conf", tools_home / "conf")
    (tools_home / "conf" / "tools.yml").write_text(
        f"accessKey: {KEYS['adminAk']}\nsecretKey: {KEYS['adminSk']}\n"
    )
    opts = f"{java.QUICK_JVM} -Drocketmq.home.dir={tools_home}"
    seen: dict[str, list[str]] = {}
    for broker, cluster in acl_pair.clusters.items():
        out = []
        for args in (
            [
                "updateAclConfig",
                "-b",
                cluster.broker,
                "-a",
                "aclAdded01",
                "-s",
                "addedSecret1",
                "-t",
                "AclT=PUB",
            ],
            ["updateAclConfig", "-b", cluster.broker, "-a", "short", "-s", "x"],
            ["clusterAclConfigVersion", "-c", cluster.cluster_name, "-n", cluster.namesrv],
            ["updateGlobalWhiteAddr", "-b", cluster.broker, "-g", "10.10.104.*"],
            ["deleteAccessConfig", "-b", cluster.broker, "-a", "aclAdded01"],
            ["deleteAccessConfig", "-b", cluster.broker, "-a", "aclAdded01"],
        ):
            done = java.mqadmin(tmp_path / f"logs-{broker}", *args, java_opts=opts)
            out.append(f"$ {args[0]} rc={done.returncode}\n" + _normalized(done.stdout, cluster))
        seen[broker] = out
    for gate, java_out in zip(seen["rmqgate"], seen["java"], strict=True):
        assert gate == java_out, f"rmqgate:\n{gate}\njava:\n{java_out}"


@pytest.mark.parametrize("secret", ["right", "wrong"])
def test_cpp_client_signs_as_java_checks(acl_pair, tmp_path, secret):
    """The C++ client core (rocketmq-python-cvs) with session credentials: sends with the right
    secret, refused with a wrong one, on both brokers."""
    from rmqgate.compat_tests.drivers import run_cpp

    sk = KEYS["userSk"] if secret == "right" else "notTheSecret1"
    outcome = {}
    for broker, cluster in acl_pair.clusters.items():
        home = tmp_path / broker
        home.mkdir()
        args = {"scenario": "produce", "namesrv": cluster.namesrv, "topic": CPP_TOPIC, "group": "acl_cpp_pg",
                "count": 2, "access_key": KEYS["userAk"], "secret_key": sk}  # fmt: skip
        res = run_cpp(args, home)
        outcome[broker] = (len(res["results"]), len(res["errors"]), [r["status"] for r in res["results"]])
    expected = (2, 0, [0, 0]) if secret == "right" else (0, 2, [])
    assert outcome == {"rmqgate": expected, "java": expected}


def _answers_to_unknown_code(addr: str, ser: int) -> dict[str, tuple[int, str] | None]:
    """What ``addr`` answers to request code 9999: unsigned, signed with a wrong secret and with the
    right one (None: no answer within 3 s)."""
    out: dict[str, tuple[int, str] | None] = {}
    with WireClient(addr, serialize_type=ser) as c:
        for case, secret in (("no key", None), ("bad signature", "notTheSecret1"), ("valid", KEYS["userSk"])):
            ext = {"x": "y"}
            if secret is not None:
                sign_request(ext, b"body", KEYS["userAk"], secret)
            got = c.poll_response(c.send(9999, ext, b"body"), 3.0)
            out[case] = None if got is None else (got.code, got.remark or "")
    return out


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_unknown_code_checked_by_acl_first_as_java(acl_pair, ser):
    """The broker's ACL hook runs before its default processor: an unknown code unsigned or badly
    signed is refused as any request; validly signed it is REQUEST_CODE_NOT_SUPPORTED."""
    kind = SerializeType.JSON if ser == "JSON" else SerializeType.ROCKETMQ
    seen = {name: _answers_to_unknown_code(c.broker, kind) for name, c in acl_pair.clusters.items()}
    assert seen["rmqgate"] == seen["java"], seen
    assert seen["java"]["no key"] is not None and seen["java"]["no key"][0] == 1
    assert seen["java"]["valid"] is not None and seen["java"]["valid"][0] == 3


def test_name_server_checks_no_acl_as_java(acl_pair):
    """4.9.8's name server has no ACL: an unsigned GET_BROKER_CLUSTER_INFO is answered."""
    for cluster in acl_pair.clusters.values():
        with WireClient(cluster.namesrv) as c:
            assert c.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).code == 0
