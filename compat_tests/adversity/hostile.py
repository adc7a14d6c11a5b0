"""Hostile frames in bulk, and a sender that fires them at a live name server + broker.

Frames are structure-aware mutations of every request family's header (wire/headers.py's declared
fields: wrong types, huge and negative numbers, missing required fields, both serializations), of the
JSON bodies and of sends (truncated bodies, the compressed flag on bodies that do not inflate), plus
envelope tricks (header length past the frame, serialization types past 1, negative and oversized
lengths, a cut header) and random bytes. They go out in batches, one batch per connection; the local
FrameDecoder says what the server must do with each batch: answer every request that expects an
answer, close the connection (a bad frame or header), or wait for the rest of a frame (then our
half-close must end it). Every read has a deadline: a batch that gets neither is a hang.

Run as ``python -m rmqgate.compat_tests.adversity.hostile --namesrv A --broker B --frames N``; prints one
JSON summary line.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import random
import struct
import sys
import time
import zlib
from collections.abc import Iterator
from typing import Any

from rmqgate.server.namesrv import NamesrvController
from rmqgate.server.tests.test_fuzz import BREAKING_VALUES, JSON_VALUES, TEMPLATES, mutate_json
from rmqgate.wire import FrameDecoder, RemotingCommand, SerializeType, encode_frame
from rmqgate.wire.codes import RequestCode
from rmqgate.wire.command import ONEWAY_FLAG, RESPONSE_FLAG
from rmqgate.wire.errors import CodecError, FrameError, HeaderError
from rmqgate.wire.header import _camel
from rmqgate.wire.headers import REQUEST_HEADERS, V2_CODES
from rmqgate.wire.message_batch import BatchEntry, encode_batch

#: Codes left out: a mutated UPDATE_BROKER_CONFIG / UPDATE_NAMESRV_CONFIG body can be a valid config change
#: (brokerPermission=2, say), which is an operator's right, not bad input.
LEFT_OUT = frozenset({RequestCode.UPDATE_BROKER_CONFIG, RequestCode.UPDATE_NAMESRV_CONFIG})
SEND_CODES = frozenset(
    {RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE}
)
PULL_CODES = frozenset({RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE})
NAMESRV_CODES = frozenset(
    code for processor in NamesrvController().processors() for code in type(processor).codes
)
#: What may go unanswered: END_TRANSACTION without a commit/rollback state (Java answers none).
UNANSWERED = frozenset({RequestCode.END_TRANSACTION})

# Values by the Java type of the field they replace; the huge ones are rare (they cost the sender too).
INT_VALUES = ["0", "-1", "2147483647", "2147483648", "-2147483649", "9" * 30, "abc", "1.5", "", " 1", "0x10",
              "true", "-0", "+1", "1_000"]  # fmt: skip
LONG_VALUES = ["9223372036854775807", "9223372036854775808", "-9223372036854775809", "-1", "0", "1e3", ""]
BOOL_VALUES = ["maybe", "1", "0", "", "TRUE", "yes"]
TEXT_VALUES = [v for v in BREAKING_VALUES if len(v) < 1000] + ["HostileT", "%RETRY%HostileG", "a" * 300]
HUGE_VALUE = "x" * 70_000

HOSTILE_TOPIC = "HostileT"
HOSTILE_GROUP = "HostileG"
HOSTILE_BROKER = "hostile-broker"


def _field_value(kind: str, name: str) -> str:
    """A plausible value for a header field (names that key data point at the hostile topic/group)."""
    if "Integer" in kind:
        return "1" if "Nums" in name or "maxNum" in name else "0"
    if "Long" in kind:
        return "0"
    if "bool" in kind:
        return "false"
    lowered = name.lower()
    if "topic" in lowered:
        return HOSTILE_TOPIC
    if "group" in lowered:
        return HOSTILE_GROUP
    if "broker" in lowered and "addr" in lowered:
        return "127.0.0.1:1"
    if "broker" in lowered or lowered == "bname":
        return HOSTILE_BROKER
    return "h"


@dataclasses.dataclass(frozen=True)
class Template:
    code: int
    ext: dict[str, str]
    kinds: dict[str, str]  # ext key -> Java type of the field ("Integer", "Long", "bool", "str")
    body: bytes | None


def templates() -> list[Template]:
    """A well-formed request of every declared request family (the V2 sends with their aliases), the
    fuzz suite's hand-made templates, and every other request code with no header."""
    out: list[Template] = []
    for code, cls in REQUEST_HEADERS.items():
        if code in LEFT_OUT:
            continue
        ext: dict[str, str] = {}
        kinds: dict[str, str] = {}
        for f in dataclasses.fields(cls) if cls else ():
            name = (f.metadata.get("alias") if code in V2_CODES else None) or f.metadata.get("wire")
            name = name or _camel(f.name)
            kinds[name] = str(f.type)
            ext[name] = _field_value(str(f.type), name)
        body = b"hostile" if code in SEND_CODES else None
        if code == RequestCode.SEND_BATCH_MESSAGE:
            ext["m"] = "true"
            body = encode_batch([BatchEntry(body=b"b1"), BatchEntry(body=b"b2")])
        out.append(Template(code, ext, kinds, body))
    for code, ext, body in TEMPLATES:
        out.append(Template(code, dict(ext), {}, body))
    for code in sorted(set(RequestCode) - set(REQUEST_HEADERS) - LEFT_OUT):
        out.append(Template(int(code), {}, {}, None))
    return out


