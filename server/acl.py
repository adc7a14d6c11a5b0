"""Plain ACL (broker.conf ``aclEnable=true``): 4.9.8's PlainAccessValidator / PlainPermissionManager.

Accounts come from a plain_acl.yml (``rmqgate serve --acl FILE``, else ``$ROCKETMQ_HOME/conf/
plain_acl.yml``), re-read when the file changes. Every broker request is checked before its processor
runs (``guard`` wraps the processors only when ACL is on): the global white list lets anything
through, then the account (``AccessKey``), its own white address (lets it through), the HmacSHA1
``Signature`` over the sorted extFields and body (AclClientRPCHook's), then the permission the request
code needs on its topic / group (retry topic); a code nothing serves is checked too before it is
REQUEST_CODE_NOT_SUPPORTED (``guarded_unknown_codes``). A refusal is Java's: SYSTEM_ERROR with the
AclException's ``exceptionSimpleDesc`` as remark.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import hashlib
import hmac
import ipaddress
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from rmqgate.server.remoting import Channel, RequestProcessor, not_supported, server_serialized
from rmqgate.wire.bodies import HeartbeatData
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand

log = logging.getLogger("rmqgate.server.acl")

DENY, ANY, PUB, SUB = 1, 2, 4, 8
RETRY_PREFIX = "%RETRY%"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
ACCESS_KEY, SIGNATURE, SECURITY_TOKEN = "AccessKey", "Signature", "SecurityToken"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG: not signed by the server's content
KEY_MIN_LENGTH = 6  # AclConstants.ACCESS_KEY_MIN_LENGTH / SECRET_KEY_MIN_LENGTH: longer than this
WATCH_INTERVAL = 5.0  # AclFileWatchService.WATCH_INTERVAL

#: Permission.ADMIN_CODE
ADMIN_CODES = frozenset(
    (
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
    )
)

_EXC = "org.apache.rocketmq.acl.common.AclException"
_PPM = "org.apache.rocketmq.acl.plain.PlainPermissionManager"
# Where 4.9.8 throws each refusal: exceptionSimpleDesc names the first stack frame.
_AT_VALIDATE_NO_KEY = f"{_PPM}.validate(PlainPermissionManager.java:664)"
_AT_VALIDATE_UNKNOWN = f"{_PPM}.validate(PlainPermissionManager.java:668)"
_AT_VALIDATE_SIGNATURE = f"{_PPM}.validate(PlainPermissionManager.java:684)"
_AT_CHECK_ADMIN = f"{_PPM}.checkPerm(PlainPermissionManager.java:581)"
_AT_CHECK_DEFAULT = f"{_PPM}.checkPerm(PlainPermissionManager.java:606)"
_AT_CHECK_OWNED = f"{_PPM}.checkPerm(PlainPermissionManager.java:611)"
_AT_PARSE = "org.apache.rocketmq.acl.plain.PlainAccessValidator.parse(PlainAccessValidator.java:134)"


class AclError(Exception):
    """An AclException; ``where`` is the Java frame it is thrown from (for the remark)."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.where = where

    @property
    def remark(self) -> str:
        return f"{_EXC}: {self}, {self.where}" if self.where else f"{_EXC}: {self}"


# --- permissions ----------------------------------------------------------------------------------
def parse_perm(text: Any) -> int:
    """Permission.parsePermFromString: anything unknown is DENY."""
    if text is None:
        return DENY
    return {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}.get(str(text).strip(), DENY)


def check_permission(needed: int, owned: int) -> bool:
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def check_resource_perms(resources: Iterable[str] | None) -> None:
    """Permission.checkResourcePerms (what UPDATE_AND_CREATE_ACL_CONFIG accepts)."""
    for resource in resources or ():
        items = [s for s in resource.split("=") if s]
        if len(items) != 2:
            raise AclError(
                f"Parse Resource format error for {resource}.\n"
                "The expected resource format is 'Res=Perm'. For example: topicA=SUB"
            )
        if items[1].strip() != "DENY" and parse_perm(items[1]) == DENY:
            raise AclError(
                f"Parse resource permission error for {resource}.\n"
                "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'."
            )


