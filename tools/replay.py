"""Replay recorded RocketMQ traffic (pcap or rmqcap) against a name server and its brokers.

Three pure steps, reusable on a subset of connections (a Spark task replays a partition):
``plan = load_plan(path)`` (``replay_plan``); ``outcomes = await replay_connections(plan.connections,
target, ...)`` (this module, the run); ``report = summarize(outcomes)`` (``replay_report``).
``build_connection_plan`` plans one connection from its frames (load_plan uses it on every
connection of a file; the Spark job on frames grouped by connection).

Ordering: each connection's requests go out in recorded order at their recorded times scaled by
``speed`` (``None`` = as fast as the target answers). A request also waits for every request whose
recorded response (on any replayed connection) came before it was sent, so causality survives
``--speed max`` while requests the original client pipelined stay pipelined. Long-poll pulls (held
by the broker for longer than ``long_poll_threshold``) are not waited for, and their suspend time is
scaled by the speed, so a parked pull never stalls the replay.

Requests are sent as recorded bytes with only the fields that must change patched in place: the
opaque, mapped topics and broker names, the suspend time of long polls, and the CommitLog/queue
offsets END_TRANSACTION, VIEW_MESSAGE_BY_ID and CONSUMER_SEND_MSG_BACK carry (translated through the
replayed send results). Server-initiated requests are answered with the recorded client answer;
CHECK_TRANSACTION_STATE gets the END_TRANSACTION the client sent for that message after its check.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rmqgate.tools.capture import Role
from rmqgate.tools.proxy import split_addr
from rmqgate.tools.replay_plan import (
    BODY_TOPIC_CODES,
    PULL_CODES,
    SEND_CODES,
    PlannedConnection,
    PlannedRequest,
    build_frame,
    frame_parts,
    load_plan,
    map_body_topics,
    offset_of_msg_id,
    patch_ext,
    patch_opaque,
)
from rmqgate.tools.replay_report import Outcome, ReplayResult, summarize
from rmqgate.wire.codes import RequestCode, ResponseCode, request_name, response_name
from rmqgate.wire.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.errors import CodecError
from rmqgate.wire.frame import FrameDecoder, encode_frame

# -- the replay -----------------------------------------------------------------------------------


class ReplayConnection(asyncio.Protocol):
    """A target connection: raw frames out, responses matched by opaque, server requests dispatched."""

    def __init__(self, on_request: Callable[[ReplayConnection, RemotingCommand], None] | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder()
        self.pending: dict[int, asyncio.Future] = {}
        self.on_request = on_request
        self.closed = False
        self._opaques = itertools.count(1)

    def next_opaque(self) -> int:
        return next(self._opaques) & 0x7FFFFFFF

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            cmds = self.decoder.feed(data)
        except CodecError as exc:
            cmds = getattr(exc, "decoded", [])
            if self.transport is not None:
                self.transport.close()
        for cmd in cmds:
            if cmd.flag & RESPONSE_FLAG:
                fut = self.pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result((time.time(), cmd))
            elif self.on_request is not None:
                self.on_request(self, cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        err = ConnectionError(f"connection lost: {exc}" if exc else "connection closed by the target")
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(err)
        self.pending.clear()

    def send(self, raw: bytes, opaque: int | None) -> asyncio.Future | None:
        if self.closed or self.transport is None:
            raise ConnectionError("connection closed")
        fut = None
        if opaque is not None:
            fut = asyncio.get_running_loop().create_future()
            self.pending[opaque] = fut
        self.transport.write(raw)
        return fut

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_connection(
    addr: str,
    on_request: Callable[[ReplayConnection, RemotingCommand], None] | None = None,
    timeout: float = 5.0,
) -> ReplayConnection:
    host, port = split_addr(addr)
    _, conn = await asyncio.wait_for(
        asyncio.get_running_loop().create_connection(lambda: ReplayConnection(on_request), host, port),
        timeout,
    )
    return conn


async def call(conn: ReplayConnection, cmd: RemotingCommand, timeout: float = 5.0) -> RemotingCommand:
    cmd.opaque = conn.next_opaque()
    fut = conn.send(encode_frame(cmd), cmd.opaque)
    assert fut is not None
    _, resp = await asyncio.wait_for(fut, timeout)
    return resp


async def discover_brokers(target: str, timeout: float = 5.0) -> dict[str, str]:
    """``{broker name: master address}`` from the target name server's cluster info."""
    from rmqgate.wire.fastjson import loads

    conn = await open_connection(target, timeout=timeout)
    try:
        resp = await call(conn, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout)
    finally:
        conn.close()
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        raise ConnectionError(
            f"GET_BROKER_CLUSTER_INFO on {target}: {response_name(resp.code)} {resp.remark}"
        )
    table = loads(bytes(resp.body)).get("brokerAddrTable") or {}
    out = {}
    for name, data in table.items():
        addrs = data.get("brokerAddrs") or {}
        addr = addrs.get("0") or (next(iter(addrs.values())) if addrs else None)
        if addr:
            out[str(name)] = addr
    return out


