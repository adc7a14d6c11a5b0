"""Plain ACL's cost: sync 1 KiB SEND_MESSAGE_V2 over N connections to a broker with aclEnable=false
(unsigned sends) and to one with aclEnable=true (sends signed as AclClientRPCHook signs them, each
signature checked), alternated round by round on the same machine; prints both sends/s and the ratio.

Run: ``.venv/bin/python bench/acl.py [--connections 16] [--seconds 8] [--size 1024] [--rounds 2]``
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker import Server, load_arguments, pct, rmqgate_server, send_phase

from rmqgate.server.acl import sign_request

ACCESS_KEY, SECRET_KEY = "benchKey01", "benchSecret01"
PLAIN_ACL = f"""\
accounts:
  - accessKey: {ACCESS_KEY}
    secretKey: {SECRET_KEY}
    defaultTopicPerm: PUB
    defaultGroupPerm: SUB
"""


def sign(ext: dict[str, str], body: bytes) -> None:
    sign_request(ext, body, ACCESS_KEY, SECRET_KEY)


def server(store: str, acl: bool) -> Server:
    acl_file = Path(store) / "plain_acl.yml"
    acl_file.parent.mkdir(parents=True, exist_ok=True)
    acl_file.write_text(PLAIN_ACL)
    conf = f"aclEnable={'true' if acl else 'false'}\n"
    return rmqgate_server(store, "ASYNC_FLUSH", conf, ("--acl", str(acl_file)))


def main() -> None:
    ap = load_arguments(__doc__)
    args = ap.parse_args()
    rates: dict[str, list[float]] = {"unsigned": [], "signed": []}
    best: dict[str, tuple[float, list[float]]] = {}
    for _ in range(args.rounds):
        for name, acl in (("unsigned", False), ("signed", True)):
            with tempfile.TemporaryDirectory(prefix="rmqgate-bench-acl-") as tmp:
                srv = server(tmp, acl)
                try:
                    n, lat = asyncio.run(
                        send_phase(
                            srv.port,
                            args.connections,
                            args.seconds,
                            args.size,
                            "BenchAcl",
                            sign if acl else None,
                        )
                    )
                finally:
                    srv.stop()
            rate = n / args.seconds
            rates[name].append(rate)
            if name not in best or rate > best[name][0]:
                best[name] = (rate, lat)
    print(
        f"\nACL bench: {args.connections} connections, sync {args.size} B SEND_MESSAGE_V2 for {args.seconds:.0f} s each\n"
    )
    print(f"{'broker':44} {'sends/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for name, label in (
        ("unsigned", "aclEnable=false, unsigned sends"),
        ("signed", "aclEnable=true, signed sends"),
    ):
        rate, lat = best[name]
        print(f"{label:44} {rate:10.0f} {pct(lat, 0.5):8.2f} {pct(lat, 0.99):8.2f}")
    per_round = [s / u for u, s in zip(rates["unsigned"], rates["signed"], strict=True)]
    print(f"\nbest of {args.rounds} alternating rounds; unsigned runs {[round(r) for r in rates['unsigned']]}, "
          f"signed runs {[round(r) for r in rates['signed']]}")  # fmt: skip
    print(f"signed / unsigned per round: {', '.join(f'{r:.0%}' for r in per_round)}; "
          f"best vs best {best['signed'][0] / best['unsigned'][0]:.0%}")  # fmt: skip


if __name__ == "__main__":
    main()
