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

import threading
import time
from typing import Any

from driver_io import run_driver, text


def run(client: Any, args: dict[str, Any]) -> dict[str, Any]:
    states = {
        "commit": client.TransactionStatus.COMMIT,
        "rollback": client.TransactionStatus.ROLLBACK,
        "unknown": client.TransactionStatus.UNKNOWN,
    }
    plan = {m["body"]: m for m in args["messages"]}
    checks: list[dict[str, Any]] = []
    lock = threading.Lock()
    resolved = threading.Event()
    pending = {
        b for b, m in plan.items() if m.get("local") == "unknown" and m.get("check", "unknown") != "unknown"
    }

    def on_check(msg: Any) -> Any:
        body = text(msg.body)
        answer = plan.get(body, {}).get("check", "unknown")
        with lock:
            checks.append(
                {
                    "body": body,
                    "topic": text(msg.topic),
                    "id": text(msg.id),
                    "answer": answer,
                    "at": time.time(),
                    "transaction_check_times": text(msg.get_property("TRANSACTION_CHECK_TIMES") or ""),
                }
            )
            if answer != "unknown":
                pending.discard(body)
            if not pending:
                resolved.set()
        return states[answer]

    producer = client.TransactionMQProducer(args["group"], on_check, timeout=args.get("timeout_ms", 5000))
    producer.set_name_server_address(args["namesrv"])
    producer.start()
    results = []
    for body, spec in plan.items():
        msg = client.Message(args["topic"])
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


if __name__ == "__main__":
    run_driver(run)
