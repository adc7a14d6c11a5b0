"""Stored-message codec: golden Java 4.9.8 store and captures, round trips, malformed input."""

from __future__ import annotations

import hashlib
import json
import mmap
import random
import struct
import sys
import tarfile
import zlib
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqgate.tools.pcap import read_frames
from rmqgate.wire import message as m
from rmqgate.wire.compression import compress_body, compression_flags, decompress_body
from rmqgate.wire.errors import CompressionUnavailable, MessageFormatError
from rmqgate.wire.message import MessageExt
from rmqgate.wire.message_batch import BatchEntry, decode_batch, encode_batch
from rmqgate.wire.message_const import (
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    MessageSysFlag,
    compression_type,
    reset_transaction,
    transaction_type,
)

STORE_TGZ = "java-4.9.8-store-clean.tgz"
STORE_MANIFEST = "java-4.9.8-store-clean.manifest.json"

# --------------------------------------------------------------------------------------------------
# Golden store written by the Java 4.9.8 broker


@pytest.fixture(scope="module")
def java_store(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("java-store")
    with tarfile.open(corpus / STORE_TGZ) as tar:
        tar.extractall(root, filter="data")
    return root / "storeA"


@pytest.fixture(scope="module")
def commitlog(java_store: Path) -> list[tuple[int, bytes, list[MessageExt]]]:
    """(file start offset, file bytes, records) per CommitLog file, in offset order."""
    out = []
    for path in sorted((java_store / "commitlog").iterdir()):
        data = path.read_bytes()
        out.append((int(path.name), data, list(m.iter_commitlog(data))))
    return out


def _all_records(commitlog: list[tuple[int, bytes, list[MessageExt]]]) -> list[tuple[int, bytes, MessageExt]]:
    return [(base, data, msg) for base, data, msgs in commitlog for msg in msgs]


def test_commitlog_files_are_records_then_an_end_of_file_blank(commitlog) -> None:
    assert len(commitlog) > 1, "the golden store must span several CommitLog files"
    for i, (base, data, msgs) in enumerate(commitlog):
        assert len(data) == 1024 * 1024
        pos = 0
        for msg in msgs:
            assert msg.commit_log_offset == base + pos, "physical offset is the record's CommitLog position"
            pos += msg.store_size
        total, magic = m.RECORD_PREFIX.unpack_from(data, pos)
        if i < len(commitlog) - 1:
            assert magic == m.BLANK_MAGIC
            assert total == len(data) - pos, "the BLANK record announces the rest of the file"
            assert total >= m.END_FILE_MIN_BLANK_LENGTH
            assert m.encode_blank(total) == data[pos : pos + 8]
            assert base + len(data) == commitlog[i + 1][0]
        else:
            assert (total, magic) == (0, 0), "the last file ends in its unwritten zero tail"


def test_every_record_matches_the_manifest(corpus: Path, commitlog) -> None:
    manifest = json.loads((corpus / STORE_MANIFEST).read_text())
    expected = {
        (topic, int(queue), e["offset"]): e
        for topic, queues in manifest.items()
        for queue, entries in queues.items()
        for e in entries
    }
    found = {}
    for _, _, msg in _all_records(commitlog):
        key = (msg.topic, msg.queue_id, msg.queue_offset)
        assert key not in found, f"duplicate record {key}"
        found[key] = msg
    assert found.keys() == expected.keys()
    for key, e in expected.items():
        msg = found[key]
        assert msg.commit_log_offset == e["phys"], key
        assert hashlib.sha1(msg.body).hexdigest() == e["sha1"], key
        assert msg.keys == e["keys"], key
        assert msg.tags == e["tags"], key
        assert msg.sys_flag == e["sysflag"], key
        assert msg.magic == m.MAGIC_V1
        assert msg.body_crc == m.body_crc(msg.body)


def test_every_record_reencodes_to_identical_bytes(commitlog) -> None:
    for base, data, msg in _all_records(commitlog):
        pos = msg.commit_log_offset - base
        original = data[pos : pos + msg.store_size]
        assert m.encode_message(msg) == original
        # Also through the CRC-checking, zero-copy decoder and from the middle of the buffer.
        again = m.decode_message(data, pos, check_crc=True, copy_body=False)
        assert bytes(m.encode_message(again)) == original


def test_java_broker_properties_order_is_reproduced(commitlog) -> None:
    """The 4.9.8 broker re-serialises single sends from its HashMap; batch entries keep the client's
    string with CLUSTER appended, so only those need the stored string kept verbatim."""
    kinds = Counter()
    for _, _, msg in _all_records(commitlog):
        java = m.format_properties(msg.properties, java_order=True)
        if msg.topic.startswith("LabBatch"):
            batch_level = m.format_properties({"WAIT": "true", "CLUSTER": "DefaultCluster"}, java_order=True)
            assert msg.properties_raw.endswith("\x02" + batch_level)
            kinds["batch"] += 1
        else:
            assert java == msg.properties_raw, msg
            kinds["single"] += 1
    assert kinds["single"] > 1000
    assert kinds["batch"] > 0


def test_consume_queue_tags_codes_are_java_string_hashes(java_store: Path, commitlog) -> None:
    by_phys = {msg.commit_log_offset: msg for _, _, msg in _all_records(commitlog)}
    unit = struct.Struct(">qiq")  # ConsumeQueue unit, read independently of the store package
    checked = 0
    for qfile in (java_store / "consumequeue").glob("*/*/*"):
        data = qfile.read_bytes()
        for pos in range(0, len(data) - unit.size + 1, unit.size):
            phys, size, tags_code = unit.unpack_from(data, pos)
            if size == 0 or phys not in by_phys:
                continue
            msg = by_phys[phys]
            assert size == msg.store_size
            assert tags_code == m.tags_code(msg.tags)
            checked += 1
    assert checked == len(by_phys)


def test_construct_declaration_parses_what_the_fast_decoder_reads(commitlog) -> None:
    for base, data, msg in _all_records(commitlog)[::97]:
        pos = msg.commit_log_offset - base
        parsed = m.StoredMessage.parse(data[pos : pos + msg.store_size])
        _assert_same_as_declaration(parsed, msg)


def _assert_same_as_declaration(parsed, msg: MessageExt) -> None:
    for name in (
        "total_size",
        "magic",
        "body_crc",
        "queue_id",
        "flag",
        "queue_offset",
        "commit_log_offset",
        "sys_flag",
        "born_timestamp",
        "born_host",
        "born_port",
        "store_timestamp",
        "store_host",
        "store_port",
        "reconsume_times",
        "prepared_transaction_offset",
        "body",
        "topic",
    ):
        ours = {"total_size": msg.store_size}.get(name, getattr(msg, name, None))
        assert parsed[name] == ours, name
    assert parsed.properties == msg.properties_raw


# --------------------------------------------------------------------------------------------------
# Golden captures: PULL bodies, batch bodies, compressed bodies


def test_pull_bodies_in_captures_are_concatenated_stored_records(corpus: Path) -> None:
    pulls = messages = compressed = 0
    for pcap in sorted(corpus.glob("pcap*/*.pcap")):
        requests = {}
        for frame in read_frames(pcap):
            cmd = frame.command
            if cmd is None:
                continue
            key = (frame.conn_id, cmd.opaque)
            if not cmd.flag & 1:
                requests[key] = cmd.code
                continue
            if requests.get(key) not in (11, 361) or cmd.code != 0 or not cmd.body:
                continue
            records = list(m.iter_messages(cmd.body))
            assert b"".join(m.encode_message(r) for r in records) == cmd.body, pcap.name
            for r in records:
                assert r.body_crc == m.body_crc(r.body)
                if r.sys_flag & MessageSysFlag.COMPRESSED:
                    assert len(decompress_body(r.body, r.sys_flag)) >= 4096  # compressMsgBodyOverHowmuch
                    compressed += 1
            pulls += 1
            messages += len(records)
    assert pulls > 100 and messages > pulls
    assert compressed > 0, "i_LargeBody captures carry zlib-compressed bodies"


def test_batch_bodies_in_captures_round_trip(corpus: Path) -> None:
    batches = 0
    for pcap in sorted(corpus.glob("pcap*/*.pcap")):
        for frame in read_frames(pcap):
            cmd = frame.command
            if cmd is None or cmd.flag & 1 or not cmd.body:
                continue
            batch_flag = cmd.ext_field("m", "").strip('"')
            if cmd.code == 320 or (cmd.code == 310 and batch_flag in ("1", "true")):
                entries = decode_batch(cmd.body)
                assert entries and all(e.uniq_key for e in entries), pcap.name
                assert len({e.uniq_key for e in entries}) == len(entries), "each entry has its own UNIQ_KEY"
                assert encode_batch(entries) == cmd.body
                batches += 1
    assert batches >= 2


# --------------------------------------------------------------------------------------------------
# Layout facts and small behaviours


def test_patch_positions_match_rocketmq() -> None:
    assert (m.MAGIC_POS, m.FLAG_POS, m.QUEUE_OFFSET_POS, m.PHYSICAL_OFFSET_POS, m.SYSFLAG_POS) == (
        4,
        16,
        20,
        28,
        36,
    )
    assert m.store_timestamp_pos(0) == m.STORE_TIMESTAMP_POS == 56
    assert m.store_timestamp_pos(MessageSysFlag.STOREHOST_V6) == 56
    assert m.store_timestamp_pos(MessageSysFlag.BORNHOST_V6) == 68
    assert m.record_length(0, 0, 0) == 91  # CommitLog.calMsgLength(0, 0, 0, 0)
    assert m.record_length(10, 5, 7, born_v6=True, store_v6=True, v2=True) == 91 + 24 + 1 + 22


@pytest.mark.parametrize("host_flags", [0, 0x10, 0x20, 0x30])
def test_patch_record_writes_offsets_and_store_time(host_flags: int) -> None:
    msg = _sample(sys_flag=host_flags)
    buf = bytearray(b"\xee" * 7) + m.encode_message(msg)
    m.patch_record(buf, 7, 1234, 987654321, 1_700_000_000_123)
    out = m.decode_message(buf, 7, check_crc=True)
    assert (out.queue_offset, out.commit_log_offset, out.store_timestamp) == (
        1234,
        987654321,
        1_700_000_000_123,
    )
    assert (out.born_timestamp, out.body, out.properties) == (msg.born_timestamp, msg.body, msg.properties)


def test_body_crc_masks_the_sign_bit_like_utilall() -> None:
    body = next(b for b in (bytes([i]) * 3 for i in range(256)) if zlib.crc32(b) & 0x80000000)
    assert m.body_crc(body) == zlib.crc32(body) - 0x80000000
    assert m.body_crc(b"") == 0


def test_long_topic_uses_v2_and_short_topic_v1() -> None:
    short = m.encode_message(_sample(topic="t" * 127))
    long = m.encode_message(_sample(topic="t" * 128))
    assert struct.unpack_from(">I", short, 4)[0] == m.MAGIC_V1
    assert struct.unpack_from(">I", long, 4)[0] == m.MAGIC_V2
    assert len(long) == len(short) + 2
    assert m.decode_message(long).topic == "t" * 128
    wide = "é" * 64  # 128 UTF-8 bytes although only 64 characters
    assert m.decode_message(m.encode_message(_sample(topic=wide))).magic == m.MAGIC_V2


def test_changed_properties_are_not_hidden_by_the_decoded_string() -> None:
    msg = m.decode_message(m.encode_message(_sample()))
    msg.properties[PROPERTY_RETRY_TOPIC] = "%RETRY%g"
    out = m.decode_message(m.encode_message(msg))
    assert out.properties[PROPERTY_RETRY_TOPIC] == "%RETRY%g"


def _props_of(record: bytes | bytearray) -> str:
    return m.decode_message(bytes(record)).properties_raw or ""


def test_decoded_properties_string_is_written_verbatim_only_while_it_parses_to_the_dict() -> None:
    raw = "b\x012\x02a\x011\x02junk\x02\x02"  # a pair without separator and empty pairs: skipped on parse
    msg = _sample(properties=m.parse_properties(raw))
    msg.properties_raw = raw
    assert _props_of(m.encode_message(msg)) == raw
    msg.properties["c"] = "3"  # changed in place, properties_raw left as it was
    assert _props_of(m.encode_message(msg)) == "b\x012\x02a\x011\x02c\x013"
    del msg.properties["c"]
    assert _props_of(m.encode_message(msg)) == raw  # equal to the parsed string again
    msg.properties["a"] = "changed"
    buf = memoryview(mmap.mmap(-1, 4096))
    n = m.encode_message_into(msg, buf, 100, len(buf))
    assert _props_of(buf[100 : 100 + n]) == "b\x012\x02a\x01changed"
    canonical = _sample()
    canonical.properties_raw = m.format_properties(canonical.properties)
    again = m.decode_message(m.encode_message(canonical))
    again.properties.pop("TAGS")
    assert m.decode_message(m.encode_message(again)).properties == {"KEYS": "k1", "UNIQ_KEY": "ABC"}


def test_property_values_none_skipped_and_non_strings_formatted() -> None:
    props = {"a": None, "b": 5, "c": "x"}
    assert m.format_properties(props) == "b\x015\x02c\x01x"
    assert _props_of(m.encode_message(_sample(properties=props))) == "b\x015\x02c\x01x"


def test_topic_parts_cache_is_bounded_and_keeps_records_exact() -> None:
    n = m._TOPIC_PARTS_MAX + 10
    for i in range(n):
        topic = f"T{i}" if i % 2 else "é" * (64 + i % 3)  # v1 and (by UTF-8 length) v2 topics
        msg = _sample(topic=topic)
        out = m.decode_message(m.encode_message(msg))
        assert out.topic == topic and out.magic == (m.MAGIC_V1 if i % 2 else m.MAGIC_V2)
        assert len(m._TOPIC_PARTS) <= m._TOPIC_PARTS_MAX
    huge = "h" * (m._TOPIC_PARTS_MAX_BYTES + 1)
    assert m.decode_message(m.encode_message(_sample(topic=huge))).topic == huge
    assert huge not in m._TOPIC_PARTS  # long topics are encoded each time, not kept
    # a message that already says v2 keeps v2 for a short (cached) topic
    m.encode_message(_sample(topic="T1"))
    forced = m.decode_message(m.encode_message(_sample(topic="T1", magic=m.MAGIC_V2)))
    assert (forced.topic, forced.magic) == ("T1", m.MAGIC_V2)


def test_encode_errors_name_the_field() -> None:
    with pytest.raises(MessageFormatError, match="topic") as bad_topic:
        m.encode_message(_sample(topic="bad\ud800"))
    assert "properties" not in str(bad_topic.value)  # the store maps 'properties' to its own status
    assert "bad\ud800" not in m._TOPIC_PARTS
    with pytest.raises(MessageFormatError, match="topic: 40000 UTF-8 bytes"):
        m.encode_message(_sample(topic="t" * 40000))
    with pytest.raises(MessageFormatError, match="properties"):
        m.encode_message(_sample(properties={"k": "bad\ud800"}))
    with pytest.raises(MessageFormatError, match="properties: 40002 UTF-8 bytes"):
        m.encode_message(_sample(properties={"k": "v" * 40000}))
    with pytest.raises(MessageFormatError, match="out of range"):
        m.encode_message(_sample(born_port=2**31))


def test_a_record_that_does_not_fit_changes_nothing() -> None:
    msg = _sample()
    before = (msg.store_size, msg.body_crc, msg.magic)
    buf = bytearray(64)
    assert m.encode_message_into(msg, buf, 0, len(buf)) < 0
    assert buf == bytearray(64) and (msg.store_size, msg.body_crc, msg.magic) == before


def test_properties_format_matches_rocketmq() -> None:
    assert m.format_properties({"KEYS": "a b", "TAGS": "T", "NULL": None}) == "KEYS\x01a b\x02TAGS\x01T"
    assert m.format_properties({}) == ""
    # Java skips: no separator, empty key, empty value, segments shorter than 3 chars.
    assert m.parse_properties("a\x01b\x02nosep\x02\x01v\x02k\x01\x02x\x01y\x01z\x02\x02") == {
        "a": "b",
        "x": "y\x01z",
    }


def test_offset_msg_id_examples() -> None:
    msg_id = m.encode_offset_msg_id(bytes([127, 0, 0, 1]), 10911, 0x1234)
    assert msg_id == "7F00000100002A9F0000000000001234"
    assert m.decode_offset_msg_id(msg_id) == (bytes([127, 0, 0, 1]), 10911, 0x1234)
    assert m.decode_offset_msg_id(msg_id.lower()) == (bytes([127, 0, 0, 1]), 10911, 0x1234)
    v6 = m.encode_offset_msg_id(bytes(range(16)), 1, 2)
    assert len(v6) == 56 and v6 == v6.upper()


def test_java_string_hash_known_values() -> None:
    assert m.java_string_hash("") == 0
    assert m.java_string_hash("hello") == 99162322
    assert m.java_string_hash("Aa") == m.java_string_hash("BB") == 2112
    assert m.java_string_hash("polygenelubricants") == -(2**31)
    assert m.java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # a surrogate pair
    assert m.tags_code(None) == m.tags_code("") == 0


def _java_hash_loop(s: str) -> int:
    """String.hashCode as Java's loop states it: h = 31*h + c over UTF-16 code units, int32."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("\ud800\udfff\U0001f600"), max_size=700),
    st.data(),
)
def test_java_string_hash_matches_the_loop_and_chains_prefixes(s: str, data: st.DataObject) -> None:
    assert m.java_string_hash(s) == _java_hash_loop(s)
    cut = data.draw(st.integers(0, len(s)))
    assert m.java_string_hash(s[cut:], m.java_string_hash(s[:cut])) == _java_hash_loop(s)
    try:
        raw = s.encode()
    except UnicodeEncodeError:  # lone surrogates: no UTF-8 bytes to hash
        return
    assert m.java_string_hash(raw) == _java_hash_loop(s)  # bytes hash as the text they encode
    head = s[:cut].encode()
    assert m.java_string_hash(raw[len(head) :], m.java_string_hash(head)) == _java_hash_loop(s)


def test_sys_flag_helpers() -> None:
    flag = MessageSysFlag.COMPRESSED | MessageSysFlag.TRANSACTION_PREPARED | MessageSysFlag.ZSTD
    assert transaction_type(flag) == MessageSysFlag.TRANSACTION_PREPARED
    reset = reset_transaction(flag, MessageSysFlag.TRANSACTION_COMMIT)
    assert reset == MessageSysFlag.COMPRESSED | MessageSysFlag.TRANSACTION_COMMIT | MessageSysFlag.ZSTD
    assert compression_type(MessageSysFlag.COMPRESSED) == MessageSysFlag.ZLIB
    assert compression_flags("zstd") == 0x201


# --------------------------------------------------------------------------------------------------
# Compression


@pytest.mark.parametrize("kind", ["zlib", "zstd", "lz4"])
def test_compression_round_trip(kind: str) -> None:
    body = b"RocketMQ " * 1000
    packed = compress_body(body, kind, 5)
    assert len(packed) < len(body)
    assert decompress_body(packed, compression_flags(kind)) == body


def test_legacy_type_zero_means_zlib_and_uncompressed_passes_through() -> None:
    body = b"x" * 5000
    assert decompress_body(zlib.compress(body, 5), MessageSysFlag.COMPRESSED) == body
    assert decompress_body(body, MessageSysFlag.ZSTD) == body  # type bits without COMPRESSED


def test_lz4_uses_the_lz4_java_frame_defaults() -> None:
    packed = compress_body(b"a" * 100, MessageSysFlag.LZ4)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    assert packed[4] == 0x60  # FLG: version 01, independent blocks, no checksums, no content size
    assert packed[5] == 0x70  # BD: 4 MiB blocks


def test_zstd_stream_without_content_size_decompresses() -> None:
    import zstandard

    cobj = zstandard.ZstdCompressor(level=5, write_content_size=False).compressobj()
    packed = cobj.compress(b"z" * 9000) + cobj.flush()
    assert decompress_body(packed, compression_flags("zstd")) == b"z" * 9000


def test_missing_lz4_raises_compression_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lz4", None)
    monkeypatch.setitem(sys.modules, "lz4.frame", None)
    with pytest.raises(CompressionUnavailable, match="lz4"):
        decompress_body(b"\x04\x22\x4d\x18", compression_flags("lz4"))
    with pytest.raises(CompressionUnavailable, match="lz4"):
        compress_body(b"x", "lz4")
    assert decompress_body(zlib.compress(b"ok"), MessageSysFlag.COMPRESSED) == b"ok"


@pytest.mark.parametrize("kind", ["zlib", "zstd", "lz4"])
def test_corrupt_compressed_body_is_a_format_error(kind: str) -> None:
    packed = compress_body(b"payload " * 100, kind)
    for bad in (b"", b"garbage!", packed[: len(packed) // 2]):
        with pytest.raises(MessageFormatError):
            decompress_body(bad, compression_flags(kind))


def test_unknown_compression_type_is_a_format_error() -> None:
    with pytest.raises(MessageFormatError, match="compression"):
        decompress_body(b"x", MessageSysFlag.COMPRESSED | 0x400)


# --------------------------------------------------------------------------------------------------
# Property-based round trips

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_key = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), min_size=1, max_size=20
)
_value = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x02"), min_size=1, max_size=40
)
_properties = st.dictionaries(_key, _value, max_size=8)
_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def _messages(draw) -> MessageExt:
    born_v6 = draw(st.booleans())
    store_v6 = draw(st.booleans())
    sys_flag = draw(st.integers(0, 0x7FF)) & ~m._HOST_FLAGS
    sys_flag |= (MessageSysFlag.BORNHOST_V6 if born_v6 else 0) | (
        MessageSysFlag.STOREHOST_V6 if store_v6 else 0
    )
    topic_chars = st.characters(blacklist_categories=("Cs",))
    return MessageExt(
        topic=draw(
            st.one_of(st.text(topic_chars, max_size=20), st.text(topic_chars, min_size=100, max_size=300))
        ),
        body=draw(st.binary(max_size=300)),
        flag=draw(_int32),
        queue_id=draw(_int32),
        queue_offset=draw(_int64),
        commit_log_offset=draw(_int64),
        sys_flag=sys_flag,
        born_timestamp=draw(_int64),
        born_host=draw(st.binary(min_size=16 if born_v6 else 4, max_size=16 if born_v6 else 4)),
        born_port=draw(_int32),
        store_timestamp=draw(_int64),
        store_host=draw(st.binary(min_size=16 if store_v6 else 4, max_size=16 if store_v6 else 4)),
        store_port=draw(_int32),
        reconsume_times=draw(_int32),
        prepared_transaction_offset=draw(_int64),
        properties=draw(_properties),
    )


@given(_messages())
@settings(max_examples=300, deadline=None)
def test_stored_message_round_trip(msg: MessageExt) -> None:
    record = m.encode_message(msg)
    assert len(record) == msg.store_size
    topic_len = len(msg.topic.encode())
    assert msg.magic == (m.MAGIC_V2 if topic_len > 127 else m.MAGIC_V1)
    assert msg.store_size == m.record_length(
        len(msg.body),
        topic_len,
        len(m.format_properties(msg.properties).encode()),
        born_v6=bool(msg.sys_flag & MessageSysFlag.BORNHOST_V6),
        store_v6=bool(msg.sys_flag & MessageSysFlag.STOREHOST_V6),
        v2=topic_len > 127,
    )
    out = m.decode_message(bytes(record), check_crc=True)
    assert out == msg
    assert m.encode_message(out) == record
    _assert_same_as_declaration(m.StoredMessage.parse(bytes(record)), out)
    two = list(m.iter_messages(record + record))
    assert two == [msg, msg]
    header_only = m.decode_message(record, with_body=False)
    assert header_only.body == b"" and header_only.properties == msg.properties


@given(_properties)
def test_properties_round_trip(props: dict[str, str]) -> None:
    text = m.format_properties(props)
    assert m.parse_properties(text) == props
    assert m.format_properties(m.parse_properties(text)) == text
    java = m.format_properties(props, java_order=True)
    assert m.parse_properties(java) == props
    assert sorted(java.split("\x02")) == sorted(text.split("\x02")) if props else java == ""


def _java_string2message_properties(s: str) -> dict[str, str]:
    """Independent index-based transcription of MessageDecoder.string2messageProperties semantics."""
    out, index, n = {}, 0, len(s)
    while index < n:
        new = s.find("\x02", index)
        if new < 0:
            new = n
        if new - index >= 3:
            kv = s.find("\x01", index)
            if index < kv < new - 1:
                out[s[index:kv]] = s[kv + 1 : new]
        index = new + 1
    return out


@given(st.text(st.sampled_from("ab\x01\x02é"), max_size=30))
@settings(max_examples=500)
def test_properties_parser_skips_malformed_pairs_like_java(s: str) -> None:
    assert m.parse_properties(s) == _java_string2message_properties(s)


_entries = st.builds(
    BatchEntry,
    flag=_int32,
    body=st.binary(max_size=100),
    properties=st.dictionaries(_key, _value, max_size=5).map(lambda d: {**d, PROPERTY_UNIQ_KEY: "ID"}),
)


@given(st.lists(_entries, max_size=6))
def test_batch_round_trip(entries: list[BatchEntry]) -> None:
    for i, entry in enumerate(entries):
        entry.properties[PROPERTY_UNIQ_KEY] = f"UNIQ{i}"
    body = encode_batch(entries)
    out = decode_batch(body)
    assert out == entries
    assert [e.uniq_key for e in out] == [f"UNIQ{i}" for i in range(len(entries))]
    assert encode_batch(out) == body


@given(st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16)), _int32, _int64)
def test_offset_msg_id_round_trip(address: bytes, port: int, offset: int) -> None:
    msg_id = m.encode_offset_msg_id(address, port, offset)
    assert len(msg_id) == (32 if len(address) == 4 else 56)
    assert msg_id == msg_id.upper()
    assert m.decode_offset_msg_id(msg_id) == (address, port, offset)


@given(st.text(max_size=30))
def test_java_string_hash_over_utf16_units(s: str) -> None:
    units = struct.unpack(
        f">{len(s.encode('utf-16-be', 'surrogatepass')) // 2}H", s.encode("utf-16-be", "surrogatepass")
    )
    expected = sum(u * pow(31, len(units) - 1 - i, 2**32) for i, u in enumerate(units)) % 2**32
    h = m.java_string_hash(s)
    assert -(2**31) <= h < 2**31
    assert h % 2**32 == expected


# --------------------------------------------------------------------------------------------------
# Malformed input: MessageFormatError and nothing else


def _sample(**kw) -> MessageExt:
    base = dict(
        topic="TopicTest",
        body=b"hello world",
        queue_id=1,
        born_timestamp=1_700_000_000_000,
        born_host=b"\x7f\x00\x00\x01",
        born_port=50000,
        store_timestamp=1_700_000_000_001,
        store_host=b"\x7f\x00\x00\x01",
        store_port=10911,
        properties={"KEYS": "k1", "TAGS": "TagA", "UNIQ_KEY": "ABC"},
    )
    base.update(kw)
    sys_flag = base.get("sys_flag", 0)
    if sys_flag & MessageSysFlag.BORNHOST_V6 and "born_host" not in kw:
        base["born_host"] = bytes(15) + b"\x01"
    if sys_flag & MessageSysFlag.STOREHOST_V6 and "store_host" not in kw:
        base["store_host"] = bytes(15) + b"\x01"
    return MessageExt(**base)


def _record(**kw) -> bytes:
    return bytes(m.encode_message(_sample(**kw)))


def test_every_truncation_is_a_format_error() -> None:
    record = _record()
    for cut in range(len(record)):
        with pytest.raises(MessageFormatError):
            m.decode_message(record[:cut])
    two = record + record
    for offset in (-len(record), -1, len(two), len(two) + 10, len(record) + 1):
        with pytest.raises(MessageFormatError):
            m.decode_message(two, offset)


@pytest.mark.parametrize("delta", [-3, -1, 1, 2])
def test_wrong_total_size_is_a_format_error(delta: int) -> None:
    record = bytearray(_record()) + b"\x00" * 4
    struct.pack_into(">i", record, 0, len(record) - 4 + delta)
    with pytest.raises(MessageFormatError):
        m.decode_message(record)


def test_bad_magic_is_a_format_error() -> None:
    record = bytearray(_record())
    struct.pack_into(">I", record, 4, m.BLANK_MAGIC)
    with pytest.raises(MessageFormatError, match="magic"):
        m.decode_message(record)


def test_bad_property_length_is_a_format_error() -> None:
    record = bytearray(_record())
    props_pos = len(record) - len("KEYS\x01k1\x02TAGS\x01TagA\x02UNIQ_KEY\x01ABC") - 2
    for bad in (-1, 0, 5, 32767):
        struct.pack_into(">h", record, props_pos, bad)
        with pytest.raises(MessageFormatError):
            m.decode_message(record)


def test_bad_utf8_is_a_format_error() -> None:
    record = bytearray(_record(topic="abc"))
    topic_pos = record.index(b"\x03abc") + 1
    record[topic_pos] = 0xFF
    with pytest.raises(MessageFormatError, match="UTF-8"):
        m.decode_message(record)
    record = bytearray(_record())
    record[-1] = 0xC3  # a dangling lead byte at the end of the properties
    with pytest.raises(MessageFormatError, match="UTF-8"):
        m.decode_message(record)


def test_negative_body_and_topic_lengths_are_format_errors() -> None:
    record = bytearray(_record())
    struct.pack_into(">i", record, m._FIXED[0].size - 4, -5)
    with pytest.raises(MessageFormatError):
        m.decode_message(record)
    record = bytearray(_record(topic="abc"))
    record[record.index(b"\x03abc")] = 0x83  # a negative signed byte
    with pytest.raises(MessageFormatError):
        m.decode_message(record)


def test_crc_mismatch_only_when_checked() -> None:
    record = bytearray(_record())
    record[m.BODY_CRC_POS + 3] ^= 1
    assert m.decode_message(record).body == b"hello world"
    with pytest.raises(MessageFormatError, match="CRC"):
        m.decode_message(record, check_crc=True)


@given(_messages(), st.integers(0, 64))
@settings(max_examples=200, deadline=None)
def test_encode_message_into_writes_the_same_bytes_total_size_last(msg: MessageExt, pad: int) -> None:
    record = m.encode_message(msg)
    buf = bytearray(b"\xee" * (pad + len(record) + 8))
    assert m.encode_message_into(msg, buf, pad, pad + len(record) - 1) == -len(record)
    assert buf == bytearray(b"\xee" * len(buf))  # did not fit: nothing written
    assert m.encode_message_into(msg, buf, pad, len(buf)) == len(record) == msg.store_size
    assert buf[pad : pad + len(record)] == record
    assert buf[:pad] == b"\xee" * pad and buf[pad + len(record) :] == b"\xee" * 8


def test_encode_message_into_a_bad_field_leaves_no_total_size() -> None:
    buf = bytearray(512)
    with pytest.raises(MessageFormatError):
        m.encode_message_into(_sample(queue_offset=2**63), buf, 0, len(buf))
    assert buf[:4] == bytes(4)  # a reader or a recovery scan sees no record here


def test_encode_rejects_inconsistent_messages() -> None:
    with pytest.raises(MessageFormatError, match="born host"):
        m.encode_message(_sample(born_host=bytes(16)))
    with pytest.raises(MessageFormatError, match="store host"):
        m.encode_message(_sample(sys_flag=MessageSysFlag.STOREHOST_V6, store_host=b"\x7f\x00\x00\x01"))
    with pytest.raises(MessageFormatError):
        m.encode_message(_sample(topic="t" * 40000))
    with pytest.raises(MessageFormatError):
        m.encode_message(_sample(topic="bad\ud800"))
    with pytest.raises(MessageFormatError):
        m.encode_message(_sample(queue_offset=2**63))
    with pytest.raises(MessageFormatError):
        m.encode_message(_sample(properties={"k": "v" * 40000}))


def test_malformed_batches_and_ids_are_format_errors() -> None:
    body = encode_batch([BatchEntry(0, b"abc", {"UNIQ_KEY": "X"})])
    for cut in range(1, len(body)):
        with pytest.raises(MessageFormatError):
            decode_batch(body[:cut])
    bad = bytearray(body)
    struct.pack_into(">i", bad, 0, len(body) + 1)
    with pytest.raises(MessageFormatError):
        decode_batch(bad)
    for msg_id in ("", "7F000001", "Z" * 32, "7F00000100002A9F000000000000123", " " * 32):
        with pytest.raises(MessageFormatError):
            m.decode_offset_msg_id(msg_id)
    with pytest.raises(MessageFormatError):
        m.encode_offset_msg_id(b"\x01\x02\x03", 1, 1)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_else(data: bytes) -> None:
    for call in (m.decode_message, decode_batch, lambda d: list(m.iter_messages(d))):
        try:
            call(data)
        except MessageFormatError:
            pass
    _check_index_scan(data)


def _check_index_scan(data: bytes) -> None:
    """scan_index_records on any bytes: no exception, a stop inside the buffer, and on a buffer that
    is exactly one record decode_message accepts, what that decoder reads."""
    scan = m.scan_index_records(data, 0, len(data), 10)
    assert 0 <= scan.end <= len(data)
    positions = [r[0] for r in scan.records]
    assert positions == sorted(set(positions)) and all(p < scan.end for p in positions)
    try:
        msg = m.decode_message(data)
    except MessageFormatError:
        return
    if msg.store_size == len(data):
        want = [(0, *_index_view(msg)[1:])] if msg.keys or msg.properties.get("UNIQ_KEY") else []
        assert scan == m.IndexScan(want, len(data), msg.store_timestamp, None)


def test_bounded_mutation_fuzz_of_valid_records() -> None:
    rng = random.Random(20241122)
    seeds = [
        _record(),
        _record(sys_flag=0x30, topic="t" * 130),
        _record(body=b""),
        encode_batch([BatchEntry(1, b"x" * 20, {"UNIQ_KEY": "A"}), BatchEntry(2, b"", {"k": "é"})]),
    ]
    outcomes = Counter()
    for _ in range(5000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(3)
            if op == 0 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif op == 1 and data:
                del data[rng.randrange(len(data)) :]
            else:
                data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        for call in (m.decode_message, decode_batch, lambda d: list(m.iter_messages(d))):
            try:
                call(bytes(data))
                outcomes["ok"] += 1
            except MessageFormatError:
                outcomes["error"] += 1
        _check_index_scan(bytes(data))
    assert outcomes["ok"] and outcomes["error"]


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview, lambda b: memoryview(bytearray(b))])
def test_decode_accepts_any_buffer(kind) -> None:
    record = _record(topic="é-topic", properties={"k": "値"})
    buf = kind(record)
    copied = m.decode_message(buf)
    view = m.decode_message(buf, copy_body=False)
    assert type(copied.body) is bytes and isinstance(view.body, memoryview)
    assert copied == view == m.decode_message(record)
    assert bytes(m.encode_message(view)) == record
    assert copied.born_host == b"\x7f\x00\x00\x01" and type(copied.born_host) is bytes


def _index_view(msg: MessageExt) -> tuple[int, int, int, bytes, bytes | None, bytes | None]:
    """What scan_index_records should report of a message, from the full decoder."""
    keys, uniq = msg.properties.get("KEYS"), msg.properties.get("UNIQ_KEY")
    return (
        msg.commit_log_offset,
        msg.sys_flag,
        msg.store_timestamp,
        msg.topic.encode(),
        keys.encode() if keys else None,
        uniq.encode() if uniq else None,
    )


def test_scan_index_records_reads_the_java_store_as_decode_message_does(commitlog) -> None:
    for base, data, msgs in commitlog:
        want = [_index_view(msg) for msg in msgs if "KEYS" in msg.properties or "UNIQ_KEY" in msg.properties]
        assert want, "the golden store has messages with keys"
        got, pos = [], 0
        while True:  # small chunks: each call resumes where the last stopped
            scan = m.scan_index_records(data, pos, len(data), 3)
            got += [(base + p, *rest) for p, *rest in scan.records]
            pos = scan.end
            if scan.stopped is not None or scan.end >= len(data) or not scan.last_store_timestamp:
                break
        assert got == want
        assert scan.last_store_timestamp in (0, msgs[-1].store_timestamp)
        if base != commitlog[-1][0]:
            assert (scan.stopped, scan.end) == ("blank", sum(msg.store_size for msg in msgs))


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["KEYS", "UNIQ_KEY", "XKEYS", "KEYSX", "", "TAGS"]),
            st.text(alphabet="ab\x01 Ké", max_size=4),
        ),
        max_size=6,
    )
)
def test_scan_index_records_finds_the_keys_parse_properties_finds(pairs: list[tuple[str, str]]) -> None:
    text = "\x02".join(f"{k}\x01{v}" if k or v else "" for k, v in pairs)
    props = m.parse_properties(text)
    msg = MessageExt("T", body=b"b", properties=props, properties_raw=text)
    rec = bytes(m.encode_message(msg))
    assert m.decode_message(rec).properties_raw == text
    scan = m.scan_index_records(rec, 0, len(rec), 10)
    keys, uniq = props.get("KEYS"), props.get("UNIQ_KEY")
    if keys or uniq:
        assert scan.records == [(0, 0, 0, b"T", keys and keys.encode(), uniq and uniq.encode())]
    else:
        assert scan.records == []
    assert (scan.end, scan.stopped) == (len(rec), None)


def test_scan_index_records_host_widths_v2_topics_limits_and_damage() -> None:
    v6 = MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6
    buf = bytearray()
    want = []
    for i, (sys_flag, born, store, topic, props) in enumerate(
        [
            (0, b"\x7f\x00\x00\x01", b"\x0a\x00\x00\x02", "T", {"KEYS": "a b", "UNIQ_KEY": "U1"}),
            (v6, bytes(16), bytes(range(16)), "Tv6", {"KEYS": "k"}),
            (MessageSysFlag.BORNHOST_V6, bytes(16), bytes(4), "Tb6", {"UNIQ_KEY": "U3", "TAGS": "t"}),
            (MessageSysFlag.TRANSACTION_ROLLBACK, b"\x01\x02\x03\x04", bytes(4), "L" * 200, {"KEYS": "é"}),
            (0, bytes(4), bytes(4), "NoKeys", {"TAGS": "x"}),
        ]
    ):
        msg = MessageExt(
            topic,
            body=b"x" * (300 + i),
            sys_flag=sys_flag,
            born_host=born,
            store_host=store,
            store_timestamp=1_700_000_000_123 + i,
            commit_log_offset=len(buf),
            properties=props,
        )
        buf += m.encode_message(msg)
        if "KEYS" in props or "UNIQ_KEY" in props:
            want.append(_index_view(m.decode_message(buf, msg.commit_log_offset)))
    records_end = len(buf)
    scan = m.scan_index_records(buf, 0, records_end, 100)
    assert scan == m.IndexScan(want, records_end, 1_700_000_000_127, None)
    assert m.scan_index_records(buf, 0, records_end, 2) == m.IndexScan(
        want[:2], want[2][0], 1_700_000_000_124, None
    )
    # the end-of-file BLANK record, also when it is all that is left of the segment
    for tail in (200, 8):
        seg = bytes(buf) + m.encode_blank(tail) + bytes(tail - 8)
        assert m.scan_index_records(seg, 0, len(seg), 100) == m.IndexScan(
            want, records_end, 1_700_000_000_127, "blank"
        )
    # a torn last record: what came before is reported, and where and why the scan stopped
    scan = m.scan_index_records(buf[:-1], 0, records_end, 100)
    assert scan.records == want and scan.end < records_end and "offset" in (scan.stopped or "")
    bad = bytearray(buf)
    struct.pack_into(">i", bad, want[1][0], 5000)  # the second record's total size lies
    scan = m.scan_index_records(bad, 0, records_end, 100)
    assert scan.records == want[:1] and scan.end == want[1][0] and "disagree" in (scan.stopped or "")


def test_detached_copy_owns_its_body_and_properties_and_keeps_the_string_as_read() -> None:
    raw_props = "B\x012\x02A\x011"  # not the dict's own order: written back verbatim while it matches
    rec = m.encode_message(
        MessageExt("T", b"body", properties={"B": "2", "A": "1"}, properties_raw=raw_props)
    )
    buf = bytearray(rec)
    stored = m.decode_message(memoryview(buf), 0)
    assert stored.properties_raw == raw_props and stored.store_size == len(rec)
    copy = stored.detached(topic="U", queue_id=3)
    buf[:] = bytes(len(buf))  # the mapped file is reused: the copy must not change
    assert (copy.topic, copy.queue_id, bytes(copy.body), copy.store_size) == ("U", 3, b"body", 0)
    assert type(copy.body) is bytes and copy.properties is not stored.properties
    assert m.decode_message(m.encode_message(copy), 0).properties_raw == raw_props
    copy.properties["C"] = "3"  # a changed dict is written as the dict says
    assert m.decode_message(m.encode_message(copy), 0).properties == {"B": "2", "A": "1", "C": "3"}


def test_record_properties_read_like_parse_properties_and_keep_few_names() -> None:
    text = "a\x01first\x02TAGS\x01x\x02a\x01\x02b\x01é"
    props = m.RecordProperties(text.encode())
    assert props.get("a") == "first"  # the last pair with a value, as parse_properties keeps it
    assert props.get("TAGS") == "x" and props.get("b") == "é" and props.get("AGS") is None
    assert props.get("absent", "d") == "d"
    for i in range(m._MAX_PAIRS + 10):  # property names are the clients' own: the cache is bounded
        props.get(f"n{i}")
    assert len(m._PAIRS) <= m._MAX_PAIRS
    assert props.get("TAGS") == "x"