# --- remote address strategies (RemoteAddressStrategyFactory) --------------------------------------
AddressMatch = Callable[[str], bool]


def _valid_v4(addr: str) -> bool:
    try:
        ipaddress.IPv4Address(addr)
    except ValueError:
        return False
    return True


def _valid_v6(addr: str) -> bool:
    try:
        ipaddress.IPv6Address(addr)
    except ValueError:
        return False
    return True


def _expand_v6(addr: str) -> str:
    return ipaddress.IPv6Address(addr).exploded.upper()


def _normal(addr: str) -> str:
    return _expand_v6(addr) if _valid_v6(addr) else addr


def address_strategy(spec: Any) -> AddressMatch:
    """The matcher for one whiteRemoteAddress / globalWhiteRemoteAddresses entry: blank matches
    nothing, ``*`` everything; ``a.b.c.{1,2}`` and ``a,b`` lists, ``a.b.*`` / ``a.b.c.1-5`` ranges
    (IPv6 too), one address. A malformed entry raises AclError as Java's factory does."""
    text = "" if spec is None else str(spec)
    if not text.strip():
        return lambda addr: False
    if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return lambda addr: True
    if text.endswith("}"):
        sep = ":" if ":" in text else "."
        last = [s for s in text.split(sep) if s][-1]
        if not last.startswith("{") or (sep == "." and len([s for s in text.split(".") if s]) < 4):
            raise AclError("MultipleRemoteAddressStrategy netaddress examine scope Exception netaddress")
        head = text[: text.index("{")]
        return _multiple([head + p for p in last[1:-1].split(",") if p])
    if "," in text:
        return _multiple([p for p in text.split(",") if p])
    if "*" in text or "-" in text:
        return _range(text)
    if not (_valid_v4(text) or _valid_v6(text)):
        raise AclError(f"Netaddress examine Exception netaddress is {text}")
    one = _normal(text)
    return lambda addr: _normal(addr) == one


def _multiple(addrs: list[str]) -> AddressMatch:
    allowed = set()
    for a in addrs:
        if _valid_v4(a):
            allowed.add(a)
        elif _valid_v6(a):
            allowed.add(_expand_v6(a))
        else:
            raise AclError(f"Netaddress examine Exception netaddress is {a}")
    return lambda addr: _normal(addr) in allowed


def _range(text: str) -> AddressMatch:
    """RangeRemoteAddressStrategy: the first ``*`` or ``x-y`` part ends the fixed head."""
    v6 = ":" in text
    sep, base, hi = (":", 16, 0xFFFF) if v6 else (".", 10, 255)
    parts = text.split(sep)
    for index in range(1, len(parts)):
        value = parts[index].strip()
        if value == "*":
            start, end = 0, hi
        elif "-" in value:
            if value.startswith("-"):
                raise AclError(
                    f"RangeRemoteAddressStrategy netaddress examine scope Exception value {value} "
                )
            lo_s, _, hi_s = value.partition("-")
            try:
                start, end = int(lo_s, base), int(hi_s, base)
            except ValueError:
                raise AclError(f"Netaddress examine scope Exception netaddress is {text}") from None
            if not (0 <= start <= end <= hi):
                raise AclError(
                    f"RangeRemoteAddressStrategy netaddress examine scope Exception start is {start} , end is {end}"
                )
        else:
            continue
        head_parts = parts[:index]
        if not v6:
            if len(parts) != 4 or not all(p.strip().isdigit() and 0 <= int(p) <= 255 for p in head_parts):
                raise AclError(f"Netaddress examine scope Exception netaddress is {text}")
            head = ".".join(p.strip() for p in head_parts)
            return _v4_range(head, index, start, end)
        # AclUtils.v6ipProcess: a head with "::" is padded to 7 groups (6 with both * and -)
        n = 6 if ("*" in text and "-" in text) else 7
        groups = _v6_groups(sep.join(head_parts), n if "::" in text else index)
        if groups is None:
            raise AclError(f"Netaddress examine scope Exception netaddress is {text}")
        return _v6_range(groups, start, end)
    raise AclError(f"Netaddress examine scope Exception netaddress is {text}")


