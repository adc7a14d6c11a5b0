"""Stock mqadmin (4.9.8's ``bin/mqadmin.sh``) run against rmqgate's name server and against the
stock Java name server and broker, on the same state, with equivalent output: 52 of its 57
commands (not startMonitoring, which runs until stopped, nor the ACL writes: neither broker has
ACL on), with flag variants and the answers for a missing topic, group, key or message.

A background Java program (java/AdminClients.java) keeps a producer and a push consumer live on
each broker after sending a few keyed messages; then every command runs on both clusters at once,
in a thread pool (a JVM per call is mostly start-up wait). What legitimately differs between two
brokers (addresses, names, ids, timestamps, TPS figures, object hashes) is normalised away and the rest
compared line by line: same columns and keys, same rows for the same state, same success and
error text. The outcome of each command is collected in a table printed in the pytest summary.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests import java

#: the module's one fixture runs all ~140 mqadmin calls: about 2-3 minutes on an idle 2-core
#: machine, more when other suites share it
pytestmark = [pytest.mark.slow, pytest.mark.java, pytest.mark.timeout(900)]

BROKERS = ("rmqgate", "java")
TIMING: dict[str, float] = {}
MESSAGES = 4
POOL = 8


@dataclasses.dataclass
class Ctx:
    """One cluster's side of the run: its addresses and names and the state made on it."""

    broker_id: str  # "rmqgate" | "java"
    namesrv: str
    broker: str
    broker_name: str
    cluster_name: str
    token: str
    export_dir: Path
    sent: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    client_id: str = ""  # AdminClients' consumer

    def name(self, kind: str) -> str:
        """A topic / group name of this run, the same on both clusters."""
        return f"mqa_{kind}_{self.token}"

    @property
    def topic(self) -> str:
        return self.name("topic")

    @property
    def cgroup(self) -> str:
        return self.name("cg")

    @property
    def pgroup(self) -> str:
        return self.name("pg")


Steps = Callable[[Ctx], list[list[str]]]
Normaliser = Callable[[str, Ctx], list[str]]


@dataclasses.dataclass
class Case:
    """One mqadmin command: the calls it makes (in order, outputs joined) and how to compare them."""

    command: str
    steps: Steps
    #: text Java's output must hold (formatted like the arguments): the command did its work there,
    #: so two clusters failing alike is not taken for equal behaviour
    expect: str
    phase: int = 1
    normalise: Normaliser | None = None
    #: the command prints until it is stopped (clusterRT): killed after KILLED_AFTER seconds
    runs_until_killed: bool = False
    #: how often a call that timed out in the tool (a loaded machine) is run again
    retries: int = 2
    #: output that also means "timed out" for this command (a send it reports as failed)
    retry_on: str = ""
    #: where rmqgate deliberately answers otherwise than Java, why (shown in the summary table)
    note: str = ""


# -- normalisation ------------------------------------------------------------------------------

