"""Per-connection replay plans from frame rows, as tools/replay's engine takes them.

Pure Python (no Spark): the job groups frame rows by connection and calls ``planned_connection`` once per
(connection, clone); the per-frame planning is ``tools.replay_plan.build_connection_plan``. A clone
(``clone > 0``) is the same client again under another identity: its clientID (heartbeat, unregister,
lock bodies) gets a ``#<clone>`` suffix, and every message it sends gets a distinct UNIQ_KEY and KEYS, so
N clones put N distinct copies of each message. Producer and consumer groups stay, so clones join the
same groups as the original.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from rmqgate.tools.capture import Role
from rmqgate.tools.proxy import broker_addresses
from rmqgate.tools.replay_plan import BROKER_ONLY_CODES, SEND_CODES, PlannedConnection, build_connection_plan
from rmqgate.tools.traffic import NAMESRV_CODES
from rmqgate.wire.codes import RequestCode
from rmqgate.wire.command import RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.errors import CodecError
from rmqgate.wire.frame import decode_frame
from rmqgate.wire.message import format_properties, parse_properties
from rmqgate.wire.message_batch import decode_batch, encode_batch
from rmqgate.wire.message_const import PROPERTY_KEYS, PROPERTY_UNIQ_KEY

SEND_V2_CODES = frozenset({RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_REPLY_MESSAGE_V2})


def _get(row: Any, name: str) -> Any:
    return row[name] if isinstance(row, Mapping) else getattr(row, name)


def role_of(request_codes: Iterable[int], hint: str = "") -> str:
    """ "namesrv" / "broker" / "broker-self" (a broker registering itself: skipped) for a connection
    whose client sent ``request_codes``; ``hint`` is the role the capture recorded, if any."""
    codes = set(request_codes)
    if codes & BROKER_ONLY_CODES:
        return "broker-self"
    if hint in ("namesrv", "broker"):
        return hint
    return "namesrv" if codes & NAMESRV_CODES else "broker"


def connection_role(rows: Iterable[Any]) -> str:
    rows = list(rows)
    codes = [_get(r, "code") for r in rows if _get(r, "direction") == "c2s" and _get(r, "is_request")]
    hint = next((_get(r, "role") for r in rows if _get(r, "role")), "")
    return role_of(codes, hint)


# --- clone identities --------------------------------------------------------------------------

_CLIENT_ID_RE = re.compile(rb'("client[Ii][Dd]"\s*:\s*")([^"]*)(")')
_HEX = re.compile(r"[0-9A-Fa-f]+")


def clone_client_id(client_id: str, clone: int) -> str:
    return f"{client_id}#{clone}" if clone else client_id


def clone_uniq_key(uniq: str, clone: int) -> str:
    """Same length and shape (ip + pid + ... in hex) with the pid field shifted by ``clone``."""
    if not clone:
        return uniq
    if len(uniq) in (32, 56) and _HEX.fullmatch(uniq):
        pos = len(uniq) - 24
        pid = (int(uniq[pos : pos + 4], 16) + clone) & 0xFFFF
        return f"{uniq[:pos]}{pid:04X}{uniq[pos + 4 :]}"
    return f"{uniq}-{clone}"


def clone_properties(props: dict[str, str], clone: int) -> dict[str, str]:
    out = dict(props)
    if PROPERTY_UNIQ_KEY in out:
        out[PROPERTY_UNIQ_KEY] = clone_uniq_key(out[PROPERTY_UNIQ_KEY], clone)
    if out.get(PROPERTY_KEYS):
        out[PROPERTY_KEYS] = " ".join(f"{k}#{clone}" for k in out[PROPERTY_KEYS].split(" ") if k)
    return out


def _is_batch(cmd: RemotingCommand) -> bool:
    if cmd.code == RequestCode.SEND_BATCH_MESSAGE:
        return True
    ext = cmd.ext_fields or {}
    flag = ext.get("m") if cmd.code in SEND_V2_CODES else ext.get("batch")
    return str(flag).lower() in ("true", "1")


def message_count(cmd: RemotingCommand) -> int:
    """Messages a SEND request stores (a batch stores each entry)."""
    if cmd.code not in SEND_CODES:
        return 0
    if _is_batch(cmd) and cmd.body:
        try:
            return len(decode_batch(cmd.body))
        except CodecError:
            return 1
    return 1


def clone_request(cmd: RemotingCommand, clone: int) -> bool:
    """Give ``cmd`` the identity of clone ``clone`` in place; True if anything changed."""
    if not clone:
        return False
    code = cmd.code
    ext = cmd.ext_fields
    changed = False
    if code in (RequestCode.HEART_BEAT, RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ) and cmd.body:
        body = _CLIENT_ID_RE.sub(
            lambda m: m.group(1) + clone_client_id(m.group(2).decode(), clone).encode() + m.group(3),
            bytes(cmd.body),
        )
        changed = body != bytes(cmd.body)
        cmd.body = body
    elif code == RequestCode.UNREGISTER_CLIENT and ext and "clientID" in ext:
        ext["clientID"] = clone_client_id(ext["clientID"], clone)
        changed = True
    elif code in SEND_CODES and ext is not None:
        key = "i" if code in SEND_V2_CODES or code == RequestCode.SEND_BATCH_MESSAGE else "properties"
        if key not in ext and "properties" in ext:
            key = "properties"
        if ext.get(key):
            ext[key] = format_properties(clone_properties(parse_properties(ext[key]), clone))
            changed = True
        if _is_batch(cmd) and cmd.body:
            try:
                entries = decode_batch(cmd.body)
            except CodecError:
                entries = []
            for e in entries:
                e.properties = clone_properties(e.properties, clone)
            if entries:
                cmd.body = encode_batch(entries)
                changed = True
    return changed


# --- building -------------------------------------------------------------------------------------


def planned_connection(
    rows: Iterable[Any],
    t0: float,
    clone: int,
    conn_id: int,
    broker_names: Mapping[str, str] | None = None,
) -> PlannedConnection | None:
    """The plan of one connection (rows: its frames in any order), clone identity applied, times
    relative to ``t0`` (the start of its input; plan_start 0 for the engine); None if it is not to be
    replayed. ``conn_id`` must be unique within one replay call."""
    rows = sorted(rows, key=lambda r: _get(r, "idx"))
    if not rows:
        return None
    role = connection_role(rows)
    if role == "broker-self":
        return None
    server = _get(rows[0], "server")
    pc = PlannedConnection(
        conn_id,
        Role.NAMESRV if role == "namesrv" else Role.BROKER,
        server,
        broker_name_of(server, broker_names or {}),
    )
    frames = (
        (_get(r, "ts") - t0, _get(r, "direction") == "c2s", bytes(_get(r, "raw")))
        for r in rows
        if not _get(r, "error")
    )
    build_connection_plan(pc, frames, (lambda cmd: clone_request(cmd, clone)) if clone else None)
    return None if pc.skipped else pc


# --- routing --------------------------------------------------------------------------------------


def broker_names_from_routes(route_bodies: Iterable[bytes]) -> dict[str, str]:
    """Original broker address -> broker name, from recorded GET_ROUTEINFO_BY_TOPIC response bodies."""
    out: dict[str, str] = {}
    for body in route_bodies:
        out.update(broker_addresses(bytes(body)))
    return out


def _vip_partner(addr: str) -> str:
    """The broker's main port for its VIP channel port (listenPort - 2) and the other way round."""
    host, _, port = addr.rpartition(":")
    try:
        return f"{host}:{int(port) + 2}"
    except ValueError:
        return addr


def broker_name_of(server: str, names: Mapping[str, str]) -> str | None:
    """The recorded name of the broker at ``server`` (its main or its VIP channel port), if known."""
    return names.get(server) or names.get(_vip_partner(server))


def route_bodies_from_rows(rows: Iterable[Any]) -> list[bytes]:
    """Bodies of successful recorded GET_ROUTEINFO_BY_TOPIC responses."""
    bodies = []
    for r in rows:
        if _get(r, "req_code") != RequestCode.GET_ROUTEINFO_BY_TOPIC or _get(r, "code") != 0:
            continue
        try:
            cmd = decode_frame(bytes(_get(r, "raw")))
        except CodecError:
            continue
        if cmd.flag & RESPONSE_FLAG and cmd.body:
            bodies.append(bytes(cmd.body))
    return bodies
