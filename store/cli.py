"""``rmqgate store``: import/export RocketMQ config JSON to/from the LMDB side-store; store stats."""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
from pathlib import Path

from rmqgate.store.config_io import export_config, import_config
from rmqgate.store.meta import DATABASES, LmdbMetaStore


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="store_command", metavar="SUBCOMMAND")
    for name, help_text in (
        ("import-config", "read topics.json, consumerOffset.json, subscriptionGroup.json, delayOffset.json"),
        ("export-config", "write topics.json, consumerOffset.json, subscriptionGroup.json, delayOffset.json"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("dir", type=Path, help="config directory (a Java broker's <storeRoot>/config)")
        p.add_argument("--store", type=Path, required=True, help="rmqgate store root")
    p = sub.add_parser("stat", help="CommitLog/ConsumeQueue extent and metadata counts (read-only scan)")
    p.add_argument("--store", type=Path, required=True, help="store root")
    p.add_argument(
        "--commitlog",
        type=Path,
        default=None,
        help="CommitLog directory (storePathCommitLog; default <store>/commitlog)",
    )


def _meta(root: Path) -> LmdbMetaStore:
    return LmdbMetaStore(root / "meta")


def _lock_store(root: Path) -> int | None:
    """The store's own lock (``<root>/lock``, what a running broker holds), or None when taken: an
    import under a running broker would be overwritten by its next persist, and an LMDB map grown
    here would fail the broker's transactions."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def run(args: argparse.Namespace) -> int:
    cmd = getattr(args, "store_command", None)
    if cmd is None:
        print("rmqgate store: give a subcommand (import-config, export-config, stat)", file=sys.stderr)
        return 2
    root: Path = args.store
    if cmd in ("import-config", "export-config"):
        if cmd == "import-config" and not args.dir.is_dir():
            print(f"rmqgate store: {args.dir} is not a directory", file=sys.stderr)
            return 1
        lock = _lock_store(root)
        if lock is None:
            print(f"rmqgate store: {root} is in use (a broker runs on it): stop it first", file=sys.stderr)
            return 1
        try:
            meta = _meta(root)
            try:
                counts = (
                    import_config(meta, args.dir) if cmd == "import-config" else export_config(meta, args.dir)
                )
                meta.set_import_state("ready")
            finally:
                meta.close()
        finally:
            os.close(lock)
        for name, n in counts.items():
            print(f"{name}: {n} entries")
        return 0
    return _stat(root, args.commitlog or root / "commitlog")


def _stat(root: Path, cl: Path) -> int:
    segs = sorted(p for p in cl.iterdir() if p.name.isdigit()) if cl.is_dir() else []
    print(
        f"commitlog: {len(segs)} segment(s)"
        + (f", first {segs[0].name}, last {segs[-1].name}" if segs else "")
    )
    cq = root / "consumequeue"
    if cq.is_dir():
        for t in sorted(cq.iterdir()):
            qs = sorted(int(q.name) for q in t.iterdir() if q.name.isdigit())
            print(f"consumequeue {t.name}: queues {qs}")
    idx = root / "index"
    print(f"index: {len(list(idx.iterdir())) if idx.is_dir() else 0} file(s)")
    print(f"abort file: {'present' if (root / 'abort').exists() else 'absent'}")
    if (root / "meta").is_dir():
        meta = _meta(root)
        try:
            for db in DATABASES:
                print(f"meta {db}: {sum(1 for _ in meta.items(db))}")
        finally:
            meta.close()
    return 0