@dataclass
class ReplayOptions:
    speed: float | None = 1.0  # None: as fast as the target answers
    connections: int | None = None  # None: as recorded; N: share N target connections per server
    topic_map: dict[str, str] = field(default_factory=dict)
    broker_map: dict[str, str] = field(default_factory=dict)  # recorded broker name -> target name
    request_timeout: float = 10.0
    long_poll_threshold: float = 1.0
    max_suspend_ms: int = 1000  # suspend time of long polls at --speed max
    connect_timeout: float = 5.0
    unanswered_timeout: float = 2.0  # wait for requests the capture has no response to
    route_wait: float = 5.0  # after a topic is created, wait this long at most for its route
    create_topics: bool = True  # create topics the recording shows pre-existed (replay_file)
    check_wait: float = 15.0  # how long the target may take to send a recorded transaction check


class _Scheduler:
    """Releases requests when their scaled recorded time has come and their causes are answered."""

    def __init__(self, ranks: int, speed: float | None, plan_start: float) -> None:
        self.done = bytearray(ranks)
        self.watermark = 0
        self.speed = speed
        self.plan_start = plan_start
        self.t0 = time.monotonic()
        self._waiters: list[tuple[int, int, asyncio.Future]] = []
        self._seq = itertools.count()

    async def wait(self, ts: float, barrier: int) -> None:
        if self.speed:
            delay = self.t0 + (ts - self.plan_start) / self.speed - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        if barrier > self.watermark:
            fut = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiters, (barrier, next(self._seq), fut))
            await fut

    def complete(self, rank: int | None) -> None:
        if rank is None or self.done[rank]:
            return
        self.done[rank] = 1
        n = len(self.done)
        while self.watermark < n and self.done[self.watermark]:
            self.watermark += 1
        while self._waiters and self._waiters[0][0] <= self.watermark:
            fut = heapq.heappop(self._waiters)[2]
            if not fut.done():
                fut.set_result(None)


