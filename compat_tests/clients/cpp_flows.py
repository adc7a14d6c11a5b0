"""C++-core push consumers (rocketmq-python-cvs 2.1.0.3) for orderly, retry and delay flows; print JSON.

    python cpp_flows.py '{"scenario": "consume", "namesrv": ..., "topic": ..., "group": ...,
        "orderly": true, "fail": {"body": n}, "expect": 10, "max_s": 40, "stop_file": "/tmp/x"}'

``consume``: a PushConsumer (orderly or concurrent) whose callback records every delivery (body, keys,
queue, offset, reconsumeTimes, receive time) and answers RECONSUME_LATER while a body is listed in
``fail`` with more failures left (``-1`` = always), CONSUME_SUCCESS otherwise. It stops when
``expect`` distinct bodies (starting with ``expect_prefix``) were consumed successfully (then
lingers ``linger_s``), when ``stop_file``
exists, or after ``max_s``; ``shutdown`` (default true) calls the consumer's shutdown (unregister,
unlock) before printing ``RESULT <json>``. Deliveries are recorded when the callback is entered
(status IN_PROGRESS until it returns). Without ``shutdown`` the driver just returns (a consumer
that dies); the wrapper's destructor then shuts the C++ consumer down, and that waits for every
callback in progress. A callback entered after the result is taken answers RECONSUME_LATER at once,
unrecorded, so nothing is consumed unseen and the shutdown is never held up (an orderly consumer
keeps such a message for a later try that the shutdown cancels; a concurrent one would send it
back). The callback is registered straight on the C library so its return value is the consume
status (the wrapper's exception path does not return one).
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any

from driver_io import run_driver, text


def consume(client: Any, args: dict[str, Any]) -> dict[str, Any]:
    from rocketmq.ffi import _CConsumeStatus, dll

    orderly = bool(args.get("orderly", False))
    consumer = client.PushConsumer(args["group"], orderly=orderly)
    consumer.set_namesrv_addr(args["namesrv"])
    if args.get("instance"):
        dll.SetPushConsumerInstanceName(consumer._handle, args["instance"].encode())
    fn = dll.SetPushConsumerMessageTrace  # 2.1.0: trace off avoids its teardown crash
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int]
    fn(consumer._handle, 0)
    if args.get("threads"):
        consumer.set_thread_count(int(args["threads"]))
    received: list[dict[str, Any]] = []
    failures_left = {str(k): int(v) for k, v in (args.get("fail") or {}).items()}
    done: set[str] = set()
    lock = threading.Lock()
    enough = threading.Event()
    frozen = threading.Event()
    expect = int(args.get("expect", 0))
    slow = float(args.get("slow_s", 0))
    prefix = str(args.get("expect_prefix", ""))

    def on_message(_consumer: Any, handle: Any) -> int:
        msg = client.RecvMessage(handle)
        body = text(msg.body) or ""
        rec = {
            "body": body,
            "keys": text(msg.keys),
            "topic": text(msg.topic),
            "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset,
            "reconsume_times": msg.reconsume_times,
            "store_timestamp": msg.store_timestamp,
            "born_timestamp": msg.born_timestamp,
            "at": time.time(),
            "thread": threading.get_ident(),
        }
        with lock:  # recorded on entry: a message in the callback when the process ends counts too
            if frozen.is_set():  # the result is taken: nothing more may be consumed (and committed) unseen
                return _CConsumeStatus.RECONSUME_LATER.value
            left = failures_left.get(body, 0)
            if left != 0:
                failures_left[body] = left - 1 if left > 0 else -1
            rec["status"] = "IN_PROGRESS"
            received.append(rec)
        if slow:
            time.sleep(slow)
        with lock:
            if left != 0:
                rec["status"] = "RECONSUME_LATER"
                return _CConsumeStatus.RECONSUME_LATER.value
            rec["status"] = "CONSUME_SUCCESS"
            if body.startswith(prefix):
                done.add(body)
            if expect and len(done) >= expect:
                enough.set()
        return _CConsumeStatus.CONSUME_SUCCESS.value

    ffi_status = dll.Subscribe(consumer._handle, args["topic"].encode(), args.get("expression", "*").encode())
    if ffi_status != 0:
        raise RuntimeError(f"Subscribe failed: {ffi_status}")
    consumer._register_callback(on_message)
    consumer.start()
    started = time.time()
    stop_file = args.get("stop_file")
    deadline = started + float(args.get("max_s", 40))
    while time.time() < deadline:
        if enough.wait(0.1):
            time.sleep(float(args.get("linger_s", 1.0)))
            break
        if stop_file and os.path.exists(stop_file):
            break
    stopped_at = time.time()
    if args.get("shutdown", True):
        consumer.shutdown()
    with lock:
        if not args.get("shutdown", True):
            frozen.set()  # dying: callbacks entered from now on consume nothing
        return {
            "received": [dict(r) for r in received],
            "started": started,
            "stopped": stopped_at,
            "left": time.time(),
        }


SCENARIOS = {"consume": consume}


if __name__ == "__main__":
    run_driver(lambda client, args: SCENARIOS[args["scenario"]](client, args))
