"""Plain ACL: white-address strategies, the signature, the validator's order of checks, the file
reload, and a real broker (127.0.0.1, real store) with aclEnable=true taking signed requests: the
right key through, refusals with Java's code and remark, and fuzzed signed requests (hypothesis)
never crashing it nor getting through."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqgate.server import acl
from rmqgate.server.broker import BrokerController
from rmqgate.server.client import RemotingClient
from rmqgate.server.config import BrokerConfig
from rmqgate.wire import RemotingCommand
from rmqgate.wire.codes import RequestCode as R
from rmqgate.wire.codes import ResponseCode
from rmqgate.wire.message import format_properties

YML = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: adminKey01
    secretKey: adminSecret1
    admin: true
  - accessKey: userKey001
    secretKey: userSecret01
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - TopicA=PUB
      - TopicB=SUB
    groupPerms:
      - GroupD=DENY
"""
EXC = "org.apache.rocketmq.acl.common.AclException: "


# --- white addresses ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "yes", "no"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("", [], ["127.0.0.1"]),
        ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
        ("10.0.0.*", ["10.0.0.1", "10.0.0.255"], ["10.0.1.1", "127.0.0.1"]),
        ("10.0.*.*", ["10.0.7.1"], ["10.1.0.1"]),
        ("192.168.1.1-5", ["192.168.1.1", "192.168.1.5"], ["192.168.1.6", "192.168.2.3"]),
        ("1.1.1.1,2.2.2.2", ["1.1.1.1", "2.2.2.2"], ["3.3.3.3"]),
        ("192.168.1.{1,2}", ["192.168.1.2"], ["192.168.1.3"]),
        ("::1", ["0:0:0:0:0:0:0:1"], ["::2"]),
        ("1050:0:0:0:5:600:300c:*", ["1050::5:600:300c:326b"], ["1050::5:600:300d:1"]),
        ("1050::5:600:300c:1-f", ["1050::5:600:300c:a"], ["1050::5:600:300c:10"]),
    ],
)
def test_white_address_strategies(spec, yes, no):
    match = acl.address_strategy(spec)
    assert all(match(a) for a in yes)
    assert not any(match(a) for a in no)


@pytest.mark.parametrize("spec", ["10.0.0", "256.1.1.1", "10.0.0.-5", "10.0.0.9-2", "hello"])
def test_malformed_white_address_refused(spec):
    with pytest.raises(acl.AclError):
        acl.address_strategy(spec)


# --- signature --------------------------------------------------------------------------------
def test_signature_is_hmac_sha1_over_sorted_values_and_body():
    ext = {"b": "2", "a": "1", "c": "3"}
    acl.sign_request(ext, b"body", "userKey001", "userSecret01")
    # the signed content: values sorted by key (AccessKey < a < b < c), then the body
    assert ext["Signature"] == acl.sign(b"userKey001123body", "userSecret01")
    # the server leaves the unique-key query flag out of what it checks, as 4.9.8's validator does
    assert acl.request_content({**ext, "_UNIQUE_KEY_QUERY": "true"}, b"body") == b"userKey001123body"


def _validator(tmp_path: Path, text: str = YML) -> acl.PlainAccessValidator:
    path = tmp_path / "plain_acl.yml"
    path.write_text(text)
    return acl.PlainAccessValidator(str(path))


def _signed(code: int, ext: dict[str, str], ak: str, sk: str, body: bytes | None = None) -> RemotingCommand:
    ext = dict(ext)
    acl.sign_request(ext, body, ak, sk)
    return RemotingCommand.request(code, ext, body)


def _refusal(v: acl.PlainAccessValidator, cmd: RemotingCommand, ip: str = "127.0.0.1") -> str | None:
    try:
        v.validate(cmd, ip)
    except acl.AclError as exc:
        return exc.remark
    return None


