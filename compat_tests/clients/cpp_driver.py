"""Drive a C++-core Python client (``rocketmq`` import name) through one scenario; print JSON.

Run in a subprocess by the compat tests so a native crash cannot take pytest down:

    python cpp_driver.py '{"scenario": "produce", "namesrv": "127.0.0.1:9876", ...}'

Which package is imported depends on PYTHONPATH: rocketmq-python-cvs 2.1.0.3 from the venv, or
rocketmq 0.4.4 from its own target dir (same import name, older C++ core). The last stdout line is
``RESULT <json>``; the process ends with ``os._exit`` (the 2.1.0 core may crash in its shutdown).
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from driver_io import run_driver, text


def _message(rocketmq: Any, topic: str, i: int, spec: dict[str, Any]) -> Any:
    msg = rocketmq.Message(topic)
    tags = spec.get("tags")
    if tags:
        msg.set_tags(tags[i % len(tags)])
    msg.set_keys(f"{spec.get('key_prefix', 'key')}-{i}")
    msg.set_body(f"{spec.get('body_prefix', 'body')}-{i}")
    for k, v in (spec.get("properties") or {}).items():
        msg.set_property(k, v)
    return msg


#: what the core logs each time its heartbeat task runs while it knows no broker
NO_BROKER_HEARTBEAT = "sendheartbeat brokeradd is empty"


def start_producer(producer: Any, timeout: float = 20.0) -> None:
    """``producer.start()``, then wait until the core's heartbeat timer has made its first run
    (scheduled 10 ms after start; the next is 30 s later). A first send that learns the broker from
    its route just before that run races the timer for the broker's connection: the loser finds the
    connection still being made and gets none (TcpRemotingClient::CreateTransport), and the core
    spends every try at once and reports "No route info of this topic". The run is read off the
    core's log (ROCKETMQ_CLIENT_LOG_DIR, or $HOME/logs/rocketmq-cpp for older cores): the second
    no-broker heartbeat line, start() itself writing the first."""
    producer.start()
    dirs = {os.environ.get("ROCKETMQ_CLIENT_LOG_DIR", ""), os.path.expanduser("~/logs/rocketmq-cpp")}
    logs = [Path(d) for d in dirs if d]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = 0
        for folder in logs:
            for log in folder.glob(f"{os.getpid()}_rocketmq-cpp.log*"):
                seen += log.read_text(errors="replace").count(NO_BROKER_HEARTBEAT)
        if seen >= 2:
            return
        time.sleep(0.005)
    raise RuntimeError(f"the core's first heartbeat run was not logged in {timeout} s (in {logs})")


def produce(rocketmq: Any, args: dict[str, Any]) -> dict[str, Any]:
    producer = rocketmq.Producer(args["group"], timeout=args.get("timeout_ms", 5000))
    producer.set_namesrv_addr(args["namesrv"])
    if args.get("access_key"):  # ACL: the client signs every request
        producer.set_session_credentials(args["access_key"], args["secret_key"], "ALIYUN")
    start_producer(producer)
    topic, count, mode = args["topic"], args.get("count", 3), args.get("mode", "sync")
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    if mode == "sync":
        for i in range(count):
            try:
                r = producer.send_sync(_message(rocketmq, topic, i, args))
            except Exception as exc:  # an ACL refusal is what a signed scenario checks
                if not args.get("access_key"):
                    raise
                errors.append(repr(exc))
                continue
            results.append({"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset})
    elif mode == "async":
        done = threading.Event()
        lock = threading.Lock()

        def ok(r: Any) -> None:
            with lock:
                results.append({"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset})
                if len(results) + len(errors) == count:
                    done.set()

        def fail(exc: Exception) -> None:
            with lock:
                errors.append(repr(exc))
                if len(results) + len(errors) == count:
                    done.set()

        msgs = [_message(rocketmq, topic, i, args) for i in range(count)]
        for msg in msgs:
            producer.send_async(msg, ok, fail)
        done.wait(args.get("wait_s", 20))
    elif mode == "oneway":
        for i in range(count):
            producer.send_oneway(_message(rocketmq, topic, i, args))
        time.sleep(2.0)  # let the client flush its oneway frames before os._exit
    elif mode == "orderly":
        for i in range(count):
            arg = args["order_keys"][i % len(args["order_keys"])]
            r = producer.send_orderly(_message(rocketmq, topic, i, args), arg)
            results.append({"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset, "arg": arg})
    elif mode == "batch":
        r = producer.send_batch([_message(rocketmq, topic, i, args) for i in range(count)])
        results.append({"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset})
    else:
        raise ValueError(f"unknown produce mode {mode}")
    return {"results": results, "errors": errors}


def produce_until(rocketmq: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Sync sends of "<body_prefix>-N" to queue N % ``queues`` until the file ``stop`` exists, each
    SEND_OK appended to the file ``out`` as a JSON line at once (the broker may be killed under the
    client at any moment); a failed send is counted and the next one has a new body. Sent orderly
    with no retry: the core's own retry of a send the broker had stored (its answer lost in a kill)
    would store a second copy of one body."""
    producer = rocketmq.Producer(args["group"], timeout=args.get("timeout_ms", 3000))
    producer.set_namesrv_addr(args["namesrv"])
    start_producer(producer)
    ok = failed = 0
    i = 0
    with open(args["out"], "a") as out:
        while not os.path.exists(args["stop"]):
            body = f"{args['body_prefix']}-{i}"
            i += 1
            msg = rocketmq.Message(args["topic"])
            msg.set_keys(body)
            msg.set_body(body)
            queue = (i - 1) % args.get("queues", 4)
            try:
                r = producer.send_orderly(msg, queue, retry_times=0)
            except Exception:  # the broker is down: try the next message a little later
                failed += 1
                time.sleep(0.05)
                continue
            if int(r.status) != 0:
                failed += 1
                continue
            out.write(
                json.dumps({"msg_id": r.msg_id, "queue": queue, "offset": r.offset, "body": body}) + "\n"
            )
            out.flush()
            ok += 1
    return {"ok": ok, "failed": failed}


