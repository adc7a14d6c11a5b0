"""The rmqcap format: round trips, incremental and torn-tail reads, appends, pcap conversion, stats."""

from __future__ import annotations

import argparse
import io
import json
import threading
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqgate.tools import capture_cli
from rmqgate.tools.capture import (
    RECORD_FIXED,
    CaptureReader,
    CaptureWriter,
    Direction,
    Kind,
    Record,
    Role,
    read_capture,
    scan_valid_end,
)
from rmqgate.tools.pcap import read_frames
from rmqgate.tools.traffic import convert_pcap, iter_records
from rmqgate.wire.codes import RequestCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.frame import encode_frame

records_st = st.lists(
    st.tuples(
        st.integers(0, 2**31 - 1),  # conn
        st.sampled_from([Direction.C2S, Direction.S2C]),
        st.sampled_from(list(Role)),
        st.binary(max_size=300),
        st.booleans(),  # flush after this record
    ),
    max_size=40,
)


def _write(path: Path, recs, start: float = 1_700_000_000.0) -> list[tuple]:
    expected = []
    with CaptureWriter(path, source="test", start_time=start) as w:
        for i, (conn, direction, role, data, flush) in enumerate(recs):
            ts = start + i * 0.001
            w.frame(ts, conn, direction, role, data)
            expected.append((Kind.FRAME, round(ts * 1e6), conn, int(direction), int(role), data))
            if flush:
                w.flush()
    return expected


def _key(rec) -> tuple:
    return (rec.kind, round(rec.ts * 1e6), rec.conn_id, rec.direction, rec.role, rec.data)


def test_record_layout_is_declared_once() -> None:
    # the hot-path struct is derived from the construct declaration and agrees with it
    built = Record.build(
        {
            "kind": 1,
            "direction": 1,
            "role": 2,
            "reserved": 0,
            "ts_us": 5,
            "conn_id": 7,
            "length": 3,
            "data": b"abc",
        }
    )
    assert built == RECORD_FIXED.pack(1, 1, 2, 0, 5, 7, 3) + b"abc"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(recs=records_st, chunk=st.integers(1, 4096))
def test_round_trip_any_chunking(tmp_path: Path, recs, chunk: int) -> None:
    path = tmp_path / "rt.rmqcap"
    expected = _write(path, recs)
    with CaptureReader(path, chunk_size=chunk) as reader:
        got = [_key(r) for r in reader]
        assert reader.header.source == "test"
        assert reader.header.start_time == pytest.approx(1_700_000_000.0)
        assert not reader.torn
    assert got == expected


def test_reader_is_incremental(tmp_path: Path) -> None:
    path = tmp_path / "big.rmqcap"
    with CaptureWriter(path, flush_bytes=10_000) as w:
        for i in range(5000):
            w.frame(i, 1, 0, 1, bytes([i % 251]) * 200)
    size = path.stat().st_size
    reader = CaptureReader(path, chunk_size=4096)
    it = iter(reader)
    first = next(it)
    assert first.data == b"\x00" * 200
    assert reader._fp.tell() < size / 4  # only the head of the file was read
    assert sum(1 for _ in it) == 4999
    reader.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0.0, 0.999))
def test_torn_tail_yields_a_prefix(tmp_path: Path, cut: float) -> None:
    path = tmp_path / "torn.rmqcap"
    recs = [(1, Direction.C2S, Role.BROKER, bytes([i]) * (50 + i), i % 7 == 6) for i in range(60)]
    expected = _write(path, recs)
    good_end = path.stat().st_size
    with CaptureWriter(path, append=True) as w:  # a last zstd frame that the "crash" will cut
        for i in range(20):
            w.frame(2e9 + i, 9, 1, 2, b"tail" * i)
    full = path.read_bytes()
    torn_at = good_end + int((len(full) - good_end) * cut)
    path.write_bytes(full[:torn_at])
    with CaptureReader(path) as reader:
        got = [_key(r) for r in reader]
        assert reader.torn == (torn_at != good_end)
    assert got[: len(expected)] == expected
    assert all(k[2] == 9 for k in got[len(expected) :])  # only whole records of the torn frame


def test_append_after_torn_tail_truncates_it(tmp_path: Path) -> None:
    path = tmp_path / "a.rmqcap"
    expected = _write(path, [(1, 0, 1, b"x" * 10, True)] * 5)
    good_end = path.stat().st_size
    with path.open("ab") as fp:
        fp.write(b"\x28\xb5\x2f\xfd\x00garbage")  # a torn zstd frame
    assert scan_valid_end(path)[1] == good_end
    with CaptureWriter(path, append=True) as w:
        w.frame(5.0, 2, 1, 2, b"after")
    got = [_key(r) for r in read_capture(path)]
    assert got[:5] == expected
    assert got[5][2] == 2 and got[5][5] == b"after"


def test_read_while_appending(tmp_path: Path) -> None:
    path = tmp_path / "live.rmqcap"
    writer = CaptureWriter(path, source="live")
    total = 300

    def produce() -> None:
        for i in range(total):
            writer.frame(float(i), i % 3, 0, 1, b"frame-%d" % i)
            if i % 10 == 9:
                writer.flush()
                time.sleep(0.002)
        writer.close()

    t = threading.Thread(target=produce)
    t.start()
    got = [r.data for r in CaptureReader(path, follow=True, poll=0.005, idle_timeout=1.0)]
    t.join()
    assert got == [b"frame-%d" % i for i in range(total)]