def _bad_value(rng: random.Random, kind: str) -> str:
    if rng.random() < 0.0005:
        return HUGE_VALUE
    if "Integer" in kind:
        return rng.choice(INT_VALUES)
    if "Long" in kind:
        return rng.choice(LONG_VALUES)
    if "bool" in kind:
        return rng.choice(BOOL_VALUES)
    return rng.choice(TEXT_VALUES)


def _bad_body(rng: random.Random, t: Template, body: bytes | None) -> bytes | None:
    what = rng.randrange(6)
    if what == 0 and body:
        return body[: rng.randrange(len(body))]  # truncated
    if what == 1 and body:
        flipped = bytearray(body)
        for _ in range(rng.randrange(1, 6)):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        return bytes(flipped)
    if what == 2 and body and body[:1] in (b"{", b"["):
        try:
            tree = json.loads(body)
        except ValueError:
            return body
        return json.dumps(mutate_json(rng, tree)).encode("utf-8", "surrogatepass")
    if what == 3:
        return json.dumps(rng.choice(JSON_VALUES)).encode("utf-8", "surrogatepass")
    if what == 4:
        return rng.randbytes(rng.choice((1, 7, 64, 900)))
    return None


def _compression_trick(rng: random.Random, ext: dict[str, str], code: int) -> bytes:
    """A send whose sysFlag says compressed (bit 0) over a body that does not inflate as it says."""
    key = "f" if code in V2_CODES else "sysFlag"
    ext[key] = str(rng.choice((1, 1 | 4, 1 | 8, 0x7FFFFFFF, 1 | (1 << 8))))
    good = zlib.compress(b"hostile body " * rng.randrange(1, 40))
    return rng.choice(
        (good[: len(good) // 2], good[2:], rng.randbytes(30), b"\x78\x9c", good + b"junk", b"", good[:-4])
    )


def mutated_command(rng: random.Random, t: Template, opaque: int) -> RemotingCommand:
    ext = dict(t.ext)
    body = t.body
    for _ in range(rng.choice((1, 1, 2, 3))):
        what = rng.random()
        if what < 0.45 and ext:
            key = rng.choice(list(ext))
            ext[key] = _bad_value(rng, t.kinds.get(key, "str"))
        elif what < 0.6 and ext:
            del ext[rng.choice(list(ext))]  # a required field missing, or an optional one
        elif what < 0.7:
            ext[rng.choice(("x", "queueId", "topic", "a", "sysFlag"))] = _bad_value(rng, "str")
        elif what < 0.8 and t.code in SEND_CODES:
            body = _compression_trick(rng, ext, t.code)
        elif what < 0.95:
            body = _bad_body(rng, t, body)
    if t.code in PULL_CODES:
        flag = ext.get("sysFlag", "")
        if flag.lstrip("-").isdigit() and int(flag) & 2:
            ext["suspendTimeoutMillis"] = "50"  # a long poll parks at most this long
    flag = ONEWAY_FLAG if rng.random() < 0.02 else 0
    ser = SerializeType.ROCKETMQ if rng.random() < 0.5 else SerializeType.JSON
    return RemotingCommand(
        t.code, language=rng.choice((0, 0, 5, 12)), version=rng.choice((0, 317, 399, -1, 32767)),
        opaque=opaque, flag=flag, ext_fields=ext, body=body or None, serialize_type=ser,
    )  # fmt: skip


def encode_lenient(cmd: RemotingCommand) -> bytes:
    """``encode_frame``; text our encoder cannot write (a lone surrogate) goes in a JSON header escaped."""
    try:
        return encode_frame(cmd)
    except (CodecError, UnicodeEncodeError, ValueError, struct.error):
        header = json.dumps(
            {"code": cmd.code, "language": "JAVA", "version": cmd.version, "opaque": cmd.opaque,
             "flag": cmd.flag, "extFields": cmd.ext_fields or {}}
        ).encode()  # fmt: skip
        body = bytes(cmd.body or b"")
        return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def envelope_trick(rng: random.Random, frame: bytes) -> bytes:
    """The frame with its length / header-length word / header bytes broken."""
    length, word = struct.unpack_from(">iI", frame)
    hlen = word & 0xFFFFFF
    rest = frame[8:]
    what = rng.randrange(10)
    if what == 0:  # header length past the frame
        return struct.pack(">iI", length, (word & 0xFF000000) | (length + rng.randrange(1, 1000))) + rest
    if what == 1:  # header length 0 (all body)
        return struct.pack(">iI", length, word & 0xFF000000) + rest
    if what == 2:  # serialization type byte past ROCKETMQ
        return struct.pack(">iI", length, (rng.randrange(2, 256) << 24) | hlen) + rest
    if what == 3:  # negative or too small a frame length
        return struct.pack(">iI", rng.choice((-1, -(2**31), 0, 1, 3)), word) + rest
    if what == 4:  # over the 16 MiB frame limit
        return struct.pack(">iI", rng.choice((16 * 1024 * 1024, 2**31 - 1)), word) + rest
    if what == 5:  # the header cut short, lengths consistent
        cut = rng.randrange(hlen) if hlen else 0
        header = rest[:cut]
        return struct.pack(">iI", 4 + len(header), (word & 0xFF000000) | len(header)) + header
    if what == 6:  # bytes of the header flipped (ROCKETMQ's inner lengths, JSON's syntax)
        flipped = bytearray(frame)
        for _ in range(rng.randrange(1, 5)):
            pos = 8 + rng.randrange(max(1, hlen))
            if pos < len(flipped):
                flipped[pos] = rng.randrange(256)
        return bytes(flipped)
    if what == 7:  # frame length a little longer than what follows (swallows the next frame or waits)
        return struct.pack(">iI", length + rng.randrange(1, 64), word) + rest
    if what == 8:  # a little shorter (the tail is read as the next frame)
        return struct.pack(">iI", max(4, length - rng.randrange(1, 16)), word) + rest
    return frame[: rng.randrange(1, len(frame))]  # the frame cut anywhere


def random_bytes(rng: random.Random) -> bytes:
    size = rng.choice((1, 3, 4, 7, 8, 17, 64, 500, 4000))
    data = rng.randbytes(size)
    if rng.random() < 0.4:  # a plausible envelope with random content
        word = rng.choice((0, 1 << 24)) | min(size, rng.randrange(0, 64))
        data = struct.pack(">ii", size + 4, word) + data
    return data


@dataclasses.dataclass
class Batch:
    role: str  # "namesrv" or "broker"
    data: bytes
    expected: frozenset[int]  # opaques that must be answered
    end: str  # "clean": all answered; "closed": the server must close; "partial": a frame left unfinished
    frames: int
    families: tuple[int, ...]


def expectation(data: bytes) -> tuple[frozenset[int], str]:
    """What the server owes a connection that sent ``data``: the answers and how it ends."""
    decoder = FrameDecoder()
    end = "clean"
    try:
        commands = decoder.feed(data)
    except HeaderError as exc:
        commands = list(getattr(exc, "decoded", ()))
        end = "closed"
    except FrameError:
        # Requests decoded in the same read as the bad frame are dropped with it, and which read that
        # is depends on how TCP splits the batch: only the close is owed.
        return frozenset(), "closed"
    if end == "clean" and decoder.buffered:
        end = "partial"
    expected = frozenset(
        c.opaque for c in commands if not c.flag & (RESPONSE_FLAG | ONEWAY_FLAG) and c.code not in UNANSWERED
    )
    if end == "closed":
        expected = frozenset()  # their answers may be cut off by the close
    return expected, end


def build_batches(seed: int, frames: int, per_batch: int = 24) -> Iterator[Batch]:
    rng = random.Random(seed)
    pool = templates()
    opaque = rng.randrange(1, 1 << 20)
    made = 0
    while made < frames:
        n = min(per_batch, frames - made, rng.randrange(1, per_batch + 1))
        parts: list[bytes] = []
        families: list[int] = []
        for i in range(n):
            opaque = (opaque + 1) & 0x7FFFFFFF or 1
            last = i == n - 1
            roll = rng.random()
            if last and roll < 0.12:
                parts.append(random_bytes(rng))
                families.append(-1)
                continue
            t = rng.choice(pool)
            cmd = mutated_command(rng, t, opaque)
            frame = encode_lenient(cmd)
            if last and roll < 0.3:
                frame = envelope_trick(rng, frame)
            parts.append(frame)
            families.append(t.code)
        made += n
        data = b"".join(parts)
        expected, end = expectation(data)
        home = "namesrv" if families[0] in NAMESRV_CODES else "broker"
        role = home if rng.random() < 0.85 else ("broker" if home == "namesrv" else "namesrv")
        yield Batch(role, data, expected, end, n, tuple(families))


@dataclasses.dataclass
class Tally:
    frames: int = 0
    batches: int = 0
    bytes_sent: int = 0
    answered: int = 0
    closed_by_server: int = 0
    hangs: list[str] = dataclasses.field(default_factory=list)
    unexpected_close: list[str] = dataclasses.field(default_factory=list)
    connect_errors: int = 0
    codes: collections.Counter[int] = dataclasses.field(default_factory=collections.Counter)
    families: collections.Counter[int] = dataclasses.field(default_factory=collections.Counter)
    ends: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


async def run_batch(addr: tuple[str, int], batch: Batch, tally: Tally, read_timeout: float) -> None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*addr), read_timeout)
    except (OSError, TimeoutError):
        tally.connect_errors += 1
        return
    tally.batches += 1
    tally.frames += batch.frames
    tally.bytes_sent += len(batch.data)
    tally.ends[batch.end] += 1
    tally.families.update(batch.families)
    waiting = set(batch.expected)
    decoder = FrameDecoder()
    eof = False
    try:
        writer.write(batch.data)
        while waiting:
            try:
                chunk = await asyncio.wait_for(reader.read(1 << 16), read_timeout)
            except TimeoutError:
                tally.hangs.append(f"{batch.role} {batch.end}: {len(waiting)} unanswered of {batch.families}")
                return
            if not chunk:
                eof = True
                break
            for resp in decoder.feed(chunk):
                if resp.flag & RESPONSE_FLAG and resp.opaque in waiting:
                    waiting.discard(resp.opaque)
                    tally.answered += 1
                    tally.codes[resp.code] += 1
        if eof and waiting and batch.end == "clean":
            tally.unexpected_close.append(f"{batch.role}: {len(waiting)} unanswered of {batch.families}")
            return
        if batch.end == "clean":
            return
        if batch.end == "partial":
            writer.write_eof()
        # the server must close (a bad frame) or end after our half-close (a frame left unfinished)
        while not eof:
            try:
                chunk = await asyncio.wait_for(reader.read(1 << 16), read_timeout)
            except TimeoutError:
                tally.hangs.append(f"{batch.role} {batch.end}: not closed after {batch.families}")
                return
            eof = not chunk
        tally.closed_by_server += 1
    except (ConnectionResetError, BrokenPipeError):
        tally.closed_by_server += 1
    finally:
        writer.transport.abort()


