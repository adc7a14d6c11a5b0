"""``rmqgate pcap decode``: plain and JSON lines, truncated-frame reporting, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scapy.all import IP, TCP, Ether, Raw, wrpcap

from rmqgate.tools.cli import main
from rmqgate.tools.pcap import read_frames
from rmqgate.wire import RemotingCommand, encode_frame
from rmqgate.wire.codes import LanguageCode, SerializeType

REQUIRED = {
    "ts",
    "src",
    "dst",
    "serialize",
    "code",
    "opaque",
    "flag",
    "language",
    "version",
    "remark",
    "ext_fields",
    "body_len",
    "request",
    "conn",
    "direction",
}

REQUEST = RemotingCommand(
    310, opaque=7, ext_fields={"a": "PG", "b": "TopicA", "i": "TAGS\x01t\x02"}, body=b"hello", version=409
)
RESPONSE = RemotingCommand(
    17,
    opaque=7,
    flag=1,
    remark="No topic route info",
    serialize_type=SerializeType.ROCKETMQ,
    language=LanguageCode.CPP,
    version=333,
)
ONEWAY = RemotingCommand(10, opaque=8, flag=2, ext_fields={"topic": "T"})


def _capture(path: Path, *, truncated: bool) -> Path:
    client, server = ("10.1.1.1", 45000), ("10.1.1.2", 10911)
    seq = {"c": 100, "s": 5000}

    def pkt(side: str, flags: str, payload: bytes = b"") -> Ether:
        (src, sport), (dst, dport) = (client, server) if side == "c" else (server, client)
        other = "s" if side == "c" else "c"
        p = (
            Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
            / IP(src=src, dst=dst)
            / TCP(sport=sport, dport=dport, flags=flags, seq=seq[side], ack=seq[other])
        )
        seq[side] += len(payload) + (1 if "S" in flags else 0)
        return p / Raw(payload) if payload else p

    packets = [pkt("c", "S"), pkt("s", "SA"), pkt("c", "A")]
    packets += [pkt("c", "PA", encode_frame(REQUEST)), pkt("s", "PA", encode_frame(RESPONSE))]
    packets.append(pkt("c", "PA", encode_frame(ONEWAY)))
    if truncated:
        packets.append(pkt("c", "PA", encode_frame(REQUEST)[:30]))
    for i, p in enumerate(packets):
        p.time = 1_700_000_000 + i
    wrpcap(str(path), packets)
    return path


def test_plain_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _capture(tmp_path / "c.pcap", truncated=False)
    assert main(["pcap", "decode", str(path)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 3 and err == ""
    assert lines[0] == (
        "2023-11-14 22:13:23.000000 10.1.1.1:45000 -> 10.1.1.2:10911 REQUEST SEND_MESSAGE_V2(310) opaque=7 "
        "JSON {a=PG, b=TopicA, i=TAGS\x01t\x02} body=5"
    )
    assert lines[1] == (
        "2023-11-14 22:13:24.000000 10.1.1.2:10911 -> 10.1.1.1:45000 RESPONSE TOPIC_NOT_EXIST(17) opaque=7 "
        'ROCKETMQ remark="No topic route info" body=0'
    )
    assert " ONEWAY SEND_MESSAGE(10) opaque=8 JSON {topic=T} body=0" in lines[2]


def test_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _capture(tmp_path / "c.pcap", truncated=False)
    assert main(["pcap", "decode", "--json", str(path)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 3
    for row in rows:
        assert set(row) >= REQUIRED
        assert row["conn"] == "10.1.1.1:45000-10.1.1.2:10911"
    req, resp, oneway = rows
    assert req | {"ts": 0} == req | {
        "ts": 0,
        "src": "10.1.1.1:45000",
        "dst": "10.1.1.2:10911",
        "serialize": "JSON",
        "code": 310,
        "opaque": 7,
        "flag": 0,
        "language": "JAVA",
        "version": 409,
        "remark": None,
        "ext_fields": {"a": "PG", "b": "TopicA", "i": "TAGS\x01t\x02"},
        "body_len": 5,
        "request": True,
        "direction": "c2s",
    }
    assert req["ts"] == pytest.approx(1_700_000_003)
    assert (resp["serialize"], resp["request"], resp["remark"], resp["language"], resp["version"]) == (
        "ROCKETMQ",
        False,
        "No topic route info",
        "CPP",
        333,
    )
    assert (resp["direction"], resp["ext_fields"], resp["flag"]) == ("s2c", {}, 1)
    assert (oneway["request"], oneway["oneway"], oneway["flag"]) == (True, True, 2)


def test_truncated_frame_goes_to_stderr_and_fails_only_when_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _capture(tmp_path / "t.pcap", truncated=True)
    assert main(["pcap", "decode", "--json", str(path)]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3
    assert "truncated frame 10.1.1.1:45000 -> 10.1.1.2:10911" in err
    assert f"30 bytes of {len(encode_frame(REQUEST))}" in err and "capture ended" in err
    assert main(["pcap", "decode", "--strict", str(path)]) == 1
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3 and "truncated frame" in err
    assert main(["pcap", "decode", "--strict", str(_capture(tmp_path / "ok.pcap", truncated=False))]) == 0


def test_an_unsupported_link_type_is_named_not_silently_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """802.11 (link type 105) frames are skipped, and stderr says why nothing was decoded."""
    path = tmp_path / "wifi.pcap"
    wrpcap(str(path), [Raw(b"\x08\x02" + bytes(40))] * 3, linktype=105)
    assert main(["pcap", "decode", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "link type 105 is not supported" in err
    assert main(["pcap", "decode", "--strict", str(path)]) == 1
    assert "link type 105" in capsys.readouterr().err
    ok = _capture(tmp_path / "ok.pcap", truncated=False)
    assert main(["pcap", "decode", str(ok)]) == 0
    assert "link type" not in capsys.readouterr().err


def test_usage_and_unreadable_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pcap"]) == 2
    assert "decode" in capsys.readouterr().err
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"this is not a capture")
    assert main(["pcap", "decode", str(bad)]) == 2
    assert "not a pcap/pcapng file" in capsys.readouterr().err


def test_console_script_on_a_corpus_capture(corpus: Path) -> None:
    capture = corpus / "pcap" / "a_SyncSendPushConsume_ROCKETMQclient.pcap"
    script = Path(sys.executable).parent / "rmqgate"
    done = subprocess.run(
        [str(script), "pcap", "decode", str(capture), "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    frames = list(read_frames(capture))
    assert len(rows) == len(frames) > 100
    for row, frame in zip(rows, frames, strict=True):
        assert set(row) >= REQUIRED
        assert (row["src"], row["dst"], row["opaque"], row["code"]) == (
            frame.src,
            frame.dst,
            frame.command.opaque,
            frame.command.code,
        )
    assert {row["serialize"] for row in rows} == {"JSON", "ROCKETMQ"}  # a mixed capture
    assert {row["request"] for row in rows} == {True, False}
