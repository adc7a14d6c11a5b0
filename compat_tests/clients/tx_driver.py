"""Transactional producer of rocketmq-client-python 2.0.0 (C++ core) through one scenario; print JSON.

    python tx_driver.py '{"namesrv": ..., "topic": ..., "group": ..., "messages": [{"body": "b0",
        "local": "commit" | "rollback" | "unknown", "check": "commit" | "rollback" | "unknown"}, ...],
        "linger_s": 5}'

Each message goes through ``send_message_in_transaction``; the local-transaction callback answers
``local`` (END_TRANSACTION), and the check callback (CHECK_TRANSACTION_STATE from the broker)
answers ``check`` for that body. The producer stays up ``linger_s`` seconds (or until every message
whose local state is unknown has been checked and resolved) so check-backs can arrive. Run with
PYTHONPATH = the rocketmq-client-python200 target dir; ends with ``os._exit``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from typing import Any


def _result(data: dict[str, Any]) -> None:
    sys.stdout.write("RESULT " + json.dumps(data) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def run(args: dict[str, Any]) -> dict[str, Any]:
    from rocketmq.client import Message, TransactionMQProducer, TransactionStatus

    states = {
        "commit": TransactionStatus.COMMIT,
        "rollback": TransactionStatus.ROLLBACK,
        "unknown": TransactionStatus.UNKNOWN,
    }
    plan = {m["body"]: m for m in args["messages"]}
    checks: list[dict[str, Any]] = []
    lock = threading.Lock()
    resolved = threading.Event()
    pending = {
        b for b, m in plan.items() if m.get("local") == "unknown" and m.get("check", "unknown") != "unknown"
    }

    def on_check(msg: Any) -> Any:
        body = _text(msg.body)
        answer = plan.get(body, {}).get("check", "unknown")
        with lock:
            checks.append(
                {
                    "body": body,
                    "topic": _text(msg.topic),
                    "id": _text(msg.id),
                    "answer": answer,
                    "at": time.time(),
                    "transaction_check_times": _text(msg.get_property("TRANSACTION_CHECK_TIMES") or ""),
                }
            )
            if answer != "unknown":
                pending.discard(body)
            if not pending:
                resolved.set()
        return states[answer]

    producer = TransactionMQProducer(args["group"], on_check, timeout=args.get("timeout_ms", 5000))
    producer.set_name_server_address(args["namesrv"])
    producer.start()
    results = []
    for body, spec in plan.items():
        msg = Message(args["topic"])
        msg.set_keys(spec.get("keys", "key-" + body))
        msg.set_tags(spec.get("tags", "TagTx"))
        msg.set_body(body)

        def local(_msg: Any, _user: Any, answer: str = spec.get("local", "commit")) -> Any:
            return states[answer]

        r = producer.send_message_in_transaction(msg, local)
        results.append(
            {"body": body, "status": int(r.status), "msg_id": r.msg_id, "offset": r.offset, "at": time.time()}
        )
    if pending:
        resolved.wait(args.get("linger_s", 20))
    time.sleep(args.get("after_s", 1.0))  # let the last END_TRANSACTION leave
    with lock:
        return {"results": results, "checks": list(checks)}


def main() -> None:
    args = json.loads(sys.argv[1])
    try:
        import rocketmq.client

        data = run(args)
        data["package_file"] = rocketmq.client.__file__
        _result(data)
    except Exception as exc:
        _result({"exception": repr(exc), "traceback": traceback.format_exc()})


if __name__ == "__main__":
    main()
