"""``rmqgate serve``: the name server and/or the broker in one asyncio process (both by default),
or with ``--brokers N`` a supervisor of N broker processes (server/cluster.py). broker.conf keys come
from ``--conf``, flags win; once listening, one ``rmqgate ready: ...`` line goes to stdout. SIGTERM/SIGINT
unregister, answer parked pulls, close the store and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys

from rmqgate.server import eventloop
from rmqgate.server.config import BrokerConfig, ConfigError, NamesrvConfig, load_broker_conf
from rmqgate.server.eventloop import EVENT_LOOPS

log = logging.getLogger("rmqgate.server.main")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", metavar="DIR", help="store root (storePathRootDir); default ~/.rmqgate/store"
    )
    parser.add_argument(
        "--namesrv-port", type=int, default=None, help="name server port (default 9876; 0 = any)"
    )
    parser.add_argument(
        "--broker-port", type=int, default=None, help="broker port (listenPort, default 10911; 0 = any)"
    )
    parser.add_argument("--role", choices=("all", "namesrv", "broker"), default="all")
    parser.add_argument(
        "--namesrv-addr",
        metavar="HOST:PORT[;HOST:PORT]",
        help="name servers the broker registers with (namesrvAddr)",
    )
    parser.add_argument("--conf", metavar="broker.conf", help="RocketMQ broker properties file")
    parser.add_argument(
        "--acl",
        metavar="FILE",
        help="plain_acl.yml read when broker.conf has aclEnable=true (default $ROCKETMQ_HOME/conf/plain_acl.yml)",
    )
    parser.add_argument(
        "--listen", metavar="HOST", default="0.0.0.0", help="address to listen on (default 0.0.0.0)"
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        help="close connections idle for N s (default 120; the broker's default is broker.conf's "
        "serverChannelMaxIdleTimeSeconds)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="N",
        help="serve Prometheus metrics on http://HOST:N/metrics (broker.conf metricsPort; default off)",
    )
    parser.add_argument(
        "--brokers",
        metavar="N|auto",
        default=None,
        help="run N broker processes of one cluster (<brokerName>-0..N-1, ports listenPort + 4*i, stores "
        "<store>/broker-<i>), restarted when they exit; auto = one per CPU (broker.conf brokerProcesses)",
    )
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default=None,
        help="asyncio's own loop or uvloop; auto = uvloop where installed (broker.conf eventLoop; default auto)",
    )
    parser.add_argument("--log-level", default=os.environ.get("RMQGATE_LOG_LEVEL", "INFO"))


def build_config(args: argparse.Namespace) -> BrokerConfig:
    config = BrokerConfig()
    if args.conf:
        load_broker_conf(args.conf, config)
    if args.store:
        config.storePathRootDir = args.store
    if args.broker_port is not None:
        config.listenPort = args.broker_port
    if args.namesrv_addr:
        config.namesrvAddr = args.namesrv_addr
    if getattr(args, "metrics_port", None) is not None:
        config.metricsPort = args.metrics_port
    if getattr(args, "event_loop", None):
        config.eventLoop = args.event_loop
    config.storePathRootDir = os.path.expanduser(config.storePathRootDir)
    config.check_role()
    config.check_delay_levels()
    config.check_store_paths()
    return config


def broker_processes(args: argparse.Namespace, config: BrokerConfig) -> int:
    """How many supervised broker processes to run: ``--brokers``, else broker.conf's key; 0 = the
    broker runs in this process."""
    from rmqgate.server.cluster import PROCESSES_KEY, parse_brokers

    value = getattr(args, "brokers", None) or config.extra.get(PROCESSES_KEY) or "0"
    count = parse_brokers(value)
    if count and args.role == "namesrv":
        raise ConfigError(f"{PROCESSES_KEY}={value}: --role namesrv runs no broker")
    return count


def _child_args(args: argparse.Namespace) -> list[str]:
    """The flags a supervised broker shares with its parent (the rest is in its broker.conf)."""
    out = ["--listen", args.listen, "--log-level", str(args.log_level)]
    if args.idle_timeout is not None:
        out += ["--idle-timeout", str(args.idle_timeout)]
    if getattr(args, "event_loop", None):
        out += ["--event-loop", args.event_loop]
    if getattr(args, "acl", None):
        out += ["--acl", os.path.abspath(args.acl)]
    return out


def _advertised(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


async def serve(
    args: argparse.Namespace, stop: asyncio.Event | None = None, config: BrokerConfig | None = None
) -> int:
    from rmqgate.server.namesrv import NamesrvController
    from rmqgate.server.remoting import DEFAULT_IDLE_TIMEOUT, RemotingServer

    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    config = config or build_config(args)
    processes = broker_processes(args, config)
    parts = []
    namesrv = namesrv_server = broker = supervisor = None
    try:
        if args.role in ("all", "namesrv"):
            port = 9876 if args.namesrv_port is None else args.namesrv_port
            kv_path = os.path.join(os.path.expanduser("~"), ".rmqgate", "namesrv", "kvConfig.json")
            if args.store:
                kv_path = os.path.join(config.storePathRootDir, "namesrv", "kvConfig.json")
            namesrv = NamesrvController(NamesrvConfig(kvConfigPath=kv_path, listenPort=port))
            namesrv_server = RemotingServer(
                args.listen,
                port,
                namesrv.processors(),
                idle_timeout=DEFAULT_IDLE_TIMEOUT if args.idle_timeout is None else args.idle_timeout,
                name="namesrv",
            )
            await namesrv_server.start()
            await namesrv.start()
            namesrv_addr = f"{_advertised(args.listen)}:{namesrv_server.port}"
            parts.append(f"namesrv {namesrv_addr}")
            log.info("name server listening on %s:%d", args.listen, namesrv_server.port)
            if args.role == "all" and not config.namesrvAddr:
                config.namesrvAddr = namesrv_addr
        if processes:
            from rmqgate.server.cluster import ClusterSupervisor, plan_brokers

            supervisor = ClusterSupervisor(
                plan_brokers(config, processes),
                parent_conf=os.path.abspath(args.conf) if args.conf else None,
                child_args=_child_args(args),
            )
            for addr in await supervisor.start():
                parts.append(f"broker {addr}")
            log.info(
                "%d brokers of cluster %s running, stores under %s, name servers %s",
                processes, config.brokerClusterName, config.storePathRootDir, config.namesrvAddr or "-",
            )  # fmt: skip
        elif args.role in ("all", "broker"):
            from rmqgate.server.broker import BrokerController

            broker = BrokerController(
                config,
                listen_host=args.listen,
                idle_timeout=args.idle_timeout,
                config_path=args.conf,
                acl_file=getattr(args, "acl", None),
            )
            await broker.start()
            parts.append(f"broker {config.broker_addr}")
            log.info(
                "broker %s (cluster %s) listening on %s:%d, store %s, name servers %s",
                config.brokerName, config.brokerClusterName, args.listen, broker.port,
                config.storePathRootDir, config.namesrvAddr or "-",
            )  # fmt: skip
        log.info("event loop: %s", eventloop.loop_name(loop))
        print("rmqgate ready: " + " ".join(parts), flush=True)
        await stop.wait()
        log.info("shutting down")
        return 0
    finally:
        if supervisor is not None:
            await supervisor.stop()
        if broker is not None:
            await broker.stop()
        if namesrv is not None:
            await namesrv.stop()
        if namesrv_server is not None:
            await namesrv_server.stop()


def event_loop(config: BrokerConfig) -> str:
    """``asyncio`` or ``uvloop`` for the config's eventLoop (``--event-loop`` over broker.conf's, as
    build_config sets it); ConfigError for an unknown name, or uvloop where it is not installed."""
    try:
        return eventloop.resolve(config.eventLoop)
    except (ValueError, ImportError) as exc:
        raise ConfigError(f"{exc}") from None


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = build_config(args)
        return eventloop.run(serve(args, config=config), event_loop(config))
    except ConfigError as exc:
        print(f"rmqgate serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"rmqgate serve: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