def test_validator_checks_in_java_order(tmp_path):
    v = _validator(tmp_path)
    send = {"a": "PG", "b": "TopicA"}
    assert _refusal(v, _signed(R.SEND_MESSAGE_V2, send, "userKey001", "userSecret01")) is None
    assert _refusal(v, RemotingCommand.request(R.SEND_MESSAGE_V2, send)).startswith(
        EXC + "No accessKey is configured, "
    )
    assert "No acl config for nobody0001" in _refusal(
        v, _signed(R.SEND_MESSAGE_V2, send, "nobody0001", "x" * 8)
    )
    assert "Check signature failed for accessKey=userKey001" in _refusal(
        v, _signed(R.SEND_MESSAGE_V2, send, "userKey001", "wrongSecret")
    )
    # the global white list lets even an unsigned request through
    assert _refusal(v, RemotingCommand.request(R.SEND_MESSAGE_V2, send), "10.10.103.7") is None
    topic_b = _signed(R.SEND_MESSAGE_V2, {"a": "PG", "b": "TopicB"}, "userKey001", "userSecret01")
    assert _refusal(v, topic_b).endswith(
        "No default permission for topic:TopicB, "
        "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:611)"
    )
    other = _signed(R.SEND_MESSAGE_V2, {"a": "PG", "b": "Other"}, "userKey001", "userSecret01")
    assert "No default permission for topic:Other, " in _refusal(v, other)
    # a send to a retry topic needs SUB on the group
    retry = _signed(R.SEND_MESSAGE_V2, {"a": "GroupD", "b": "%RETRY%GroupD"}, "userKey001", "userSecret01")
    assert "No default permission for group:GroupD" in _refusal(v, retry)
    create = _signed(R.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}, "userKey001", "userSecret01")
    assert "Need admin permission for request code=17, but accessKey=userKey001 is not" in _refusal(v, create)
    assert (
        _refusal(v, _signed(R.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}, "adminKey01", "adminSecret1")) is None
    )


def test_end_transaction_needs_a_signature_but_no_permission(tmp_path):
    """4.9.8's validator parses no resource for END_TRANSACTION: a signed commit or rollback goes
    through whatever the account may do with the topic; unsigned or wrongly signed it is refused."""
    v = _validator(tmp_path)
    end = {"producerGroup": "PG", "tranStateTableOffset": "3", "commitLogOffset": "1024",
           "commitOrRollback": "8", "fromTransactionCheck": "true", "msgId": "AC1", "transactionId": "AC1"}  # fmt: skip
    assert v.needed(RemotingCommand.request(R.END_TRANSACTION, end), end) is None
    assert _refusal(v, _signed(R.END_TRANSACTION, end, "userKey001", "userSecret01")) is None
    assert "Check signature failed for accessKey=userKey001" in _refusal(
        v, _signed(R.END_TRANSACTION, end, "userKey001", "wrongSecret")
    )
    assert "No accessKey is configured" in _refusal(v, RemotingCommand.request(R.END_TRANSACTION, end))