def _received(msg: Any) -> dict[str, Any]:
    return {
        "topic": text(msg.topic),
        "tags": text(msg.tags),
        "keys": text(msg.keys),
        "body": text(msg.body),
        "id": text(msg.id),
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "reconsume_times": msg.reconsume_times,
        "store_timestamp": msg.store_timestamp,
    }


def push_consume(rocketmq: Any, args: dict[str, Any]) -> dict[str, Any]:
    consumer = rocketmq.PushConsumer(args["group"], orderly=args.get("orderly", False))
    consumer.set_namesrv_addr(args["namesrv"])
    from rocketmq.ffi import dll

    if hasattr(dll, "SetPushConsumerMessageTrace"):  # 2.1.0: avoid the trace teardown crash
        fn = dll.SetPushConsumerMessageTrace
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int]
        fn(consumer._handle, 0)
    received: list[dict[str, Any]] = []
    lock = threading.Lock()
    enough = threading.Event()
    expect = args.get("expect", 1)

    def on_message(msg: Any) -> None:
        with lock:
            received.append(_received(msg))
            if len(received) >= expect:
                enough.set()

    consumer.subscribe(args["topic"], on_message, args.get("expression", "*"))
    consumer.start()
    enough.wait(args.get("wait_s", 30))
    time.sleep(args.get("linger_s", 1.0))  # catch duplicates / unexpected extra messages
    if "stay_until" in args:  # a file the test creates when it is done with the running consumer
        deadline = time.monotonic() + args.get("wait_s", 30)
        while not os.path.exists(args["stay_until"]) and time.monotonic() < deadline:
            time.sleep(0.1)
    with lock:
        return {"received": list(received)}


def pull_consume(rocketmq: Any, args: dict[str, Any]) -> dict[str, Any]:
    consumer = rocketmq.PullConsumer(args["group"])
    consumer.set_namesrv_addr(args["namesrv"])
    consumer.start()
    received = []
    deadline = time.monotonic() + args.get("wait_s", 20)
    expect = args.get("expect", 1)
    while len(received) < expect and time.monotonic() < deadline:
        for msg in consumer.pull(args["topic"], args.get("expression", "*"), args.get("max_num", 32)):
            received.append(_received(msg))
    return {"received": received}


SCENARIOS = {
    "produce": produce,
    "produce_until": produce_until,
    "push_consume": push_consume,
    "pull_consume": pull_consume,
}


if __name__ == "__main__":
    run_driver(lambda client, args: SCENARIOS[args["scenario"]](client, args))