#: Lines the JVM or the client libraries print around a command's own output.
NOISE = re.compile(r"^(RocketMQLog|SLF4J|log4j|WARNING|OpenJDK|Java HotSpot)|^\[[\d.]+s\]\[warning\]|^\s*$")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}[ T#]\d{2}:\d{2}:\d{2}([,.:]\d{3})?")
CLIENT_ID = re.compile(r"\b\d+\.\d+\.\d+\.\d+@[\w#.:-]+")
ADDR = re.compile(r"\b\d+\.\d+\.\d+\.\d+:\d+\b")
#: offset message ids (32 hex digits) and unique keys (IPv6 hosts give 56): broker and client made
MSG_ID = re.compile(r"\b[0-9A-F]{32,}\b")
MILLIS = re.compile(r"(?<![\d.])1\d{12}\b")  # (not a fraction's digits)
#: CommitLog positions and sizes: every stored message carries the CLUSTER property, whose value
#: (the cluster name) is two characters longer on rmqgate's suite broker than on the Java one
STORE_POSITION = re.compile(r"\b(storeSize|commitLogOffset|physicOffset|physicSize)=\d+")
#: a Java object's default toString (class@identity hash) and a lambda's class name, as a client's
#: running info prints its fields (consumerStatus -i)
OBJECT_HASH = re.compile(r"([A-Za-z_$][\w$]*)@[0-9a-f]{1,8}\b")
LAMBDA = re.compile(r"\$\$Lambda\$[0-9a-fx/]+")
NUMBER = re.compile(r"-?\d+(\.\d+)?")
RATE = re.compile(r"-?\d+\.\d+")


def substitute(text: str, ctx: Ctx) -> str:
    """The names and ids two clusters legitimately differ in, replaced by placeholders."""
    for value, label in (
        (str(ctx.export_dir), "<export>"),
        (ctx.broker, "<broker-addr>"),
        (ctx.namesrv, "<namesrv-addr>"),
        (ctx.cluster_name, "<cluster>"),
        (ctx.broker_name, "<broker-name>"),
    ):
        text = text.replace(value, label)
    text = DATE.sub("<date>", text)
    text = CLIENT_ID.sub("<client-id>", text)
    text = ADDR.sub("<addr>", text)
    text = MSG_ID.sub("<msg-id>", text)
    text = MILLIS.sub("<millis>", text)
    text = LAMBDA.sub("$$Lambda", OBJECT_HASH.sub(r"\1@<hash>", text))
    return STORE_POSITION.sub(r"\1=<pos>", text)


def lines(output: str, ctx: Ctx) -> list[str]:
    """Output lines, noise dropped, names replaced, runs of blanks (column padding) made one."""
    return [" ".join(line.split()) for line in substitute(output, ctx).splitlines() if not NOISE.search(line)]


def numbers_masked(output: str, ctx: Ctx) -> list[str]:
    """As ``lines``, every number masked: rates, latencies and counters of live traffic."""
    return [NUMBER.sub("<n>", line) for line in lines(output, ctx)]


def rates_masked(output: str, ctx: Ctx) -> list[str]:
    """As ``lines``, decimal figures (rates, TPS) masked; counts and offsets kept."""
    return [RATE.sub("<rate>", line) for line in lines(output, ctx)]


def distinct_numbers_masked(output: str, ctx: Ctx) -> list[str]:
    """As ``numbers_masked``, each distinct line once (a command that prints every interval)."""
    return sorted(set(numbers_masked(output, ctx)))


#: Why some outputs are compared without their order: the tool iterates a HashSet or HashMap of
#: MessageQueue, whose hash covers the broker name, so the two clusters' names order it differently.


def sorted_lines(output: str, ctx: Ctx) -> list[str]:
    """As ``lines``, order ignored (a map of MessageQueue keys, see above)."""
    return sorted(lines(output, ctx))


def sorted_blocks(output: str, ctx: Ctx) -> list[str]:
    """printMsg: one block of lines per queue (a HashSet, see above), blocks in sorted order."""
    blocks: list[list[str]] = [[]]
    for line in lines(output, ctx):
        if set(line) == {"-"}:
            blocks.append([])
        else:
            blocks[-1].append(line)
    return [line for block in sorted(blocks) for line in block]


def allocation(output: str, ctx: Ctx) -> list[str]:
    """allocateMQ: how many queues each client gets, and that together they get each queue once
    (which client gets which follows the order of a HashSet, see above)."""
    result = json.loads(next(line for line in lines(output, ctx) if line.startswith("{")))["result"]
    queues = sorted(json.dumps(q, sort_keys=True) for qs in result.values() for q in qs)
    return [f"{client}: {len(qs)} queues" for client, qs in sorted(result.items())] + queues


def producers_of_the_clients(output: str, ctx: Ctx) -> list[str]:
    """producer: the entries of AdminClients' client (its group and the client's inner producer);
    the other mqadmin calls running at the same time register their own inner producers."""
    ids = set()
    for line in output.splitlines():
        if f"({ctx.pgroup})" in line:
            ids.update(re.findall(r"clientId=([^,]+),", line))
    kept = [line for line in output.splitlines() if any(f"clientId={i}," in line for i in ids)]
    return sorted(numbers_masked("\n".join(kept), ctx))


def own_groups(output: str, ctx: Ctx) -> list[str]:
    """consumerProgress without a group: the header and this run's groups (other tests' groups
    and the tools' own come and go), rates masked."""
    return sorted(
        RATE.sub("<rate>", line) for line in lines(output, ctx) if line.startswith("#") or ctx.token in line
    )


def exported(path: str) -> Normaliser:
    """exportMetadata / exportConfigs: the tool's line and the file it wrote, key for key (names
    replaced; the export time and the topics and groups other cases or tests make meanwhile left
    out)."""

    def normalise(output: str, ctx: Ctx) -> list[str]:
        data = json.loads((ctx.export_dir / path).read_text())
        data.pop("exportTime", None)
        for table in ("topicConfigTable", "subscriptionGroupTable"):
            if table in data:
                data[table] = {k: v for k, v in data[table].items() if "mqa_x_" not in k and "ct_" not in k}
        return lines(output + "\n" + json.dumps(data, indent=1, sort_keys=True), ctx)

    return normalise


def masked_figures(value: Any) -> Any:
    """A JSON value with every number (and number written as text) replaced by ``<n>``."""
    if isinstance(value, dict):
        return {k: masked_figures(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked_figures(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "<n>"
    if isinstance(value, str) and NUMBER.fullmatch(value):
        return "<n>"
    return value


def exported_metrics(output: str, ctx: Ctx) -> list[str]:
    """exportMetrics: the tool's line and the file's keys; its figures (sizes, rates, counts of the
    topics the concurrent cases make) are masked."""
    data = masked_figures(json.loads((ctx.export_dir / "metrics/metrics.json").read_text()))
    return lines(output + "\n" + json.dumps(data, indent=1, sort_keys=True), ctx)


def stats_all(output: str, ctx: Ctx) -> list[str]:
    """statsAll: topic, group and accumulation kept; the rates and the 24-hour counts masked (a
    Java broker counts a new stats item from its first hourly sample on, so a topic's first hour
    reads 0 there; rmqgate counts from the item's first message)."""
    out = []
    for line in lines(output, ctx):
        cells = line.split(" ")
        if len(cells) == 7 and not line.startswith("#"):
            line = " ".join([*cells[:3], "<rate>", "<rate>", "<count>", "<count>"])
        out.append(line)
    return out


def failure_only(output: str, ctx: Ctx) -> list[str]:
    """That the command failed, and its header: the exception the tool wraps, not its cause."""
    return [line for line in lines(output, ctx) if line.startswith("#") or "command failed" in line]


def topic_list(output: str, ctx: Ctx) -> list[str]:
    """topicList, order ignored (a hash set), without the topics the concurrent cases create and
    delete (``mqa_x_*``) or other tests of the session made (``ct_*``)."""
    return sorted(line for line in lines(output, ctx) if "mqa_x_" not in line and "ct_" not in line)


#: rmqgate's own broker.conf keys (reported, so mqadmin can read and update them; Java has none)
RMQGATE_KEYS = {
    "indexDispatchProcess",
    "commitLogWarmAhead",
    "channelExpiredTimeout",
    "metricsPort",
    "eventLoop",
}
#: keys of a path rmqgate does not have: no ROCKETMQ_HOME, and updateNamesrvConfig is not persisted
NO_SUCH_PATH = {"rocketmqHome", "configStorePath"}


def config_keys(output: str, ctx: Ctx) -> list[str]:
    """``key = value`` listings (getBrokerConfig, getNamesrvConfig, brokerStatus): the keys, sorted;
    values are the two processes' own (paths, thread counts, TPS figures)."""
    keys = set()
    for line in lines(output, ctx):
        key = re.split(r"\s*[=:]\s", line, maxsplit=1)[0].strip()
        keys.add(re.sub(r"^(commitLogDiskRatio)_.*", r"\1_<dir>", key))
    return sorted(keys - RMQGATE_KEYS - NO_SUCH_PATH)


#: brokerStatus keys whose values two idle brokers on one machine share: versions, disk ratios,
#: queue capacities and sizes, counters the concurrent cases do not move
SAME_STATUS = re.compile(
    r"brokerVersion(Desc)?|commitLogDiskRatio(_<dir>)?|consumeQueueDiskRatio|commitLogMinOffset|dispatchBehindBytes"
    r"|\w+QueueCapacity|\w+QueueSize|msg(Put|Get)Total\w*Morning|putMessageFailedTimes|remainHowManyDataToFlush"
    r"|remainTransientStoreBufferNumbs|startAcceptSendRequestTimeStamp|pageCacheLockTimeMills"
)
#: brokerStatus keys compared by their form only (the figures are the moment's); a Java broker's
#: putMessageDistributeTime reads "null" until its first minute's sample, so only its key counts
FORM_STATUS = {"runtime", "commitLogDirCapacity"}


def broker_status(output: str, ctx: Ctx) -> list[str]:
    """brokerStatus: every key; the values of SAME_STATUS, the form of FORM_STATUS's."""
    out = []
    for line in lines(output, ctx):
        key, value = [*(part.strip() for part in re.split(r"\s*:\s", line, maxsplit=1)), ""][:2]
        key = re.sub(r"^(commitLogDiskRatio)_.*", r"\1_<dir>", key)
        if key in RMQGATE_KEYS | NO_SUCH_PATH:
            continue
        if SAME_STATUS.fullmatch(key):
            out.append(f"{key} : {value}")
        elif key in FORM_STATUS:
            out.append(f"{key} : {NUMBER.sub('<n>', value)}")
        else:
            out.append(key)
    return sorted(out)


def updated_key(key: str) -> Normaliser:
    """An update followed by a get: the update's answer and the key's line in the listing."""

    def normalise(output: str, ctx: Ctx) -> list[str]:
        return [line for line in lines(output, ctx) if key in line or "update" in line.lower()]

    return normalise


PERM_COUNT = re.compile(r"(perm of broker.* OK, )(\d+)")


def perm_count_is_topics_listed(output: str, ctx: Ctx) -> list[str]:
    """wipeWritePerm / addWritePerm print how many topics the name server routes to the broker;
    that count must be the topics topicList lists then. Which topics those are is not compared:
    a short-lived mqadmin consumer (consumeMessage) creates its retry topic only if its first
    heartbeat, a second after start, goes out before it exits."""
    found = lines(output, ctx)
    perm = [line for line in found if PERM_COUNT.search(line)]
    listed = len(found) - len(perm) - sum(1 for line in found if not line)
    return [
        PERM_COUNT.sub(
            lambda m: m[1] + ("<topics listed>" if int(m[2]) == listed else f"{m[2]} of {listed}"), line
        )
        for line in perm
    ]


# -- the cases ----------------------------------------------------------------------------------


def fmt(arg: str, ctx: Ctx) -> str:
    first = ctx.sent[0] if ctx.sent else {}
    return arg.format(
        ns=ctx.namesrv,
        broker=ctx.broker,
        broker_name=ctx.broker_name,
        cluster=ctx.cluster_name,
        topic=ctx.topic,
        cg=ctx.cgroup,
        pg=ctx.pgroup,
        x=ctx.name("x"),
        send_topic=ctx.name("x_send"),
        export=ctx.export_dir,
        msg_id=first.get("msgId", ""),
        offset_msg_id=first.get("offsetMsgId", ""),
        # the broker's address with a CommitLog offset past the end
        missing_msg_id=first.get("offsetMsgId", "")[:16] + "0000000000FFFFFF",
        queue_id=first.get("queueId", 0),
        queue_offset=first.get("queueOffset", 0),
        client_id=ctx.client_id,
        none=ctx.name("x_none"),
    )


def calls(*argv: tuple[str, ...]) -> Steps:
    """mqadmin calls (run in order) whose arguments name ``{ns}``, ``{topic}``, ... of a Ctx."""

    def steps(ctx: Ctx) -> list[list[str]]:
        return [[fmt(a, ctx) for a in args] for args in argv]

    return steps


def admin(*args: str) -> Steps:
    return calls(args)


NS = ("-n", "{ns}")
SENT = "body-0"  # the first message AdminClients sent (key-0, queue 0, offset 0)

CASES: list[Case] = [
    Case("clusterList", admin("clusterList", *NS), "#Cluster Name", normalise=numbers_masked),
    Case(
        "brokerStatus",
        admin("brokerStatus", *NS, "-b", "{broker}"),
        "msgPutTotalTodayNow",
        normalise=broker_status,
    ),
    Case("topicList", admin("topicList", *NS), "{topic}", normalise=topic_list),
    Case("topicList -c", admin("topicList", *NS, "-c"), "#Cluster Name", normalise=topic_list),
    Case("topicRoute", admin("topicRoute", *NS, "-t", "{topic}"), '"queueDatas"'),
    Case("topicRoute -l", admin("topicRoute", *NS, "-t", "{topic}", "-l"), "#ClusterName"),
    Case("topicStatus", admin("topicStatus", *NS, "-t", "{topic}"), "#Max Offset"),
    Case("topicClusterList", admin("topicClusterList", *NS, "-t", "{topic}"), "{cluster}"),
    Case(
        "updateTopic",
        calls(
            ("updateTopic", *NS, "-c", "{cluster}", "-t", "{x}_ut", "-r", "3", "-w", "2", "-o", "false"),
            ("topicRoute", *NS, "-t", "{x}_ut"),
        ),
        "create topic to",
    ),
    Case(
        "updateTopicPerm",
        calls(
            ("updateTopic", *NS, "-b", "{broker}", "-t", "{x}_utp"),
            ("updateTopicPerm", *NS, "-c", "{cluster}", "-t", "{x}_utp", "-p", "4"),
            ("topicRoute", *NS, "-t", "{x}_utp"),
        ),
        "update topic perm from 6 to 4",
    ),
    Case(
        "deleteTopic",
        calls(
            ("updateTopic", *NS, "-c", "{cluster}", "-t", "{x}_dt"),
            ("deleteTopic", *NS, "-c", "{cluster}", "-t", "{x}_dt"),
            ("topicRoute", *NS, "-t", "{x}_dt"),
        ),
        "No topic route info in name server for the topic",
    ),
    Case(
        "updateSubGroup",
        calls(
            ("updateSubGroup", *NS, "-c", "{cluster}", "-g", "{x}_usg", "-r", "5", "-q", "2", "-d", "true"),
            ("getConsumerConfig", *NS, "-g", "{x}_usg"),
        ),
        "retryMaxTimes = 5",
    ),
    Case(
        "deleteSubGroup",
        calls(
            ("updateSubGroup", *NS, "-b", "{broker}", "-g", "{x}_dsg"),
            ("deleteSubGroup", *NS, "-c", "{cluster}", "-g", "{x}_dsg"),
            ("getConsumerConfig", *NS, "-g", "{x}_dsg"),
        ),
        "delete subscription group [{x}_dsg]",
    ),
    Case("getConsumerConfig", admin("getConsumerConfig", *NS, "-g", "{cg}"), "groupName = {cg}"),
    Case(
        "consumerProgress",
        admin("consumerProgress", *NS, "-g", "{cg}"),
        "Diff Total: 0",
        normalise=rates_masked,
    ),
    Case(
        "consumerProgress -s",
        admin("consumerProgress", *NS, "-g", "{cg}", "-s", "true"),
        "#Client IP",
        normalise=rates_masked,
    ),
    Case("consumerConnection", admin("consumerConnection", *NS, "-g", "{cg}"), "CONSUME_PASSIVELY"),
    Case("producerConnection", admin("producerConnection", *NS, "-g", "{pg}", "-t", "{topic}"), "JAVA"),
    Case("consumerStatus", admin("consumerStatus", *NS, "-g", "{cg}"), "Rebalance OK"),
    Case("queryMsgById", admin("queryMsgById", *NS, "-i", "{offset_msg_id}"), "Keys: [key-0]"),
    Case("queryMsgByKey", admin("queryMsgByKey", *NS, "-t", "{topic}", "-k", "key-0"), "#Message ID"),
    Case(
        "queryMsgByUniqueKey",
        admin("queryMsgByUniqueKey", *NS, "-t", "{topic}", "-i", "{msg_id}"),
        "Keys: [key-0]",
    ),
    Case(
        "queryMsgByOffset",
        admin(
            "queryMsgByOffset",
            *NS,
            "-t",
            "{topic}",
            "-b",
            "{broker_name}",
            "-i",
            "{queue_id}",
            "-o",
            "{queue_offset}",
        ),
        "Keys: [key-0]",
    ),
    Case(
        "printMsg",
        admin("printMsg", *NS, "-t", "{topic}", "-d", "true"),
        f"BODY: {SENT}",
        normalise=sorted_blocks,
    ),
    Case(
        "printMsgByQueue",
        admin(
            "printMsgByQueue",
            *NS,
            "-t",
            "{topic}",
            "-a",
            "{broker_name}",
            "-i",
            "{queue_id}",
            "-p",
            "true",
            "-d",
            "true",
            "-f",
            "true",
        ),
        "Tag: TagA Count: 1",
    ),
    Case(
        "getBrokerConfig",
        admin("getBrokerConfig", *NS, "-b", "{broker}"),
        "brokerName",
        normalise=config_keys,
    ),
    Case("getNamesrvConfig", admin("getNamesrvConfig", *NS), "kvConfigPath", normalise=config_keys),
    Case(
        "updateKvConfig / deleteKvConfig",
        calls(
            ("updateKvConfig", *NS, "-s", "{x}_ns", "-k", "k1", "-v", "v1"),
            ("deleteKvConfig", *NS, "-s", "{x}_ns", "-k", "k1"),
        ),
        "delete kv config from namespace success",
    ),
    Case(
        "statsAll",
        admin("statsAll", *NS, "-t", "{topic}"),
        "{cg}",
        normalise=stats_all,
        note="24-hour counts masked: Java's read 0 in a stats item's first hour, rmqgate's the messages",
    ),
    Case(
        "brokerConsumeStats",
        admin("brokerConsumeStats", *NS, "-b", "{broker}"),
        "{cg}",
    ),
    Case(
        "checkMsgSendRT",
        admin("checkMsgSendRT", *NS, "-t", "{send_topic}", "-a", "3", "-s", "64"),
        "Avg RT",
        normalise=numbers_masked,
        retry_on=r"\sfalse\s",
    ),
    Case(
        "sendMessage",
        admin("sendMessage", *NS, "-t", "{send_topic}", "-p", "hello", "-k", "k", "-c", "TagB"),
        "SEND_OK",
        normalise=numbers_masked,
    ),
    Case(
        "clusterRT",
        admin("clusterRT", *NS, "-a", "2", "-i", "1", "-c", "{cluster}"),
        "#successCount",
        normalise=distinct_numbers_masked,
        runs_until_killed=True,
    ),
    Case(
        "allocateMQ",
        admin("allocateMQ", *NS, "-t", "{topic}", "-i", "10.0.0.1,10.0.0.2"),
        '"result"',
        normalise=allocation,
    ),
    Case(
        "updateOrderConf",
        calls(
            ("updateOrderConf", *NS, "-t", "{x}_oc", "-m", "put", "-v", "{broker_name}:4"),
            ("updateOrderConf", *NS, "-t", "{x}_oc", "-m", "get"),
            ("updateOrderConf", *NS, "-t", "{x}_oc", "-m", "delete"),
        ),
        "delete orderConf success",
    ),
    Case(
        "queryCq",
        admin("queryCq", *NS, "-t", "{topic}", "-q", "{queue_id}", "-i", "0", "-c", "2", "-b", "{broker}"),
        "tagsCode=",
    ),
    Case("producer", admin("producer", *NS, "-b", "{broker}"), "{pg}", normalise=producers_of_the_clients),
    Case("cleanExpiredCQ", admin("cleanExpiredCQ", *NS, "-b", "{broker}"), "success"),
    Case("deleteExpiredCommitLog", admin("deleteExpiredCommitLog", *NS, "-b", "{broker}"), "success"),
    Case("cleanUnusedTopic", admin("cleanUnusedTopic", *NS, "-b", "{broker}"), "success"),
    Case(
        "exportMetadata",
        admin("exportMetadata", *NS, "-c", "{cluster}", "-f", "{export}/meta"),
        "success",
        normalise=exported("meta/metadata.json"),
    ),
    Case(
        "exportConfigs",
        admin("exportConfigs", *NS, "-c", "{cluster}", "-f", "{export}/conf"),
        "success",
        normalise=exported("conf/configs.json"),
    ),
    Case(
        "exportMetrics",
        admin("exportMetrics", *NS, "-c", "{cluster}", "-f", "{export}/metrics"),
        "success",
        normalise=exported_metrics,
    ),
    Case(
        "clusterList -m",
        admin("clusterList", *NS, "-m"),
        "#Cluster Name",
        normalise=numbers_masked,
    ),
    Case(
        "consumerProgress (all groups)",
        admin("consumerProgress", *NS),
        "#Group",
        normalise=own_groups,
    ),
    Case(
        "consumerStatus -i",
        admin("consumerStatus", *NS, "-g", "{cg}", "-i", "{client_id}"),
        "#Consumer Subscription#",
        normalise=numbers_masked,
    ),
    Case(
        "queryMsgById -g -d",
        admin("queryMsgById", *NS, "-i", "{offset_msg_id}", "-g", "{cg}", "-d", "{client_id}"),
        "ConsumeMessageDirectlyResult",
        normalise=numbers_masked,
    ),
    Case(
        "queryMsgTraceById",
        admin("queryMsgTraceById", *NS, "-i", "{msg_id}"),
        "RMQ_SYS_TRACE_TOPIC",
    ),
    Case(
        "sendMsgStatus",
        admin("sendMsgStatus", *NS, "-b", "{broker_name}", "-c", "2", "-s", "32"),
        "SEND_OK",
        normalise=numbers_masked,
    ),
    Case(
        "updateTopic -o true",
        calls(
            ("updateTopic", *NS, "-c", "{cluster}", "-t", "{x}_order", "-o", "true"),
            ("updateOrderConf", *NS, "-t", "{x}_order", "-m", "get"),
        ),
        "set cluster orderConf",
    ),
    Case(
        "clusterAclConfigVersion",
        admin("clusterAclConfigVersion", *NS, "-c", "{cluster}"),
        "ClusterAclConfigVersionListSubCommand command failed",
        normalise=failure_only,
        retries=0,
        note="both fail with ACL off: Java never answers (a NullPointerException in its processor), "
        "rmqgate answers at once with code 3 (not supported)",
    ),
    # what a command answers when its topic, group, key or message is not there
    Case("topicRoute (no topic)", admin("topicRoute", *NS, "-t", "{none}"), "CODE: 17"),
    Case("topicStatus (no topic)", admin("topicStatus", *NS, "-t", "{none}"), "CODE: 17"),
    Case("consumerConnection (no group)", admin("consumerConnection", *NS, "-g", "{none}"), "CODE: 17"),
    Case(
        "producerConnection (no group)",
        admin("producerConnection", *NS, "-g", "{none}", "-t", "{topic}"),
        "Exception",
    ),
    Case("consumerProgress (no group)", admin("consumerProgress", *NS, "-g", "{none}"), "CODE: 17"),
    Case("consumerStatus (no group)", admin("consumerStatus", *NS, "-g", "{none}"), "CODE: 17"),
    Case(
        "getConsumerConfig (no group)", admin("getConsumerConfig", *NS, "-g", "{none}"), ""
    ),  # prints nothing
    Case(
        "queryMsgByKey (no key)",
        admin("queryMsgByKey", *NS, "-t", "{topic}", "-k", "no-such-key"),
        "CODE: 208",
    ),
    Case(
        "queryMsgById (no message)",
        admin("queryMsgById", *NS, "-i", "{missing_msg_id}"),
        "Exception",
    ),
    Case(
        "queryMsgByUniqueKey (no message)",
        admin("queryMsgByUniqueKey", *NS, "-t", "{topic}", "-i", "7F0000010000000000000000000000AB"),
        "Exception",
    ),
    Case(
        "queryMsgByOffset (past the end)",
        admin("queryMsgByOffset", *NS, "-t", "{topic}", "-b", "{broker_name}", "-i", "0", "-o", "99"),
        "",  # prints nothing
    ),
    Case("deleteKvConfig (no key)", admin("deleteKvConfig", *NS, "-s", "{none}", "-k", "k"), "success"),
    Case(
        "updateOrderConf get (none)",
        admin("updateOrderConf", *NS, "-t", "{none}", "-m", "get"),
        "Exception",
    ),
    # phase 2: what changes the state the phase-1 commands read
    Case(
        "consumeMessage",
        admin(
            "consumeMessage",
            *NS,
            "-t",
            "{topic}",
            "-b",
            "{broker_name}",
            "-i",
            "0",
            "-o",
            "0",
            "-c",
            "2",
            "-g",
            "{x}_cm",
        ),
        "Consume ok",
        phase=2,
    ),
    Case(
        "wipeWritePerm / addWritePerm",
        calls(
            ("wipeWritePerm", *NS, "-b", "{broker_name}"),
            ("addWritePerm", *NS, "-b", "{broker_name}"),
            ("topicList", *NS),
        ),
        "add write perm of broker",
        phase=4,  # alone: nothing creates a topic while it counts them
        normalise=perm_count_is_topics_listed,
    ),
    Case(
        "updateBrokerConfig",
        calls(
            ("updateBrokerConfig", *NS, "-b", "{broker}", "-k", "clientManageThreadPoolNums", "-v", "33"),
            ("getBrokerConfig", *NS, "-b", "{broker}"),
        ),
        "clientManageThreadPoolNums = 33",
        phase=2,
        normalise=updated_key("clientManageThreadPoolNums"),
    ),
    Case(
        "updateNamesrvConfig",
        calls(("updateNamesrvConfig", *NS, "-k", "clusterTest", "-v", "false"), ("getNamesrvConfig", *NS)),
        "clusterTest = false",
        phase=2,
        normalise=updated_key("clusterTest"),
    ),
    Case(
        "resetOffsetByTime",
        admin("resetOffsetByTime", *NS, "-g", "{cg}", "-t", "{topic}", "-s", "now"),
        "rollback consumer offset by specified",
        phase=2,
        normalise=sorted_lines,
    ),
    # phase 3: the live consumer's group rewound (it then consumes everything again)
    Case(
        "resetOffsetByTime (to the start)",
        admin("resetOffsetByTime", *NS, "-g", "{cg}", "-t", "{topic}", "-s", "0"),
        "rollback consumer offset by specified",
        phase=3,
        normalise=sorted_lines,
    ),
    Case(
        "skipAccumulatedMessage",
        admin("skipAccumulatedMessage", *NS, "-g", "{cg}", "-t", "{topic}"),
        "#brokerName",
        phase=2,
        normalise=sorted_lines,
    ),
    Case(
        "cloneGroupOffset",
        calls(
            ("cloneGroupOffset", *NS, "-s", "{cg}", "-d", "{x}_clone", "-t", "{topic}"),
            ("brokerConsumeStats", *NS, "-b", "{broker}"),
        ),
        "clone group offset success",
        phase=2,
    ),
]


# -- running ------------------------------------------------------------------------------------

#: what an overloaded machine makes of a call (the tool's own 3 s timeout): the call is run again
TRANSIENT = re.compile(
    r"RemotingTimeoutException|RemotingConnectException|RemotingSendRequestException|RemotingTooMuchRequestException"
)
CALL_TIMEOUT = 60.0
KILLED_AFTER = 15.0


@dataclasses.dataclass
class Run:
    """One case on one cluster: the output of each call, its exit code and the seconds taken."""

    outputs: list[str]
    codes: list[int]
    seconds: float

    @property
    def text(self) -> str:
        return "\n".join(self.outputs)


def whole_lines(stream: bytes | str | None) -> str:
    """What a killed command printed, up to its last newline: the kill may cut a line short."""
    text = stream.decode(errors="replace") if isinstance(stream, bytes) else stream or ""
    return text[: text.rfind("\n") + 1]


def run_call(case: Case, args: list[str], log_dir: Path) -> tuple[str, int]:
    timeout = KILLED_AFTER if case.runs_until_killed else CALL_TIMEOUT
    for attempt in range(case.retries + 1):
        try:
            proc = java.mqadmin(log_dir, *args, timeout=timeout, cwd=log_dir, java_opts=java.QUICK_JVM)
            output, code = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            output = "".join(whole_lines(x) for x in (e.stdout, e.stderr))
            code = 0 if case.runs_until_killed else -1
            if not case.runs_until_killed:
                output += f"\n<no answer in {timeout} s>"
        transient = TRANSIENT.search(output) or (case.retry_on and re.search(case.retry_on, output))
        if not transient or attempt == case.retries:
            return output, code
    raise AssertionError("unreachable")


def run_case(case: Case, ctx: Ctx, log_dir: Path) -> Run:
    started = time.monotonic()
    log_dir.mkdir(parents=True, exist_ok=True)
    outputs, codes = [], []
    for args in case.steps(ctx):
        output, code = run_call(case, args, log_dir)
        outputs.append(output)
        codes.append(code)
    return Run(outputs, codes, time.monotonic() - started)


def run_all(ctxs: dict[str, Ctx], log_dir: Path, cases: list[Case] = CASES) -> dict[str, dict[str, Run]]:
    """Every case on every cluster, phase by phase; the calls of one phase run in parallel."""
    runs: dict[str, dict[str, Run]] = {c.command: {} for c in cases}
    with ThreadPoolExecutor(POOL) as pool:
        for phase in sorted({c.phase for c in cases}):
            # the slow ones first, so the pool's tail is short
            todo = sorted((c for c in cases if c.phase == phase), key=lambda c: -len(c.steps(ctxs["java"])))
            futures = {
                (c.command, b): pool.submit(run_case, c, ctxs[b], log_dir / b) for c in todo for b in ctxs
            }
            for (command, b), fut in futures.items():
                runs[command][b] = fut.result()
    return runs


def compare(case: Case, runs: dict[str, Run], ctxs: dict[str, Ctx]) -> list[str]:
    """The unified diff of the two clusters' normalised outputs and exit codes; empty when equal."""
    normalise = case.normalise or lines
    seen = {b: [f"exit codes {runs[b].codes}", *normalise(runs[b].text, ctxs[b])] for b in BROKERS}
    return list(difflib.unified_diff(seen["java"], seen["rmqgate"], "java", "rmqgate", lineterm="", n=1))


def summary(run: Run) -> str:
    """A table cell: the first error a call printed (its response code, or its root cause), or
    how much it printed."""
    for output in run.outputs:
        code = re.search(r"CODE: (\d+)\s+DESC: ([^\n]{0,48})", output)
        causes = re.findall(r"Caused by: [\w.$]*?(\w+): ([^\n]{0,48})", output)
        if code:
            what = f"CODE {code[1]} {code[2].strip()}"
        elif causes:
            what = f"{causes[-1][0]}: {causes[-1][1].strip()}"
        elif "Exception" in output:
            what = re.findall(r"(\w+Exception)", output)[0]
        else:
            continue
        return f"error: {what} ({run.seconds:.0f} s)".replace("|", "/")
    count = sum(1 for out in run.outputs for line in out.splitlines() if line.strip())
    return f"ok, {count} lines ({run.seconds:.0f} s)"


# -- the state and the tests --------------------------------------------------------------------


def start_clients(ctx: Ctx, classes: Path, log_dir: Path) -> subprocess.Popen[str]:
    """java/AdminClients.java on one cluster (client 4.9.8), running until its stdin closes."""
    args = {"namesrv": ctx.namesrv, "topic": ctx.topic, "consumerGroup": ctx.cgroup,
            "producerGroup": ctx.pgroup, "count": MESSAGES, "lifetimeMs": 600_000}  # fmt: skip
    cmd = [
        str(java.rocketmq_home() / "bin" / "java-client.sh"),
        "4",
        str(classes),
        "compat.AdminClients",
        json.dumps(args),
    ]
    log_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=(log_dir / "stderr.txt").open("w"),
        text=True, env=java.java_env(log_dir), cwd=log_dir,
    )  # fmt: skip


def wait_ready(proc: subprocess.Popen[str], timeout: float = 90) -> dict[str, Any]:
    """What AdminClients sent and its consumer's client id, once it says READY (all consumed)."""
    assert proc.stdout is not None
    found: list[dict[str, Any]] = []

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("READY "):
                found.append(json.loads(line[len("READY ") :]))
                return

    with ThreadPoolExecutor(1) as pool:
        pool.submit(read).result(timeout=timeout)
    assert found, f"AdminClients ended without READY (exit {proc.poll()})"
    return found[0]


@pytest.fixture(scope="module")
def mqadmin_runs(
    fresh_broker_pair, tmp_path_factory
) -> Iterator[tuple[dict[str, Ctx], dict[str, dict[str, Run]]]]:
    """The same state on both clusters (a topic, keyed messages, a live producer and consumer),
    then every case run on both. The clusters are the module's own: the listings compared cover every
    topic and group a broker has."""
    broker_pair = fresh_broker_pair
    work = tmp_path_factory.mktemp("mqadmin")
    token = secrets.token_hex(3)
    ctxs = {
        b: Ctx(b, c.namesrv, c.broker, c.broker_name, c.cluster_name, token, work / b / "export")
        for b, c in broker_pair.clusters.items()
    }
    some = ctxs["java"]
    broker_pair.create_topic(some.topic, 4)
    broker_pair.create_topic(some.name("x_send"), 4)
    procs = {b: start_clients(ctx, broker_pair.classes[4], work / b / "clients") for b, ctx in ctxs.items()}
    try:
        for b, proc in procs.items():
            ready = wait_ready(proc)
            ctxs[b].sent, ctxs[b].client_id = ready["sent"], ready["consumerClientId"]
        sent = {b: [(m["status"], m["queueId"], m["queueOffset"]) for m in ctxs[b].sent] for b in BROKERS}
        assert sent["rmqgate"] == sent["java"] == [("SEND_OK", i % 4, 0) for i in range(MESSAGES)], sent
        started = time.monotonic()
        runs = run_all(ctxs, work)
        TIMING["calls"] = time.monotonic() - started
        (work / "ctx.json").write_text(
            json.dumps({b: dataclasses.asdict(c) for b, c in ctxs.items()}, default=str)
        )
        for command, by_broker in runs.items():  # kept for a look after the run
            for b, run in by_broker.items():
                (work / b / f"{re.sub(r'[^A-Za-z0-9-]+', '_', command)}.txt").write_text(run.text)
        yield ctxs, runs
    finally:
        for proc in procs.values():
            if proc.stdin:
                proc.stdin.close()
        for proc in procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.command)
def test_mqadmin_command_answers_as_on_java(mqadmin_runs, case: Case) -> None:
    ctxs, all_runs = mqadmin_runs
    runs = all_runs[case.command]
    diff = compare(case, runs, ctxs)
    java.MQADMIN.append(
        {
            "command": case.command,
            "rmqgate": summary(runs["rmqgate"]),
            "java": summary(runs["java"]),
            "equal": ("yes" if not diff else f"no ({sum(1 for d in diff if d.startswith('+'))} lines)")
            + (f"; {case.note}" if case.note else ""),
        }
    )
    expect = fmt(case.expect, ctxs["java"])
    report = "\n".join(f"--- {b} ({runs[b].seconds:.1f} s), raw:\n{runs[b].text[:4000]}" for b in BROKERS)
    did_its_work = expect in " ".join(runs["java"].text.split())
    assert did_its_work, f"Java's output lacks {expect!r}\n{report}"
    assert not diff, "rmqgate's output differs from Java's:\n" + "\n".join(diff) + "\n" + report


def test_a_killed_commands_cut_line_is_dropped() -> None:
    assert whole_lines(b"#RT\ncluster broker 0.5\ncluster") == "#RT\ncluster broker 0.5\n"
    assert whole_lines("no newline yet") == ""
    assert whole_lines(None) == ""