def test_file_reload(tmp_path):
    v = _validator(tmp_path)
    cmd = _signed(R.GET_BROKER_CONFIG, {}, "newKey0001", "newSecret01")
    assert "No acl config for newKey0001" in _refusal(v, cmd)
    assert not v.reload_if_changed()
    path = tmp_path / "plain_acl.yml"
    path.write_text(YML + "  - accessKey: newKey0001\n    secretKey: newSecret01\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert v.reload_if_changed()
    assert _refusal(v, cmd) is None
    path.write_text("accounts: [unclosed")  # a broken file keeps the accounts read before
    assert v.reload_if_changed()
    assert _refusal(v, cmd) is None


# --- a real broker --------------------------------------------------------------------------------
class AclBroker:
    """A broker with aclEnable=true on 127.0.0.1 in a thread of its own (hypothesis drives it)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "plain_acl.yml").write_text(YML)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.broker = self.call(self._start())
        self.client: RemotingClient = self.call(RemotingClient.connect("127.0.0.1", self.broker.port))

    async def _start(self) -> BrokerController:
        config = BrokerConfig(
            brokerName="acl", listenPort=0, storePathRootDir=str(self.root / "store"), aclEnable=True,
            mappedFileSizeCommitLog=1 << 22, mappedFileSizeConsumeQueue=6000, maxHashSlotNum=5000, maxIndexNum=20000,
        )  # fmt: skip
        broker = BrokerController(config, listen_host="127.0.0.1", acl_file=str(self.root / "plain_acl.yml"))
        await broker.start()
        return broker

    def call(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def invoke(self, cmd: RemotingCommand) -> RemotingCommand:
        return self.call(self.client.invoke(cmd, 10))

    def stop(self) -> None:
        self.call(self.client.aclose())
        self.call(self.broker.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(20)


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclBroker]:
    broker = AclBroker(tmp_path_factory.mktemp("acl-broker"))
    yield broker
    broker.stop()


def _send_ext(topic: str) -> dict[str, str]:
    return {
        "a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
        "g": str(int(time.time() * 1000)), "h": "0", "i": format_properties({"TAGS": "T1", "WAIT": "true"}),
    }  # fmt: skip


def test_broker_lets_the_right_key_through_and_refuses_as_java(acl_broker):
    admin = _signed(R.UPDATE_AND_CREATE_TOPIC, {
        "topic": "TopicA", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false",
    }, "adminKey01", "adminSecret1")  # fmt: skip
    assert acl_broker.invoke(admin).code == ResponseCode.SUCCESS
    ok = acl_broker.invoke(
        _signed(R.SEND_MESSAGE_V2, _send_ext("TopicA"), "userKey001", "userSecret01", b"x")
    )
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    bad = acl_broker.invoke(
        _signed(R.SEND_MESSAGE_V2, _send_ext("TopicA"), "userKey001", "userSecret0x", b"x")
    )
    assert bad.code == ResponseCode.SYSTEM_ERROR
    assert bad.remark == (
        EXC + "Check signature failed for accessKey=userKey001, "
        "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:684)"
    )
    assert "userSecret01" not in (bad.remark or "")
    unsigned = acl_broker.invoke(RemotingCommand.request(R.GET_BROKER_CONFIG))
    assert unsigned.code == ResponseCode.SYSTEM_ERROR and "No accessKey is configured" in (
        unsigned.remark or ""
    )


def test_broker_config_reports_acl_enable(acl_broker):
    got = acl_broker.invoke(_signed(R.GET_BROKER_CONFIG, {}, "userKey001", "userSecret01"))
    assert got.code == ResponseCode.SUCCESS
    assert "aclEnable=true\n" in bytes(got.body or b"").decode()


def test_unknown_code_checked_before_request_code_not_supported(acl_broker):
    """4.9.8 runs the ACL hook before any processor, the default one included: an unknown code with
    no key or a bad signature is refused like any request, signed right it is not supported."""
    unsigned = RemotingCommand.request(9999, {"x": "y"}, b"body")
    no_ext = RemotingCommand.request(9999)
    bad = _signed(9999, {"x": "y"}, "userKey001", "userSecret0x", b"body")
    good = _signed(9999, {"x": "y"}, "userKey001", "userSecret01", b"body")
    no_key = EXC + "No accessKey is configured, " + acl._AT_VALIDATE_NO_KEY
    for cmd in (unsigned, no_ext):
        got = acl_broker.invoke(cmd)
        assert (got.code, got.remark) == (ResponseCode.SYSTEM_ERROR, no_key)
    got = acl_broker.invoke(bad)
    assert got.code == ResponseCode.SYSTEM_ERROR
    assert (
        got.remark == EXC + "Check signature failed for accessKey=userKey001, " + acl._AT_VALIDATE_SIGNATURE
    )
    got = acl_broker.invoke(good)
    assert (got.code, got.remark) == (
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        " request type 9999 not supported",
    )


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    code=st.sampled_from([R.SEND_MESSAGE_V2, R.PULL_MESSAGE, R.HEART_BEAT, R.UPDATE_AND_CREATE_TOPIC,
                          R.UPDATE_CONSUMER_OFFSET, R.GET_BROKER_CONFIG, R.UNREGISTER_CLIENT]),
    mangle=st.sampled_from(["signature", "no-key", "no-signature", "huge", "key"]),
    extra=st.dictionaries(_text, _text, max_size=5),
    body=st.one_of(st.none(), st.binary(max_size=200)),
    flip=st.integers(0, 27),
)  # fmt: skip
def test_fuzzed_signed_requests_never_get_through(acl_broker, code, mangle, extra, body, flip):
    ext = {**extra, "topic": "TopicA", "b": "TopicA", "consumerGroup": "G"}
    ext.pop("Signature", None)
    ext.pop("AccessKey", None)
    if mangle == "huge":
        ext.update({f"k{i}": "v" * 1000 for i in range(200)})
    acl.sign_request(ext, body, "adminKey01", "adminSecret1")
    if mangle in ("signature", "huge"):
        sig = bytearray(ext["Signature"].encode())
        sig[flip] = ord("A") if sig[flip] != ord("A") else ord("B")
        ext["Signature"] = sig.decode()
    elif mangle == "no-key":
        del ext["AccessKey"]
    elif mangle == "no-signature":
        del ext["Signature"]
    else:
        ext["AccessKey"] = "adminKey02"
    got = acl_broker.invoke(RemotingCommand.request(code, ext, body))
    assert got.code == ResponseCode.SYSTEM_ERROR
    assert (got.remark or "").startswith(EXC)
    assert "adminSecret1" not in (got.remark or "")


def test_acl_admin_codes_persist_to_the_file(acl_broker):
    path = acl_broker.root / "plain_acl.yml"

    def admin(code: int, ext: dict[str, str]) -> RemotingCommand:
        return acl_broker.invoke(_signed(code, ext, "adminKey01", "adminSecret1"))

    before = admin(R.GET_BROKER_CLUSTER_ACL_INFO, {})
    assert before.code == ResponseCode.SUCCESS
    counter = json.loads(before.ext_fields["version"])["counter"]
    new = {"accessKey": "newKey0001", "secretKey": "newSecret01", "admin": "false",
           "defaultTopicPerm": "PUB", "topicPerms": "TopicZ=DENY"}  # fmt: skip
    assert admin(R.UPDATE_AND_CREATE_ACL_CONFIG, new).code == ResponseCode.SUCCESS
    saved = yaml.safe_load(path.read_text())
    assert (
        saved["accounts"][-1]["accessKey"] == "newKey0001"
        and saved["dataVersion"][0]["counter"] == counter + 1
    )
    as_new = acl_broker.invoke(_signed(R.GET_BROKER_CONFIG, {}, "newKey0001", "newSecret01"))
    assert as_new.code == ResponseCode.SUCCESS
    after = admin(R.GET_BROKER_CLUSTER_ACL_INFO, {})
    assert json.loads(after.ext_fields["version"])["counter"] == counter + 1
    assert json.loads(after.ext_fields["allAclFileVersion"]) == {
        str(path): json.loads(after.ext_fields["version"])
    }
    short = admin(R.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "short", "secretKey": "x"})
    assert short.code == 209 and "length should longer than 6" in (short.remark or "")
    white = admin(
        R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "10.10.104.*", "aclFileFullPath": ""}
    )
    assert white.code == ResponseCode.SUCCESS
    assert yaml.safe_load(path.read_text())["globalWhiteRemoteAddresses"] == ["10.10.104.*"]
    assert admin(R.DELETE_ACL_CONFIG, {"accessKey": "newKey0001"}).code == ResponseCode.SUCCESS
    gone = acl_broker.invoke(_signed(R.GET_BROKER_CONFIG, {}, "newKey0001", "newSecret01"))
    assert "No acl config for newKey0001" in (gone.remark or "")
    again = admin(R.DELETE_ACL_CONFIG, {"accessKey": "newKey0001"})
    assert again.code == 210
    assert again.remark == "The accesskey[newKey0001] corresponding to accessConfig has been deleted failed."
    assert admin(54, {}).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    # the admin codes sit behind the ACL check like every other
    assert acl_broker.invoke(RemotingCommand.request(54)).code == ResponseCode.SYSTEM_ERROR


def test_running_broker_rereads_the_file_when_it_changes(acl_broker):
    path = acl_broker.root / "plain_acl.yml"
    cmd = _signed(R.GET_BROKER_CONFIG, {}, "fileKey001", "fileSecret01")
    assert "No acl config for fileKey001" in (acl_broker.invoke(cmd).remark or "")
    data = yaml.safe_load(path.read_text())
    data["accounts"].append({"accessKey": "fileKey001", "secretKey": "fileSecret01"})
    path.write_text(yaml.safe_dump(data))
    deadline = time.monotonic() + 30  # the watcher looks every 5 s, as 4.9.8's
    while acl_broker.invoke(cmd).code != ResponseCode.SUCCESS:
        assert time.monotonic() < deadline, "the changed plain_acl.yml was not read again"
        time.sleep(0.2)


def test_refused_resource_named_in_java_hashmap_order():
    assert acl._string_hash("hello") == 99162322  # "hello".hashCode()
    assert acl._string_hash("polygenelubricants") == (-2147483648) & 0xFFFFFFFF
    owned = acl.build_account({"accessKey": "someKey01", "secretKey": "someSecret1"})  # DENY by default
    keys = ["TopicQ", "%RETRY%GroupQ"]
    first = acl._hashmap_order(keys)[0]
    with pytest.raises(acl.AclError) as refused:
        acl.PlainAccessValidator.check_perm(R.PULL_MESSAGE, dict.fromkeys(keys, acl.SUB), owned)
    named = f"group:{first[7:]}" if first.startswith("%RETRY%") else f"topic:{first}"
    assert f"No default permission for {named}," in refused.value.remark
