"""The generated Wireshark dissector: generation from the declarations, and tshark running it.

The tshark tests run Debian's tshark (``make setup`` installs it) with the generated Lua script on
every capture of the corpus and compare each RocketMQ frame's code, opaque, flag, serialization,
remark and extFields with what ``rmqgate pcap decode --json`` reports, and the stored messages of
pull/view responses and the elements of batches with what the codec reads from the same bodies; crafted captures check the
heuristic on another port and that garbage or cut-short frames never raise a Lua error.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from construct import this
from scapy.all import IP, TCP, Ether, Raw, wrpcap

from rmqgate.tools.cli import main
from rmqgate.tools.dissector import (
    REQUEST_BODIES,
    RESPONSE_BODIES,
    ext_field_names,
    generate,
    json_header_keys,
    lua_expr,
    lua_string,
)
from rmqgate.tools.pcap import read_frames
from rmqgate.tools.pcap_cli import frame_json
from rmqgate.wire import RemotingCommand, encode_frame
from rmqgate.wire.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from rmqgate.wire.codes import RequestCode, ResponseCode, SerializeType
from rmqgate.wire.command import RESPONSE_FLAG
from rmqgate.wire.compression import compress_body, compression_flags
from rmqgate.wire.headers import RegisterBrokerRequestHeader, SendMessageRequestHeader
from rmqgate.wire.message import StoredMessage, iter_messages
from rmqgate.wire.message_batch import decode_batch

_CORPUS = Path(os.environ.get("RMQGATE_CORPUS", Path(__file__).resolve().parents[3] / "shared" / "corpus"))
PCAPS = sorted(p.relative_to(_CORPUS).as_posix() for p in _CORPUS.glob("pcap*/*.pcap"))
TSHARK = shutil.which("tshark")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (make setup installs it)")


@pytest.fixture(scope="module")
def lua_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dissector") / "rocketmq.lua"
    path.write_text(generate())
    return path


# --- generation ----------------------------------------------------------------------------------


def test_lua_string_escapes_everything_outside_printable_ascii() -> None:
    assert lua_string('a"b\\c') == '"a\\"b\\\\c"'
    assert lua_string("\x01\x02") == '"\\001\\002"'
    assert lua_string("é") == '"\\195\\169"'


def test_construct_expressions_become_lua() -> None:
    assert lua_expr(this.sys_flag & 16) == 'band(c["sys_flag"], 16)'
    assert (
        lua_expr(this.length - 4 - (this.header_word & 0xFF))
        == '((c["length"] - 4) - band(c["header_word"], 255))'
    )
    with pytest.raises(ValueError):
        lua_expr(this.a * 2)


def test_every_code_and_ext_field_is_in_the_script() -> None:
    text = generate()
    for code in RequestCode:
        assert f'[{int(code)}]="{code.name}"' in text
    for code in ResponseCode:
        assert f'[{int(code)}]="{code.name}"' in text
    names = ext_field_names()
    for f in SendMessageRequestHeader.FIELDS:
        assert f.wire in names and f.alias in names
    for name in names:
        assert f'ProtoField.string("rocketmq.ext.{name}"' in text
    for sub in StoredMessage.subcons:
        assert f'"rocketmq.msg.{sub.name}"' in text


def test_json_header_keys_come_from_the_codec() -> None:
    keys = json_header_keys()
    assert keys["code"] == "code" and keys["extFields"] == "ext_fields" and keys["opaque"] == "opaque"
    assert keys["serializeTypeCurrentRPC"] == ""


def test_the_cli_prints_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pcap", "dissector"]) == 0
    assert capsys.readouterr().out == generate()


# --- tshark --------------------------------------------------------------------------------------


def _tshark(lua: Path, pcap: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    assert TSHARK is not None
    return subprocess.run(
        [TSHARK, "-n", "-r", str(pcap), "-X", f"lua_script:{lua}", *extra],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _no_lua_error(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr
    for stream in (proc.stdout, proc.stderr):
        assert "Lua Error" not in stream and "Lua: Error" not in stream


_COLLECTED = (
    "rocketmq.code",
    "rocketmq.opaque",
    "rocketmq.flag",
    "rocketmq.serialize",
    "rocketmq.remark",
    "rocketmq.msg.topic",
    "rocketmq.msg.queue_offset",
    "rocketmq.batch.body_length",
)


def _walk(node: Any, found: dict[str, list[Any]]) -> None:
    """Collect field values of one rocketmq tree; extFields as (key, value) pairs in order."""
    if isinstance(node, list):
        for item in node:
            _walk(item, found)
        return
    if not isinstance(node, dict):
        return
    if "rocketmq.ext_key" in node and "rocketmq.ext_value" in node:
        found["ext"].append((node["rocketmq.ext_key"], node["rocketmq.ext_value"]))
    for key, value in node.items():
        if key in _COLLECTED:
            found[key].extend(value if isinstance(value, list) else [value])
        _walk(value, found)


def _dissected(lua: Path, pcap: Path) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Per direction (src, dst), the frames tshark shows, in stream order."""
    proc = _tshark(lua, pcap, "-T", "json", "--no-duplicate-keys", "-J", "ip tcp rocketmq", "-Y", "rocketmq")
    _no_lua_error(proc)
    out: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for packet in json.loads(proc.stdout or "[]"):
        layers = packet["_source"]["layers"]
        ip, tcp = layers["ip"], layers["tcp"]
        src = f"{ip['ip.src']}:{tcp['tcp.srcport']}"
        dst = f"{ip['ip.dst']}:{tcp['tcp.dstport']}"
        trees = layers["rocketmq"]
        for tree in trees if isinstance(trees, list) else [trees]:
            found: dict[str, list[Any]] = defaultdict(list)
            _walk(tree, found)
            out[(src, dst)].append(
                {
                    "code": int(found["rocketmq.code"][0]),
                    "opaque": int(found["rocketmq.opaque"][0]),
                    "flag": int(found["rocketmq.flag"][0]),
                    "serialize": SerializeType(int(found["rocketmq.serialize"][0])).name,
                    "remark": (found["rocketmq.remark"] or [None])[0] or None,
                    "ext_fields": dict(found["ext"]),
                    "messages": [
                        (topic, int(offset))
                        for topic, offset in zip(
                            found["rocketmq.msg.topic"], found["rocketmq.msg.queue_offset"], strict=True
                        )
                    ],
                    "batch": [int(n) for n in found["rocketmq.batch.body_length"]],
                }
            )
    return out