async def send_all(
    addrs: dict[str, tuple[str, int]],
    batches: Iterator[Batch],
    connections: int,
    read_timeout: float,
    rate: float = 0.0,
    max_hangs: int = 20,
) -> Tally:
    """Every batch on a connection of its own, ``connections`` at a time; ``rate``: frames/s (0: flat out)."""
    tally = Tally()
    loop = asyncio.get_running_loop()
    began = loop.time()
    scheduled = 0

    async def worker() -> None:
        nonlocal scheduled
        for batch in batches:  # a shared iterator: each batch is taken by one worker
            if len(tally.hangs) >= max_hangs:
                return  # the server stopped answering: what follows would only wait out more deadlines
            if rate:
                at = began + scheduled / rate
                scheduled += batch.frames
                if at > loop.time():
                    await asyncio.sleep(at - loop.time())
            await run_batch(addrs[batch.role], batch, tally, read_timeout)

    await asyncio.gather(*(worker() for _ in range(connections)))
    return tally


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--broker", required=True)
    ap.add_argument("--frames", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--connections", type=int, default=48)
    ap.add_argument("--read-timeout", type=float, default=30.0)
    ap.add_argument("--max-hangs", type=int, default=20, help="stop after this many hangs")
    ap.add_argument("--rate", type=float, default=0.0, help="frames/s this process sends (0: flat out)")
    ap.add_argument("--chunk", type=int, default=50_000, help="frames built in bulk before each send round")
    args = ap.parse_args(argv)
    addrs = {"namesrv": _addr(args.namesrv), "broker": _addr(args.broker)}
    total = Tally()
    build_s = send_s = 0.0
    left, seed = args.frames, args.seed
    while left > 0:
        n = min(args.chunk, left)
        began = time.monotonic()
        batches = list(build_batches(seed, n))
        build_s += time.monotonic() - began
        began = time.monotonic()
        tally = asyncio.run(
            send_all(addrs, iter(batches), args.connections, args.read_timeout, args.rate, args.max_hangs)
        )
        send_s += time.monotonic() - began
        for f in dataclasses.fields(Tally):
            a, b = getattr(total, f.name), getattr(tally, f.name)
            setattr(total, f.name, a + b)
        left -= n
        seed += 1_000_003
        if len(total.hangs) >= args.max_hangs:
            break
    out: dict[str, Any] = {f.name: getattr(total, f.name) for f in dataclasses.fields(Tally)}
    out["ends"] = dict(total.ends)
    out["hangs"] = total.hangs[:20]
    out["hang_count"] = len(total.hangs)
    out["unexpected_close"] = total.unexpected_close[:20]
    out["unexpected_close_count"] = len(total.unexpected_close)
    out["codes"] = {str(k): v for k, v in total.codes.items()}
    out["families"] = {str(k): v for k, v in total.families.items()}
    out["build_s"] = round(build_s, 2)
    out["send_s"] = round(send_s, 2)
    print("HOSTILE " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