def _v4_range(head: str, index: int, start: int, end: int) -> AddressMatch:
    def match(addr: str) -> bool:
        if not _valid_v4(addr):
            return False
        parts = addr.split(".")
        return ".".join(parts[:index]) == head and start <= int(parts[index]) <= end

    return match


def _v6_groups(head: str, n: int) -> list[str] | None:
    """``head`` as ``n`` upper-case 4-digit groups ("::" filled with zero groups)."""
    if "::" in head:
        left, _, right = head.partition("::")
        lg = [g for g in left.split(":") if g]
        rg = [g for g in right.split(":") if g]
        groups = lg + ["0"] * (n - len(lg) - len(rg)) + rg
    else:
        groups = head.split(":")
    if len(groups) != n:
        return None
    try:
        if not all(0 <= int(g, 16) <= 0xFFFF for g in groups):
            return None
    except ValueError:
        return None
    return [g.upper().rjust(4, "0") for g in groups]


def _v6_range(fixed: list[str], start: int, end: int) -> AddressMatch:
    n = len(fixed)

    def match(addr: str) -> bool:
        if not _valid_v6(addr):
            return False
        got = _expand_v6(addr).split(":")
        return got[:n] == fixed and start <= int(got[n], 16) <= end

    return match


# --- accounts ---------------------------------------------------------------------------------------
@dataclass(slots=True)
class PlainAccount:
    access_key: str
    secret_key: str
    white: AddressMatch
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    perms: dict[str, int] | None = None  # topic or %RETRY%group -> perm
    secret: bytes = b""  # secret_key, encoded once for the HMAC

    def __post_init__(self) -> None:
        self.secret = self.secret_key.encode("utf-8", "replace")


def build_account(conf: dict[str, Any]) -> PlainAccount:
    """PlainPermissionManager.buildPlainAccessResource."""
    ak, sk = conf.get("accessKey"), conf.get("secretKey")
    if ak is None or sk is None or len(str(ak)) <= KEY_MIN_LENGTH or len(str(sk)) <= KEY_MIN_LENGTH:
        raise AclError(
            f"The accessKey={_jstr(ak)} and secretKey={_jstr(sk)} cannot be null and length should longer than 6"
        )
    account = PlainAccount(
        str(ak),
        str(sk),
        address_strategy(conf.get("whiteRemoteAddress")),
        bool(conf.get("admin") or False),
        parse_perm(conf.get("defaultTopicPerm")),
        parse_perm(conf.get("defaultGroupPerm")),
    )
    for key, is_topic in (("groupPerms", False), ("topicPerms", True)):
        for resource in conf.get(key) or ():
            items = [s for s in str(resource).split("=") if s]
            if len(items) != 2:
                raise AclError(
                    f"Parse resource permission failed for {'topic' if is_topic else 'group'}:{resource}"
                )
            name = items[0].strip()
            if account.perms is None:
                account.perms = {}
            account.perms[name if is_topic else RETRY_PREFIX + name] = parse_perm(items[1])
    return account


def _jstr(value: Any) -> str:
    return "null" if value is None else str(value)


def sign(content: bytes, secret_key: str | bytes) -> str:
    """AclSigner.calSignature: base64(HmacSHA1(content, secretKey))."""
    key = secret_key.encode() if isinstance(secret_key, str) else secret_key
    return binascii.b2a_base64(hmac.digest(key, content, "sha1"), newline=False).decode()