def _bodies(frame: Any, requests: dict[tuple[str, int], int]) -> tuple[list[tuple[str, int]], list[int]]:
    """(stored messages of a pull/view response, body lengths of a batch's elements)."""
    cmd = frame.command
    if not cmd.flag & RESPONSE_FLAG:
        requests[(frame.conn_id, cmd.opaque)] = cmd.code
        kind = REQUEST_BODIES.get(cmd.code)
    else:
        asked = requests.get((frame.conn_id, cmd.opaque))
        kind = RESPONSE_BODIES.get(asked) if cmd.code == 0 and asked is not None else None
    if kind == "BatchMessage" and cmd.body:
        return [], [len(entry.body) for entry in decode_batch(cmd.body)]
    if kind == "StoredMessage" and cmd.body:
        return [(m.topic, m.queue_offset) for m in iter_messages(cmd.body)], []
    return [], []


def _decoded(pcap: Path) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    requests: dict[tuple[str, int], int] = {}
    for frame in read_frames(pcap):
        obj = frame_json(frame)
        messages, batch = _bodies(frame, requests)
        out[(str(obj["src"]), str(obj["dst"]))].append(
            {
                "code": obj["code"],
                "opaque": obj["opaque"],
                "flag": obj["flag"],
                "serialize": obj["serialize"],
                "remark": obj["remark"] or None,
                "ext_fields": obj["ext_fields"],
                "messages": messages,
                "batch": batch,
            }
        )
    return out


@needs_tshark
@pytest.mark.parametrize("name", PCAPS)
def test_tshark_shows_every_frame_as_pcap_decode_does(lua_script: Path, name: str) -> None:
    pcap = _CORPUS / name
    expected = _decoded(pcap)
    shown = _dissected(lua_script, pcap)
    assert sum(map(len, expected.values())) > 0
    assert shown.keys() == expected.keys()
    for direction, frames in expected.items():
        assert len(shown[direction]) == len(frames), direction
        for i, (got, want) in enumerate(zip(shown[direction], frames, strict=True)):
            assert got == want, (direction, i)


def _packets(port: int, payloads: list[bytes], sport: int = 40000) -> list[Any]:
    """One client -> server TCP stream carrying ``payloads`` as consecutive segments."""
    seq = 1000
    packets = []
    for data in payloads:
        pkt = (
            Ether() / IP(src="127.0.0.1", dst="127.0.0.2") / TCP(sport=sport, dport=port, flags="PA", seq=seq)
        )
        packets.append(pkt / Raw(load=data))
        seq += len(data)
    return packets


SEND = RemotingCommand(
    int(RequestCode.SEND_MESSAGE_V2),
    opaque=7,
    ext_fields={"a": "PG", "b": "TopicA", "f": "0", "i": "TAGS\x01t\x02KEYS\x01k"},
    body=b"hello",
    version=409,
)