def test_connection_records_carry_metadata(tmp_path: Path) -> None:
    path = tmp_path / "m.rmqcap"
    with CaptureWriter(path) as w:
        w.conn_open(1.0, 4, Role.BROKER, client="1.2.3.4:5", server="6.7.8.9:10911", broker_name="b")
        w.conn_close(2.0, 4, Role.BROKER, reason="bye")
    recs = list(read_capture(path))
    assert [r.kind for r in recs] == [Kind.CONN_OPEN, Kind.CONN_CLOSE]
    assert recs[0].meta == {"client": "1.2.3.4:5", "server": "6.7.8.9:10911", "broker_name": "b"}
    assert recs[1].meta == {"reason": "bye"}


def test_bad_magic_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(b"NOTCAP" + b"\x00" * 20)
    with pytest.raises(ValueError, match="magic"):
        CaptureReader(path)
    with pytest.raises(ValueError):
        list(iter_records(path))


def test_convert_pcap_keeps_every_frame(corpus: Path, tmp_path: Path) -> None:
    src = corpus / "pcap-thirdparty" / "official-rocketmq-client-python-2.0.0.pcap"
    dst = tmp_path / "tx.rmqcap"
    n = convert_pcap(src, dst)
    frames = list(read_frames(src))
    assert n == len(frames) > 100
    got = [r for r in read_capture(dst) if r.kind == Kind.FRAME]
    assert [r.data for r in got] == [f.raw for f in frames]
    assert [r.direction for r in got] == [0 if f.direction == "c2s" else 1 for f in frames]
    opens = [r for r in read_capture(dst) if r.kind == Kind.CONN_OPEN]
    assert len(opens) == len({f.conn_id for f in frames})
    # connections to 9876 are name-server connections, the ones to 10911 broker connections
    assert {r.meta["server"].rpartition(":")[2]: r.role for r in opens} == {
        "9876": Role.NAMESRV,
        "10911": Role.BROKER,
    }


def test_stats_table_and_json(corpus: Path, tmp_path: Path) -> None:
    src = corpus / "pcap-thirdparty" / "official-rocketmq-client-python-2.0.0.pcap"
    dst = tmp_path / "tx.rmqcap"
    convert_pcap(src, dst)
    parser = argparse.ArgumentParser()
    capture_cli.add_arguments(parser)
    out = io.StringIO()
    with redirect_stdout(out):
        assert capture_cli.run(parser.parse_args(["stats", str(dst), "--json"])) == 0
    stats = json.loads(out.getvalue())
    sends = [f for f in read_frames(src) if f.direction == "c2s" and f.command and f.command.code == 310
             and not f.command.is_response]  # fmt: skip
    assert stats["by_code"]["SEND_MESSAGE_V2"]["count"] == len(sends)
    assert stats["by_code"]["SEND_MESSAGE_V2"]["responses"] == {"SUCCESS": len(sends)}
    assert stats["server_requests"]["CHECK_TRANSACTION_STATE"] == 4
    assert stats["connections"] == 6
    assert stats["duration_s"] > 1
    assert sum(t["requests"] for t in stats["by_topic"].values()) > 0
    # the pcap and its capture give the same numbers
    assert capture_cli.compute_stats(src)["by_code"] == stats["by_code"]
    out = io.StringIO()
    with redirect_stdout(out):
        assert capture_cli.run(parser.parse_args(["stats", str(dst)])) == 0
    table = out.getvalue()
    assert "SEND_MESSAGE_V2" in table and "requests" in table and "duration" in table


def test_dump_lists_frames(tmp_path: Path) -> None:
    path = tmp_path / "d.rmqcap"
    req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, opaque=3)
    with CaptureWriter(path) as w:
        w.frame(1.0, 1, 0, 1, encode_frame(req))
    out = io.StringIO()
    capture_cli.dump(str(path), out)
    assert "code=105" in out.getvalue() and "c2s" in out.getvalue()


def test_rmqgate_pcap_convert_and_capture_stats_commands(corpus: Path, tmp_path: Path) -> None:
    from rmqgate.tools.cli import main

    dst = tmp_path / "c.rmqcap"
    assert main(["pcap", "convert", str(corpus / "pcap" / "c_BatchSend.pcap"), "-o", str(dst)]) == 0
    assert sum(1 for r in read_capture(dst) if r.kind == Kind.FRAME) == len(
        list(read_frames(corpus / "pcap" / "c_BatchSend.pcap"))
    )
    out = io.StringIO()
    with redirect_stdout(out):
        assert capture_cli.run(argparse.Namespace(capture_command="stats", file=str(dst), json=True)) == 0
    assert json.loads(out.getvalue())["by_code"]["SEND_BATCH_MESSAGE"]["count"] > 0


def test_batches_compressed_elsewhere_keep_their_order(tmp_path: Path) -> None:
    path = tmp_path / "t.rmqcap"
    w = CaptureWriter(path, flush_bytes=64)
    w.frame(1.0, 1, 0, 1, b"a" * 10)
    batch = w.take()
    for i in range(20):  # over flush_bytes, but held back while the batch is out
        w.frame(2.0 + i, 1, 0, 1, b"b" * 10)
    assert w.pending > 64
    w.put(w.compress(batch))
    w.close()
    assert [r.data[:1] for r in read_capture(path)] == [b"a"] + [b"b"] * 20


def test_file_header_is_the_construct_declaration(tmp_path: Path) -> None:
    from rmqgate.tools.capture import FileHeader

    path = tmp_path / "h.rmqcap"
    CaptureWriter(path, source="proxy:ns:9876", start_time=12.5).close()
    parsed = FileHeader.parse(path.read_bytes())
    assert (parsed.fields.version, parsed.fields.start_time_us, parsed.source) == (
        1,
        12_500_000,
        b"proxy:ns:9876",
    )
