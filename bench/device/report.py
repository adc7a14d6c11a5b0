"""The scale-out table and plot from ``bench/broker.py --brokers ... --csv FILE``'s rows.

Writes ``scaleout.md`` (medians per server: aggregate sends/s, its ratio to N x one broker against the
0.8 target, the cores the servers, the Producer JVMs and the whole machine used, the idle cores left)
and, where matplotlib is installed, ``scaleout.png`` (aggregate sends/s against N with the
0.8 x N x one-broker line, N x one broker and the Java broker) into ``--out``; prints the table.

Run: ``python3 bench/device/report.py scaleout.csv --out DIR``
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Sequence
from pathlib import Path

#: the issue's target: aggregate sends/s of N brokers at least this share of N x one broker's
TARGET = 0.8
ONE = "rmqgate --brokers 1"


def read_runs(path: Path) -> dict[str, list[dict[str, str]]]:
    """The CSV's rows by server name, in the order the servers first appear."""
    by_server: dict[str, list[dict[str, str]]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            by_server.setdefault(row["server"], []).append(row)
    return by_server


def median(rows: Sequence[dict[str, str]], key: str) -> float:
    return statistics.median(float(r[key]) for r in rows)


def table(by_server: dict[str, list[dict[str, str]]]) -> list[str]:
    """Markdown lines: one row per server, medians over its runs."""
    one = median(by_server[ONE], "tps") if ONE in by_server else float("nan")
    java = next((rows for name, rows in by_server.items() if not name.startswith("rmqgate")), None)
    java_tps = median(java, "tps") if java else float("nan")
    lines = [
        "| server | N | runs | aggregate msg/s | per broker | / (N x 1 broker) | >= 0.8? | / Java "
        "| server cores | producer JVMs x threads | producer cores | busy cores | idle cores |",
        "|---|--:|--:|--:|--:|--:|:-:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, rows in by_server.items():
        n, tps, cpus = int(rows[0]["brokers"]), median(rows, "tps"), int(rows[0]["cpus"])
        busy = median(rows, "busy_cores")
        if name.startswith("rmqgate") and one == one:
            scale = tps / (n * one)
            ratio, verdict = f"{scale:.2f}", "yes" if scale >= TARGET else "no"
        else:
            ratio = verdict = "-"
        lines.append(
            f"| {name} | {n} | {len(rows)} | {tps:,.0f} | {tps / n:,.0f} | {ratio} | {verdict} "
            f"| {tps / java_tps:.2f} | {median(rows, 'server_cores'):.1f} "
            f"| {rows[0]['producers']} x {rows[0]['threads']} | {median(rows, 'producer_cores'):.1f} "
            f"| {busy:.1f} / {cpus} | {cpus - busy:.1f} |"
        )
    return lines


def plot(by_server: dict[str, list[dict[str, str]]], path: Path) -> bool:
    """scaleout.png; False where matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    gates = {int(rows[0]["brokers"]): rows for name, rows in by_server.items() if name.startswith("rmqgate")}
    ns = sorted(gates)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(ns, [median(gates[n], "tps") for n in ns], "o-", label="rmqgate --brokers N (median)")
    for n in ns:
        ax.plot([n] * len(gates[n]), [float(r["tps"]) for r in gates[n]], ".", color="grey", alpha=0.6)
    if 1 in gates:
        one = median(gates[1], "tps")
        ax.plot(ns, [TARGET * n * one for n in ns], "--", label=f"{TARGET} x N x one broker (target)")
        ax.plot(ns, [n * one for n in ns], ":", label="N x one broker")
    for name, rows in by_server.items():
        if not name.startswith("rmqgate"):
            ax.axhline(median(rows, "tps"), color="tab:red", linewidth=1, label=name)
    ax.set_xlabel("brokers N")
    ax.set_ylabel("aggregate sends/s (messages stored)")
    ax.set_xticks(ns)
    ax.set_ylim(bottom=0)
    ax.set_title(
        f"rmqgate scale-out, stock benchmark Producer, {gates[ns[0]][0]['cpus'] if ns else '?'} CPUs"
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--out", type=Path, default=Path("."), help="folder for scaleout.md and scaleout.png")
    args = ap.parse_args()
    if not args.csv.exists() or args.csv.stat().st_size == 0:
        raise SystemExit(f"{args.csv}: no run finished")
    by_server = read_runs(args.csv)
    lines = table(by_server)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaleout.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if plot(by_server, args.out / "scaleout.png"):
        print(f"plot: {args.out / 'scaleout.png'}")
    else:
        print("no plot: matplotlib is not installed")


if __name__ == "__main__":
    main()