@needs_tshark
@pytest.mark.parametrize("serialize", list(SerializeType))
def test_the_heuristic_finds_frames_on_another_port_split_across_segments(
    lua_script: Path, tmp_path: Path, serialize: SerializeType
) -> None:
    cmd = RemotingCommand(
        SEND.code, opaque=SEND.opaque, ext_fields=SEND.ext_fields, body=SEND.body, version=409
    )
    cmd.serialize_type = serialize
    frame = encode_frame(cmd)
    second = RemotingCommand(int(RequestCode.HEART_BEAT), opaque=8, body=b'{"clientID":"c1"}')
    second.serialize_type = serialize
    data = frame + encode_frame(second)
    pcap = tmp_path / "other-port.pcap"
    wrpcap(str(pcap), _packets(20001, [data[:10], data[10:40], data[40:]]))
    shown = _dissected(lua_script, pcap)
    frames = shown[("127.0.0.1:40000", "127.0.0.2:20001")]
    assert [(f["code"], f["opaque"], f["serialize"]) for f in frames] == [
        (SEND.code, 7, serialize.name),
        (int(RequestCode.HEART_BEAT), 8, serialize.name),
    ]
    assert frames[0]["ext_fields"] == SEND.ext_fields
    detail = _tshark(lua_script, pcap, "-V").stdout
    assert "TAGS: t" in detail and "KEYS: k" in detail and "clientID: c1" in detail


@needs_tshark
def test_garbage_and_cut_short_frames_raise_no_lua_error(lua_script: Path, tmp_path: Path) -> None:
    good = encode_frame(SEND)
    payloads = [
        bytes(range(256)) * 4,  # garbage
        b"GET / HTTP/1.1\r\n\r\n",
        good[:30],  # a frame cut short, then the stream goes on with nonsense
        b"\x00\x00\x00\x10\x00\x00\x00\x08{not json}xxxx",  # JSON header that does not parse
        b"\x00\x00\x00\x10\x01\x00\x00\x08\x00\x01\x00\x01\x90\x00\x00\x00xxxx",  # short binary header
    ]
    packets = []
    for i, data in enumerate(payloads):
        packets += _packets(10911, [data], sport=41000 + i)
    # a broker response whose PULL body claims more than it holds
    stored = b"\x00\x00\x01\x00" + b"\xda\xa3\x20\xa7" + b"\x00" * 40
    pull = RemotingCommand(int(RequestCode.PULL_MESSAGE), opaque=3, ext_fields={"consumerGroup": "g"})
    answer = RemotingCommand(0, opaque=3, flag=1, body=stored)
    packets += _packets(10911, [encode_frame(pull)], sport=42000)
    packets += [
        Ether()
        / IP(src="127.0.0.2", dst="127.0.0.1")
        / TCP(sport=10911, dport=42000, flags="PA", seq=5)
        / Raw(load=encode_frame(answer))
    ]
    pcap = tmp_path / "garbage.pcap"
    wrpcap(str(pcap), packets)
    proc = _tshark(lua_script, pcap, "-V")
    _no_lua_error(proc)
    assert "body: StoredMessage size 256 overruns the body" in proc.stdout
    assert "header: " in proc.stdout  # the headers that do not parse are flagged


@needs_tshark
def test_a_send_frame_shows_its_declared_fields(lua_script: Path) -> None:
    pcap = _CORPUS / "pcap" / "i_LargeBody.pcap"
    proc = _tshark(lua_script, pcap, "-V", "-Y", "rocketmq.code == 310 && rocketmq.compressed")
    _no_lua_error(proc)
    assert "Compressed body: True (zlib" in proc.stdout
    assert "Request SEND_MESSAGE_V2" in proc.stdout
    pull = _tshark(
        lua_script, pcap, "-V", "-Y", 'rocketmq.response_to_code == "PULL_MESSAGE" && rocketmq.msg.topic'
    )
    _no_lua_error(pull)
    assert "StoredMessage 1" in pull.stdout and "queue offset:" in pull.stdout
    route = _tshark(lua_script, pcap, "-V", "-Y", "rocketmq.json.brokerName")
    _no_lua_error(route)
    assert "TopicRouteData" in route.stdout


@needs_tshark
def test_compressed_send_bodies_show_their_type_and_zlib_ones_inflate(
    lua_script: Path, tmp_path: Path
) -> None:
    """The three types a 5.x client compresses with, made by the codec: zlib inflates (its text shown),
    ZSTD and LZ4 are marked with their type and left compressed (Wireshark's Lua inflates zlib only)."""
    kinds = ["zlib", "zstd", "lz4"]  # (lz4 is a test dependency)
    text = b"rocketmq body text " * 300
    frames = []
    for i, kind in enumerate(kinds):
        ext = {"a": "PG", "b": f"Topic{kind}", "f": str(compression_flags(kind)), "i": "TAGS\x01t"}
        cmd = RemotingCommand(int(RequestCode.SEND_MESSAGE_V2), opaque=20 + i, ext_fields=ext)
        cmd.body = compress_body(text, kind)
        frames += _packets(10911, [encode_frame(cmd)], sport=41000 + i)
    pcap = tmp_path / "compressed.pcap"
    wrpcap(str(pcap), frames)
    proc = _tshark(lua_script, pcap, "-V")
    _no_lua_error(proc)
    assert f"Compressed body: True (zlib, {len(text)} bytes inflated)" in proc.stdout
    assert "rocketmq body text rocketmq body text" in proc.stdout
    for kind in kinds[1:]:
        assert f"Compressed body: True ({kind}, not inflated here)" in proc.stdout