def request_content(ext: dict[str, str], body: Any, *, server: bool = True) -> bytes:
    """AclUtils.combineRequestContent: the sorted extFields' values but Signature (and, as the
    validator reads them, the unique-key query flag), then the body."""
    if server:
        text = "".join([v for k, v in sorted(ext.items()) if k != SIGNATURE and k != UNIQUE_KEY_QUERY])
    else:
        text = "".join([v for k, v in sorted(ext.items()) if k != SIGNATURE])
    head = text.encode("utf-8", "replace")
    return head + body if body else head


def sign_request(ext: dict[str, str], body: Any, access_key: str, secret_key: str) -> None:
    """What AclClientRPCHook.doBeforeRequest adds to a request's extFields."""
    ext[ACCESS_KEY] = access_key
    ext[SIGNATURE] = sign(request_content(ext, body, server=False), secret_key)


# --- the plain_acl.yml --------------------------------------------------------------------------
@dataclass
class PlainAclConfig:
    global_white: list[AddressMatch] = field(default_factory=list)
    accounts: dict[str, PlainAccount] = field(default_factory=dict)
    data_version: dict[str, int] = field(
        default_factory=lambda: {"timestamp": int(time.time() * 1000), "counter": 0}
    )


def read_yaml(path: str) -> dict[str, Any] | None:
    """The file's mapping; None when it is missing or empty (AclUtils.getYamlDataObject)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        return None
    except (OSError, yaml.YAMLError) as exc:
        raise AclError(str(exc)) from None
    if data is None:
        return None
    if not isinstance(data, dict):
        raise AclError(f"{path}: not a YAML mapping")
    return data


def parse_config(data: dict[str, Any] | None) -> PlainAclConfig:
    config = PlainAclConfig()
    if not data:
        return config
    for spec in data.get("globalWhiteRemoteAddresses") or ():
        config.global_white.append(address_strategy(spec))
    for conf in data.get("accounts") or ():
        if not isinstance(conf, dict):
            raise AclError(f"account {conf!r} is not a mapping")
        account = build_account(conf)
        if account.access_key in config.accounts:
            log.warning("The accessKey %s is repeated in the ACL file", account.access_key)
            continue
        config.accounts[account.access_key] = account
    versions = data.get("dataVersion")
    if isinstance(versions, list) and versions and isinstance(versions[0], dict):
        with contextlib.suppress(TypeError, ValueError):
            config.data_version = {
                "timestamp": int(versions[0].get("timestamp", 0)),
                "counter": int(versions[0].get("counter", 0)),
            }
    return config


def default_acl_file() -> str | None:
    """Where 4.9.8 looks: rocketmq.home.dir (here ``$ROCKETMQ_HOME``) + /conf/plain_acl.yml."""
    home = os.environ.get("ROCKETMQ_HOME")
    return os.path.join(home, "conf", "plain_acl.yml") if home else None


# --- the validator ------------------------------------------------------------------------------
def _string_hash(s: str) -> int:
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h


def _hashmap_order(keys: list[str]) -> list[str]:
    """The order a small java.util.HashMap (16 buckets, < 12 keys) iterates ``keys`` inserted in
    order: by bucket, then insertion. checkPerm reports the first failing resource in that order."""

    def bucket(k: str) -> int:
        h = _string_hash(k)
        return (h ^ (h >> 16)) & 15

    return sorted(keys, key=bucket)  # stable: insertion order within a bucket


def _add(out: dict[str, int], resource: str | None, perm: int) -> None:
    if resource is not None:
        out[resource] = perm


def _retry(group: str | None) -> str | None:
    return None if group is None else RETRY_PREFIX + group


class PlainAccessValidator:
    """The validator and its file (re-read when it changes)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.config = PlainAclConfig()
        self._stamp: tuple[int, int, bytes] | None = None
        self._watch: asyncio.Task[None] | None = None
        self.load()

    # -- file --
    def _file_stamp(self) -> tuple[int, int, bytes] | None:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
            with open(self.path, "rb") as f:
                digest = hashlib.md5(f.read()).digest()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, digest)

    def load(self) -> None:
        """Read the file (missing: no accounts, every signed request refused). A file that does not
        parse keeps the accounts read before, as Java's watcher does when load throws."""
        stamp = self._file_stamp()
        if self.path is None:
            log.warning("ACL is on but no plain_acl.yml is named (--acl) and ROCKETMQ_HOME is unset")
        elif stamp is None:
            log.warning("ACL file %s does not exist: no accounts", self.path)
        try:
            self.config = parse_config(read_yaml(self.path) if self.path else None)
        except AclError as exc:
            log.error("ACL file %s not loaded: %s", self.path, exc)
            self._stamp = stamp
            return
        self._stamp = stamp
        log.info("ACL file %s loaded: %d accounts", self.path, len(self.config.accounts))

    def reload_if_changed(self) -> bool:
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return False
        if stamp is not None and self._stamp is not None and stamp[2] == self._stamp[2]:
            self._stamp = stamp  # touched, same content
            return False
        self.load()
        return True

    def start(self, interval: float = WATCH_INTERVAL) -> None:
        self._watch = asyncio.get_running_loop().create_task(self._watch_loop(interval))

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None

    async def _watch_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                self.reload_if_changed()
            except Exception:
                log.exception("ACL file watch failed")

    # -- check --
    def needed(self, request: RemotingCommand, ext: dict[str, str]) -> dict[str, int] | None:
        """PlainAccessValidator.parse: the resources the request code needs, with their perm."""
        code = request.code
        out: dict[str, int] = {}
        if code == RequestCode.SEND_MESSAGE_V2 or code == RequestCode.SEND_MESSAGE:
            v2 = code == RequestCode.SEND_MESSAGE_V2
            topic = ext.get("b" if v2 else "topic")
            if topic is not None and topic.startswith(RETRY_PREFIX):
                _add(out, _retry(ext.get("a" if v2 else "group")), SUB)
            else:
                _add(out, topic, PUB)
        elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
            _add(out, _retry(ext.get("group")), SUB)
        elif code == RequestCode.PULL_MESSAGE:
            _add(out, ext.get("topic"), SUB)
            _add(out, _retry(ext.get("consumerGroup")), SUB)
        elif code == RequestCode.QUERY_MESSAGE:
            _add(out, ext.get("topic"), SUB)
        elif code == RequestCode.HEART_BEAT:
            try:
                data = HeartbeatData.from_json(request.body)
            except Exception as exc:
                raise AclError(str(exc), _AT_PARSE) from None
            for consumer in data.consumer_data_set:
                _add(out, _retry(consumer.group_name), SUB)
                for sub in consumer.subscription_data_set:
                    _add(out, sub.topic, SUB)
        elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
            required = "clientID" if code == RequestCode.UNREGISTER_CLIENT else "consumerGroup"
            if required not in ext:  # decodeCommandCustomHeader's @CFNotNull
                raise AclError(f"the custom field <{required}> is null", _AT_PARSE)
            _add(out, _retry(ext.get("consumerGroup")), SUB)
        elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
            for name in ("consumerGroup", "topic", "queueId", "commitOffset"):
                if name not in ext:
                    raise AclError(f"the custom field <{name}> is null", _AT_PARSE)
            _add(out, _retry(ext.get("consumerGroup")), SUB)
            _add(out, ext.get("topic"), SUB)
        return out or None

    def validate(self, request: RemotingCommand, remote_ip: str) -> str | None:
        """None when the request may go on, else the access key it was refused for (raises AclError)."""
        config = self.config
        ext = request.ext_fields
        # parse first (a header it cannot read is refused even from a white address), as Java
        needed = None if ext is None else self.needed(request, ext)
        for match in config.global_white:
            if match(remote_ip):
                return None
        access_key = None if ext is None else ext.get(ACCESS_KEY)
        if ext is None or access_key is None:
            raise AclError("No accessKey is configured", _AT_VALIDATE_NO_KEY)
        owned = config.accounts.get(access_key)
        if owned is None:
            raise AclError(f"No acl config for {access_key}", _AT_VALIDATE_UNKNOWN)
        if owned.white(remote_ip):
            return None
        expected = sign(request_content(ext, request.body), owned.secret)
        given = ext.get(SIGNATURE)
        if given is None or not hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace")):
            raise AclError(f"Check signature failed for accessKey={access_key}", _AT_VALIDATE_SIGNATURE)
        if needed is not None and needed.get(TRACE_TOPIC) == PUB:
            return None
        self.check_perm(request.code, needed, owned)
        return None

    @staticmethod
    def check_perm(code: int, needed: dict[str, int] | None, owned: PlainAccount) -> None:
        if code in ADMIN_CODES and not owned.admin:
            raise AclError(
                f"Need admin permission for request code={code}, but accessKey={owned.access_key} is not",
                _AT_CHECK_ADMIN,
            )
        if needed is None:
            return
        perms = owned.perms
        if perms is None and owned.admin:
            return
        failed: list[tuple[str, str]] = []
        for resource, perm in needed.items():
            is_group = resource.startswith(RETRY_PREFIX)
            if perms is None or resource not in perms:
                ok = check_permission(
                    perm, owned.default_group_perm if is_group else owned.default_topic_perm
                )
                where = _AT_CHECK_DEFAULT
            else:
                ok = check_permission(perm, perms[resource])
                where = _AT_CHECK_OWNED
            if not ok:
                failed.append((resource, where))
        if failed:
            first = _hashmap_order([r for r, _ in failed])[0] if len(failed) > 1 else failed[0][0]
            where = dict(failed)[first]
            is_group = first.startswith(RETRY_PREFIX)
            printed = f"group:{first[len(RETRY_PREFIX) :]}" if is_group else f"topic:{first}"
            raise AclError(f"No default permission for {printed}", where)

    def check(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        """The refusal for ``request`` (logged), or None to let it through."""
        addr = channel.remote_addr
        ip = channel.attrs.get("acl_ip")
        if ip is None:  # the peer's address, taken once a connection
            ip = addr[: addr.rfind(":")] if ":" in addr else addr
            if ip.startswith("[") and ip.endswith("]"):
                ip = ip[1:-1]
            channel.attrs["acl_ip"] = ip
        try:
            self.validate(request, ip)
        except AclError as exc:
            ext = request.ext_fields or {}
            log.warning(
                "ACL refused request code %d from %s (accessKey %s): %s",
                request.code, addr, ext.get(ACCESS_KEY), exc,
            )  # fmt: skip
            return server_serialized(request.response(ResponseCode.SYSTEM_ERROR, exc.remark))
        return None


class AclGuard(RequestProcessor):
    """A processor behind the ACL check (only built when ACL is on: no cost otherwise)."""

    def __init__(self, inner: RequestProcessor, validator: PlainAccessValidator) -> None:
        self.inner = inner
        self.validator = validator
        self.codes = inner.codes  # type: ignore[misc]

    def process(self, channel: Channel, request: RemotingCommand) -> Any:
        refusal = self.validator.check(channel, request)
        if refusal is not None:
            return refusal
        return self.inner.process(channel, request)


def guard(processors: Iterable[RequestProcessor], validator: PlainAccessValidator) -> list[RequestProcessor]:
    return [AclGuard(p, validator) for p in processors]


class UnknownCodeProcessor(RequestProcessor):
    """The broker's default processor for codes nothing serves (AdminBrokerProcessor's
    getUnknownCmdResponse)."""

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return not_supported(request)


def guarded_unknown_codes(validator: PlainAccessValidator) -> RequestProcessor:
    """The broker's fallback with ACL on: 4.9.8 runs its RPC hook before whichever processor takes
    the code, the default one included, so an unknown code is refused unsigned or badly signed and
    is REQUEST_CODE_NOT_SUPPORTED only once it passes the validator."""
    return AclGuard(UnknownCodeProcessor(), validator)