class _Replay:
    def __init__(
        self,
        conns: Sequence[PlannedConnection],
        namesrv: str,
        brokers: dict[str, str],
        opts: ReplayOptions,
        plan_start: float,
        progress: Callable[[int, int], None] | None,
    ) -> None:
        self.conns = [c for c in conns if c.skipped is None and c.requests]
        self.namesrv = namesrv
        self.brokers = brokers
        self.opts = opts
        self.progress = progress
        self.outcomes: list[Outcome] = []
        self.phys_map: dict[int, int] = {}  # recorded CommitLog offset -> replayed
        self.queue_map: dict[int, str] = {}  # recorded CommitLog offset -> replayed queue offset
        self.total = sum(len(c.requests) for c in self.conns)
        self.finished = 0
        self.server_requests: Counter = Counter()
        self.server_answered: Counter = Counter()
        self.check_pool: dict[str, tuple[PlannedConnection, PlannedRequest]] = {}
        self.answer_pool: dict[int, deque[bytes]] = defaultdict(deque)
        self.shared: dict[tuple[str, int], asyncio.Future] = {}
        self._control: ReplayConnection | None = None  # to the target name server, for route waits
        self.routes_seen: set[str] = set()
        self.route_waits: dict[str, float] = {}  # topic -> seconds waited for its route (-1: never came)
        self.tasks: set[asyncio.Task] = set()
        self._rank_of: dict[int, int] = {}  # id(request) -> rank
        self._barrier_of: dict[int, int] = {}
        for c in self.conns:
            for msg_id, req in c.check_answers.items():
                self.check_pool.setdefault(msg_id, (c, req))
            for code, answers in c.answers.items():
                self.answer_pool[code].extend(answers)
        events = []
        for c in self.conns:
            for req in c.requests:
                # long polls are waited for too: their suspend time is scaled down with the
                # speed (transform), so they cannot hold anything up for long
                if req.resp_ts is not None:
                    events.append((req.resp_ts, id(req)))
                elif req.oneway:
                    events.append((req.ts, id(req)))
            # an answer to a transaction check is an event too: what the recording shows after it
            # (e.g. the consumer receiving the committed message) waits for it, or for check_wait
            for req in c.check_answers.values():
                events.append((req.resp_ts if req.resp_ts is not None else req.ts, id(req)))
        events.sort()
        times = [t for t, _ in events]
        for rank, (_, rid) in enumerate(events):
            self._rank_of[rid] = rank
        for c in self.conns:
            for req in c.requests:
                # everything answered strictly before this request was sent
                self._barrier_of[id(req)] = bisect.bisect_left(times, req.ts)
        self.sched = _Scheduler(len(events), opts.speed, plan_start)

    def _is_long_poll(self, req: PlannedRequest) -> bool:
        """A pull the broker held (or still held when the capture ended)."""
        lat = req.recorded_latency
        return req.code in PULL_CODES and (lat is None or lat >= self.opts.long_poll_threshold)

    # -- target addressing
    def target_of(self, pc: PlannedConnection) -> str:
        if pc.role != Role.BROKER:
            return self.namesrv
        name = self.opts.broker_map.get(pc.broker_name or "", pc.broker_name)
        if name in self.brokers:
            return self.brokers[name]
        if len(self.brokers) >= 1:
            return self.brokers[sorted(self.brokers)[0]]
        raise ConnectionError(f"no target broker for {pc.broker_name!r}")

    def target_name(self, pc: PlannedConnection) -> str | None:
        name = self.opts.broker_map.get(pc.broker_name or "", pc.broker_name)
        if name in self.brokers or not self.brokers:
            return name
        return sorted(self.brokers)[0]

    async def connection_for(self, pc: PlannedConnection) -> ReplayConnection:
        addr = self.target_of(pc)
        slot = pc.conn_id if self.opts.connections is None else pc.conn_id % self.opts.connections
        key = (addr, slot)
        fut = self.shared.get(key)
        if fut is not None and fut.done() and (fut.exception() is not None or fut.result().closed):
            fut = None  # reconnect, as the client would have
        if fut is None:
            fut = self.shared[key] = asyncio.ensure_future(
                open_connection(
                    addr,
                    lambda conn, cmd, pc=pc: self.on_server_request(pc, conn, cmd),
                    self.opts.connect_timeout,
                )
            )
        return await fut

    # -- request transformation
    def transform(self, pc: PlannedConnection, req: PlannedRequest) -> bytes:
        raw = req.raw
        updates: dict[str, str] = {}
        ext = req.ext
        tmap = self.opts.topic_map
        if tmap:
            for key in ("topic", "b") if req.code in (310, 320, 325) else ("topic",):
                if ext.get(key) in tmap:
                    updates[key] = tmap[ext[key]]
        if pc.role == Role.BROKER:
            name = self.target_name(pc)
            if name and name != pc.broker_name:
                for key in ("bname", "n") if req.code in (310, 320, 325) else ("bname",):
                    if key in ext:
                        updates[key] = name
        if req.code in PULL_CODES and "suspendTimeoutMillis" in ext:
            # any pull may be held by the target (even one the recorded broker answered at once)
            speed = self.opts.speed
            suspend = int(ext["suspendTimeoutMillis"])
            scaled = self.opts.max_suspend_ms if not speed else max(100, round(suspend / speed))
            updates["suspendTimeoutMillis"] = str(min(suspend, scaled))
        if req.code == RequestCode.END_TRANSACTION:
            rec_off = _int(ext.get("commitLogOffset"))
            if rec_off is not None and rec_off in self.phys_map:
                updates["commitLogOffset"] = str(self.phys_map[rec_off])
                if rec_off in self.queue_map:
                    updates["tranStateTableOffset"] = self.queue_map[rec_off]
        elif req.code in (RequestCode.VIEW_MESSAGE_BY_ID, RequestCode.CONSUMER_SEND_MSG_BACK):
            rec_off = _int(ext.get("offset"))
            if rec_off is not None and rec_off in self.phys_map:
                updates["offset"] = str(self.phys_map[rec_off])
        if updates:
            raw = patch_ext(raw, updates)
        if tmap and req.code in BODY_TOPIC_CODES:
            st, header, body = frame_parts(raw)
            new_body = map_body_topics(body, tmap)
            if new_body != body:
                raw = build_frame(st, header, new_body)
        return raw

    def learn(self, req: PlannedRequest, resp: RemotingCommand) -> None:
        """Remember how recorded CommitLog/queue offsets translate into the target's."""
        if req.code not in SEND_CODES or resp.code != ResponseCode.SUCCESS or not req.resp_ext:
            return
        new_ext = resp.ext_fields or {}
        rec_off = offset_of_msg_id(req.resp_ext.get("msgId", ""))
        new_off = offset_of_msg_id(new_ext.get("msgId", ""))
        if rec_off is not None and new_off is not None:
            self.phys_map[rec_off] = new_off
            if "queueOffset" in new_ext:
                self.queue_map[rec_off] = new_ext["queueOffset"]

    # -- server-initiated requests
    def on_server_request(self, pc: PlannedConnection, conn: ReplayConnection, cmd: RemotingCommand) -> None:
        self.server_requests[request_name(cmd.code)] += 1
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            ext = cmd.ext_fields or {}
            key = ext.get("msgId") or ext.get("transactionId") or ""
            found = self.check_pool.pop(key, None)
            if found is None:
                return
            owner, req = found
            updates = {k: ext[k] for k in ("tranStateTableOffset", "commitLogOffset") if k in ext}
            raw = patch_ext(req.raw, updates)
            self.server_answered[request_name(cmd.code)] += 1
            self._spawn(self._send_one(owner, conn, req, raw, kind="check_answer"))
            return
        pool = self.answer_pool.get(cmd.code)
        if not pool:
            return
        answer = pool.popleft()
        self.server_answered[request_name(cmd.code)] += 1
        if cmd.flag & ONEWAY_FLAG:
            return
        try:
            conn.send(patch_opaque(answer, cmd.opaque), None)
        except ConnectionError:
            pass

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- sending
    async def _send_one(
        self,
        pc: PlannedConnection,
        conn: ReplayConnection,
        req: PlannedRequest,
        raw: bytes,
        kind: str = "request",
    ) -> None:
        rank = self._rank_of.get(id(req))
        long_poll = self._is_long_poll(req)
        out = Outcome(pc.conn_id, req.code, time.time(), recorded_code=req.resp_code, long_poll=long_poll,
                      kind=kind, topic=req.ext.get("b" if req.code in (310, 320, 325) else "topic"))  # fmt: skip
        self.outcomes.append(out)
        try:
            opaque = conn.next_opaque()
            raw = patch_opaque(raw, opaque)
            fut = conn.send(raw, opaque if req.expects_response else None)
            if fut is None:
                out.done = time.time()
                self.sched.complete(rank)
                return
            timeout = self.opts.request_timeout
            if req.code in PULL_CODES:
                timeout += int(req.ext.get("suspendTimeoutMillis", "0") or 0) / 1000
            if req.resp_ts is None:  # unanswered when the capture ended: do not wait for long
                timeout = min(timeout, self.opts.unanswered_timeout)
            done_at, resp = await asyncio.wait_for(fut, timeout)
            out.done = done_at
            out.response_code = resp.code
            if resp.code != req.resp_code:
                out.remark = resp.remark
            self.learn(req, resp)
            if req.code == RequestCode.UPDATE_AND_CREATE_TOPIC and resp.code == ResponseCode.SUCCESS:
                # the recorded broker registered the topic before later requests looked its route up
                await self._await_route(
                    self.opts.topic_map.get(req.ext.get("topic", ""), req.ext.get("topic", ""))
                )
        except TimeoutError:
            conn.pending.pop(opaque, None)
            out.done = time.time()
            if req.resp_ts is not None:
                out.error = "timeout"
        except (ConnectionError, OSError, CodecError) as exc:
            out.done = time.time()
            out.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.sched.complete(rank)
            self.finished += 1
            if self.progress is not None:
                self.progress(self.finished, self.total)

    async def _await_route(self, topic: str) -> None:
        """Wait (bounded) until the target name server serves a route for ``topic``.

        Used where the recording shows a route existed that only the broker's own registration
        (not replayed) could have created: after UPDATE_AND_CREATE_TOPIC, and before a route lookup
        that succeeded in the recording (retry topics, auto-created topics).
        """
        if not topic or topic in self.routes_seen:
            return
        start = time.monotonic()
        deadline = start + self.opts.route_wait
        req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        while time.monotonic() < deadline:
            try:
                if self._control is None or self._control.closed:
                    self._control = await open_connection(self.namesrv, timeout=self.opts.connect_timeout)
                resp = await call(self._control, req, self.opts.request_timeout)
                if resp.code == ResponseCode.SUCCESS:
                    self.routes_seen.add(topic)
                    waited = time.monotonic() - start
                    if waited > 0.005:
                        self.route_waits[topic] = round(waited, 3)
                    return
            except (OSError, ConnectionError, TimeoutError):
                pass
            await asyncio.sleep(0.02)
        self.routes_seen.add(topic)  # gave up: do not wait for it again
        self.route_waits[topic] = -1.0

    async def run_connection(self, pc: PlannedConnection) -> None:
        conn: ReplayConnection | None = None
        inflight: list[asyncio.Task] = []
        for i, req in enumerate(pc.requests):
            await self.sched.wait(req.ts, self._barrier_of[id(req)])
            if req.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and req.resp_code == ResponseCode.SUCCESS:
                topic = req.ext.get("topic", "")
                await self._await_route(self.opts.topic_map.get(topic, topic))
            try:
                if conn is None or conn.closed:
                    conn = await self.connection_for(pc)
                raw = self.transform(pc, req)
            except Exception as exc:  # the connection cannot be used: account for the rest
                for rest in pc.requests[i:]:
                    self.outcomes.append(
                        Outcome(pc.conn_id, rest.code, time.time(), time.time(),
                                recorded_code=rest.resp_code, error=f"{type(exc).__name__}: {exc}")
                    )  # fmt: skip
                    self.sched.complete(self._rank_of.get(id(rest)))
                    self.finished += 1
                break
            inflight.append(asyncio.ensure_future(self._send_one(pc, conn, req, raw)))
            inflight = [t for t in inflight if not t.done()]
        if inflight:
            await asyncio.gather(*inflight)

    def _expire_checks(self) -> None:
        """Give up on the transaction checks the target has not sent within ``check_wait``."""
        for _, req in self.check_pool.values():
            self.sched.complete(self._rank_of.get(id(req)))

    async def run(self) -> list[Outcome]:
        loop = asyncio.get_running_loop()
        expiry = []
        for c in self.conns:
            for req in c.check_answers.values():
                due = self.opts.check_wait
                if self.opts.speed:
                    due += (req.ts - self.sched.plan_start) / self.opts.speed
                expiry.append(loop.call_later(due, self._expire_checks))
        try:
            await asyncio.gather(*(self.run_connection(pc) for pc in self.conns))
            # let check answers triggered at the very end go out and be answered
            for _ in range(3):
                if not self.tasks:
                    break
                await asyncio.gather(*list(self.tasks), return_exceptions=True)
        finally:
            for handle in expiry:
                handle.cancel()
            if self._control is not None:
                self._control.close()
            for fut in self.shared.values():
                if fut.done() and not fut.cancelled() and fut.exception() is None:
                    fut.result().close()
                else:
                    fut.cancel()
        return self.outcomes


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