@needs_tshark
def test_a_frame_cut_by_the_snapshot_length_raises_no_lua_error(lua_script: Path, tmp_path: Path) -> None:
    pcap = tmp_path / "snaplen.pcap"
    wrpcap(str(pcap), _packets(10911, [encode_frame(SEND) * 3]))
    raw = bytearray(pcap.read_bytes())
    keep = 80  # link, IP and TCP headers and the start of the first frame
    incl = struct.unpack_from("<I", raw, 24 + 8)[0]
    struct.pack_into("<I", raw, 24 + 8, keep)
    del raw[24 + 16 + keep : 24 + 16 + incl]
    pcap.write_bytes(bytes(raw))
    proc = _tshark(lua_script, pcap, "-V")
    _no_lua_error(proc)


@needs_tshark
def test_a_compressed_register_broker_body_is_inflated_and_read(lua_script: Path, tmp_path: Path) -> None:
    topics = {"TopicA": TopicConfig(topic_name="TopicA", read_queue_nums=4, write_queue_nums=4)}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(topics, DataVersion(1795312001858, 7)), [])
    header = RegisterBrokerRequestHeader(
        "broker-a", "127.0.0.1:10911", "DefaultCluster", "127.0.0.1:10912", 0
    )
    header.compressed = True
    cmd = RemotingCommand(int(RequestCode.REGISTER_BROKER), opaque=9, ext_fields=header.to_ext())
    cmd.body = body.encode(compressed=True)
    pcap = tmp_path / "register.pcap"
    wrpcap(str(pcap), _packets(9876, [encode_frame(cmd)]))
    proc = _tshark(lua_script, pcap, "-V")
    _no_lua_error(proc)
    assert "compressed: true" in proc.stdout
    assert "RegisterBrokerBody (compressed)" in proc.stdout
    assert "TopicA 4 4 6 SINGLE_TAG" in proc.stdout
    assert '"counter":7' in proc.stdout


def _exchange(request: bytes, response: bytes, sport: int) -> list[Any]:
    """A request on a fresh connection to the broker port and its response."""
    out = _packets(10911, [request], sport=sport)
    back = Ether() / IP(src="127.0.0.2", dst="127.0.0.1") / TCP(sport=10911, dport=sport, flags="PA", seq=1)
    return [*out, back / Raw(load=response)]


@needs_tshark
@pytest.mark.parametrize("name", ["pcap/h_PullByOffset_ROCKETMQboth.pcap", "pcap/c_BatchSend.pcap"])
def test_mutated_corpus_frames_raise_no_lua_error(lua_script: Path, tmp_path: Path, name: str) -> None:
    """Real requests and responses with bytes overwritten or cut off, each pair on its own connection:
    every header, extField, stored-message and JSON length the dissector follows gets garbage. The
    output must also stay valid UTF-8 (``_tshark`` decodes it strictly)."""
    rng = random.Random(20261127)
    frames = [f for f in read_frames(_CORPUS / name) if f.command is not None]
    pairs = []
    asked: dict[tuple[str, int], bytes] = {}
    for f in frames:
        if not f.command.flag & RESPONSE_FLAG:
            asked[(f.conn_id, f.command.opaque)] = f.raw
        elif f.command.body and (f.conn_id, f.command.opaque) in asked:
            pairs.append((asked[(f.conn_id, f.command.opaque)], f.raw))
    assert pairs
    packets = []
    for i in range(300):
        request, response = rng.choice(pairs)
        target = bytearray(rng.choice((request, response)))
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(8, len(target))
            value = rng.choice((b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00\x00\x00\x00", b"\x01", b"{"))
            target[pos : pos + len(value)] = value
        if rng.random() < 0.3:
            del target[rng.randrange(8, len(target)) :]
        if target.startswith(request[:8]) and len(target) < len(request) + 64 and rng.random() < 0.5:
            packets += _exchange(bytes(target), response, 43000 + i)
        else:
            packets += _exchange(request, bytes(target), 43000 + i)
    pcap = tmp_path / "mutated.pcap"
    wrpcap(str(pcap), packets)
    _no_lua_error(_tshark(lua_script, pcap, "-V"))
