"""The ``rmqgate`` command: one entry point whose subcommands live with the package they drive."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# subcommand -> module providing ``add_arguments(parser)`` and ``run(args) -> int``
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("rmqgate.server.main", "run the name server and broker"),
    "pcap": ("rmqgate.tools.pcap_cli", "decode or convert RocketMQ traffic in pcap captures"),
    "store": ("rmqgate.store.cli", "inspect a store; import/export RocketMQ config JSON"),
    "capture": ("rmqgate.tools.capture_cli", "statistics, conversion and listing of capture files"),
    "proxy": ("rmqgate.tools.proxy", "recording proxy in front of a name server and its brokers"),
    "replay": ("rmqgate.tools.replay_cli", "replay a pcap or capture against a name server and its brokers"),
    "spark-replay": ("rmqgate.spark.cli", "replay captures at scale on Spark (local mode by default)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rmqgate", description="RocketMQ-compatible broker and tools")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            p.set_defaults(_missing=name)
            continue
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if getattr(args, "_missing", None):
        print(f"rmqgate {args._missing}: not yet implemented", file=sys.stderr)
        return 3
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