async def replay_connections(
    conns: Sequence[PlannedConnection],
    target: str,
    options: ReplayOptions | None = None,
    *,
    plan_start: float | None = None,
    brokers: dict[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayResult:
    """Replay ``conns`` against name server ``target``: one ``Outcome`` per request sent.

    The result is a list with a ``facts`` dict (duration, target brokers, server-initiated
    requests seen and answered, route waits). ``brokers`` ({name: address}) skips the discovery
    through the target's cluster info. Safe to call on any subset of a plan's connections.
    """
    opts = options or ReplayOptions()
    if plan_start is None:
        plan_start = min((c.first_ts for c in conns), default=0.0)
    if brokers is None:
        needs_broker = any(c.role == Role.BROKER and c.skipped is None for c in conns)
        brokers = await discover_brokers(target, opts.connect_timeout) if needs_broker else {}
    replay = _Replay(conns, target, brokers, opts, plan_start, progress)
    started = time.monotonic()
    outcomes = await replay.run()
    facts = {
        "duration_s": time.monotonic() - started,
        "connections": len(replay.conns),
        "target_brokers": brokers,
        "server_requests": dict(replay.server_requests),
        "server_requests_answered": dict(replay.server_answered),
        "unused_check_answers": len(replay.check_pool),
        "route_waits": replay.route_waits,
    }
    return ReplayResult(outcomes, facts)


async def prepare_target(
    topics: dict[str, dict[str, int]],
    target: str,
    brokers: dict[str, str] | None = None,
    topic_map: dict[str, str] | None = None,
    timeout: float = 5.0,
) -> dict[str, str]:
    """Create on the target the topics the recording shows already existed.

    Returns ``{topic: outcome}``: "created", or the target's refusal (e.g. a Java or rmqgate broker
    refuses to create ``rmq_sys_*`` topics by admin request; a Java broker auto-creates them on send).
    """
    if not topics:
        return {}
    topic_map = topic_map or {}
    if brokers is None:
        brokers = await discover_brokers(target, timeout)
    done: dict[str, str] = {}
    ns = await open_connection(target, timeout=timeout)
    try:
        for old, queues in topics.items():
            topic = topic_map.get(old, old)
            lookup = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            if (await call(ns, lookup, timeout)).code == ResponseCode.SUCCESS:
                continue
            ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues["readQueueNums"]),
                   "writeQueueNums": str(queues["writeQueueNums"]), "perm": str(queues["perm"]),
                   "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}  # fmt: skip
            refused = None
            for addr in brokers.values():
                conn = await open_connection(addr, timeout=timeout)
                try:
                    resp = await call(
                        conn, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext), timeout
                    )
                finally:
                    conn.close()
                if resp.code != ResponseCode.SUCCESS:
                    refused = f"{response_name(resp.code)}: {resp.remark}"
            if refused is not None:
                done[topic] = refused
                continue
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if (await call(ns, lookup, timeout)).code == ResponseCode.SUCCESS:
                    break
                await asyncio.sleep(0.05)
            done[topic] = "created"
    finally:
        ns.close()
    return done


async def replay_file(
    path: str | Path,
    target: str,
    options: ReplayOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict, list[Outcome]]:
    """load_plan + replay_connections + summarize, for the CLI and tests."""
    plan = load_plan(path)
    opts = options or ReplayOptions()
    created: dict[str, str] = {}
    if opts.create_topics:
        created = await prepare_target(
            plan.preexisting_topics, target, None, opts.topic_map, opts.connect_timeout
        )
    outcomes = await replay_connections(
        plan.replayable, target, options, plan_start=plan.start, progress=progress
    )
    facts = outcomes.facts
    facts["input"] = str(path)
    facts["preexisting_topics"] = created  # topic -> "created" or why the target refused
    facts["skipped_connections"] = {
        str(c.conn_id): c.skipped for c in plan.connections if c.skipped is not None
    }
    return summarize(outcomes, facts), outcomes
