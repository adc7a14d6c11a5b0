"""Topic and subscription-group configuration (TopicConfigManager, SubscriptionGroupManager).

Both live in the store's LMDB metadata (databases ``topics`` / ``subscription_groups``) as dicts in
fastjson's field names, cached in memory. Topic changes call ``on_change`` (the broker re-registers
with its name servers at once).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Collection
from typing import Any

from rmqgate.server.config import BrokerConfig
from rmqgate.store.api import SCHEDULE_TOPIC, MetaStore
from rmqgate.wire.bodies import SubscriptionGroupConfig

log = logging.getLogger("rmqgate.server.topics")

PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 8, 4, 2, 1
PERM_RW = PERM_READ | PERM_WRITE
TOPIC_SYS_FLAG_UNIT, TOPIC_SYS_FLAG_UNIT_SUB = 1, 2

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
TOPIC_MAX_LENGTH = 127
_TOPIC_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        RMQ_SYS_TRANS_HALF_TOPIC,
        RMQ_SYS_TRANS_OP_HALF_TOPIC,
        RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
#: TopicValidator.SYSTEM_TOPIC_SET (the broker adds its cluster/broker-name topics at start).
SYSTEM_TOPICS = {
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    SCHEDULE_TOPIC,
    BENCHMARK_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    "RMQ_SYS_TRACE_TOPIC",
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
    SELF_TEST_TOPIC,
    OFFSET_MOVED_EVENT,
}
#: SubscriptionGroupManager's groups at start (CID_RMQ_SYS_* ones are made on first use).
SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
)
SYS_CONSUMER_GROUP_PREFIX = "CID_RMQ_SYS_"  # MixAll.isSysConsumerGroup


def validate_topic(topic: str | None) -> str | None:
    """``TopicValidator.validateTopic``: the error remark, or None when the name is fine."""
    if not topic or not topic.strip():
        return "The specified topic is blank."
    if not _TOPIC_PATTERN.fullmatch(topic):  # (match's "$" takes a trailing newline)
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > TOPIC_MAX_LENGTH:
        return "The specified topic is longer than topic max length."
    return None


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def topic_config(
    name: str,
    read: int = 16,
    write: int = 16,
    perm: int = PERM_RW,
    *,
    filter_type: str = "SINGLE_TAG",
    sys_flag: int = 0,
    order: bool = False,
) -> dict[str, Any]:
    return {
        "order": order,
        "perm": perm,
        "readQueueNums": read,
        "topicFilterType": filter_type,
        "topicName": name,
        "topicSysFlag": sys_flag,
        "writeQueueNums": write,
    }


def perm_to_string(perm: int) -> str:
    return (
        ("R" if perm & PERM_READ else "-")
        + ("W" if perm & PERM_WRITE else "-")
        + ("X" if perm & PERM_INHERIT else "-")
    )


def topic_config_str(tc: dict[str, Any]) -> str:
    return (
        f"TopicConfig [topicName={tc['topicName']}, readQueueNums={tc['readQueueNums']}, "
        f"writeQueueNums={tc['writeQueueNums']}, perm={perm_to_string(tc['perm'])}, "
        f"topicFilterType={tc.get('topicFilterType', 'SINGLE_TAG')}, topicSysFlag={tc.get('topicSysFlag', 0)}, "
        f"order={'true' if tc.get('order') else 'false'}]"
    )


class TopicConfigManager:
    DB = "topics"

    def __init__(self, config: BrokerConfig, meta: MetaStore) -> None:
        self.config = config
        self.meta = meta
        self.table: dict[str, dict[str, Any]] = dict(meta.items(self.DB))
        self.on_change: Callable[[], None] | None = None
        self._version = {"counter": 0, "timestamp": int(time.time() * 1000)}
        self._init_system_topics()

    def _init_system_topics(self) -> None:
        c = self.config
        system = [topic_config(SELF_TEST_TOPIC, 1, 1)]
        if c.autoCreateTopicEnable:
            q = c.defaultTopicQueueNums
            system.append(topic_config(AUTO_CREATE_TOPIC_KEY_TOPIC, q, q, PERM_INHERIT | PERM_RW))
        system.append(topic_config(BENCHMARK_TOPIC, 1024, 1024))
        system.append(
            topic_config(c.brokerClusterName, 16, 16, PERM_INHERIT | (PERM_RW if c.clusterTopicEnable else 0))
        )
        system.append(
            topic_config(c.brokerName, 1, 1, PERM_INHERIT | (PERM_RW if c.brokerTopicEnable else 0))
        )
        system.append(topic_config(OFFSET_MOVED_EVENT, 1, 1))
        system.append(topic_config(SCHEDULE_TOPIC, 18, 18))
        if c.traceTopicEnable:
            system.append(topic_config(c.msgTraceTopicName, 1, 1))
        system.append(topic_config(f"{c.brokerClusterName}_REPLY_TOPIC", 1, 1))
        SYSTEM_TOPICS.update(tc["topicName"] for tc in system)
        # only the missing ones: a persisted system topic keeps its config, as Java's decode() puts
        # the file's table over the defaults its constructor made
        missing = {tc["topicName"]: tc for tc in system if tc["topicName"] not in self.table}
        if missing:
            self.table.update(missing)
            self.meta.put_many(self.DB, missing)
        self.next_version()

    def next_version(self) -> None:
        self._version = {"counter": self._version["counter"] + 1, "timestamp": int(time.time() * 1000)}

    @property
    def data_version(self) -> dict[str, int]:
        return dict(self._version)

    def get(self, topic: str) -> dict[str, Any] | None:
        return self.table.get(topic)

    def put(self, tc: dict[str, Any], *, notify: bool = True) -> None:
        self.table[tc["topicName"]] = tc
        self.meta.put(self.DB, tc["topicName"], tc)
        self.next_version()
        if notify and self.on_change is not None:
            self.on_change()

    def delete(self, topic: str) -> bool:
        if self.table.pop(topic, None) is None:
            return False
        self.meta.delete(self.DB, topic)
        self.next_version()
        if self.on_change is not None:
            self.on_change()
        return True

    def create_in_send(
        self, topic: str, default_topic: str, client_default_queue_nums: int, sys_flag: int
    ) -> dict[str, Any] | None:
        """``createTopicInSendMessageMethod``: inherit from the default topic (TBW102) if it allows."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        default = self.table.get(default_topic)
        if default is None:
            log.warning("create topic %s failed: default topic %s does not exist", topic, default_topic)
            return None
        perm = default["perm"]
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self.config.autoCreateTopicEnable:
            perm = PERM_RW
        if not perm & PERM_INHERIT:
            log.warning("create topic %s failed: default topic %s has no inherit perm", topic, default_topic)
            return None
        queues = max(0, min(client_default_queue_nums, default["writeQueueNums"]))
        tc = topic_config(
            topic, queues, queues, perm & ~PERM_INHERIT,
            filter_type=default.get("topicFilterType", "SINGLE_TAG"), sys_flag=sys_flag,
        )  # fmt: skip
        log.info("auto-created topic %s from %s with %d queues", topic, default_topic, queues)
        self.put(tc)
        return tc

    def create_in_send_back(self, topic: str, queue_nums: int, perm: int, sys_flag: int) -> dict[str, Any]:
        """``createTopicInSendMessageBackMethod``: %RETRY%/%DLQ% topics."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        tc = topic_config(topic, queue_nums, queue_nums, perm, sys_flag=sys_flag)
        self.put(tc)
        return tc

    def update_order_topic_config(self, order_topics: Collection[str]) -> bool:
        """``updateOrderTopicConfig``: the name server's ORDER_TOPIC_CONFIG table names the order
        topics; every other topic is not one. True if a flag changed."""
        changed = {
            name: {**tc, "order": name in order_topics}
            for name, tc in self.table.items()
            if bool(tc.get("order")) != (name in order_topics)
        }
        if changed:
            self.table.update(changed)
            self.meta.put_many(self.DB, changed)
            self.next_version()
        return bool(changed)

    def replace_all(self, table: dict[str, dict[str, Any]], version: dict[str, int]) -> None:
        """A slave takes its master's table and data version as they are (no re-registration)."""
        self.table.clear()  # (in place: the send processor holds this dict)
        self.table.update(table)
        self.meta.put_many(self.DB, self.table, replace=True)
        self._version = {"counter": int(version["counter"]), "timestamp": int(version["timestamp"])}

    def wrapper(self) -> dict[str, Any]:
        """TopicConfigSerializeWrapper."""
        return {"dataVersion": self.data_version, "topicConfigTable": dict(self.table)}


def default_group_config(name: str) -> dict[str, Any]:
    return SubscriptionGroupConfig(group_name=name).to_obj()


class SubscriptionGroupManager:
    DB = "subscription_groups"

    def __init__(self, config: BrokerConfig, meta: MetaStore) -> None:
        self.config = config
        self.meta = meta
        self.table: dict[str, dict[str, Any]] = dict(meta.items(self.DB))
        new = {g: default_group_config(g) for g in SYSTEM_GROUPS if g not in self.table}
        if new:
            self.table.update(new)
            self.meta.put_many(self.DB, new)

    def find(self, group: str) -> dict[str, Any] | None:
        """``findSubscriptionGroupConfig``: auto-creates when autoCreateSubscriptionGroup, and always
        for a system group (``CID_RMQ_SYS_``)."""
        sgc = self.table.get(group)
        if sgc is None and (
            self.config.autoCreateSubscriptionGroup or group.startswith(SYS_CONSUMER_GROUP_PREFIX)
        ):
            sgc = default_group_config(group)
            self.put(sgc)
        return sgc

    def put(self, sgc: dict[str, Any]) -> None:
        self.table[sgc["groupName"]] = sgc
        self.meta.put(self.DB, sgc["groupName"], sgc)

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        self.meta.delete(self.DB, group)
        return True

    @property
    def data_version(self) -> dict[str, int]:
        return self.meta.data_version(self.DB)

    def replace_all(self, table: dict[str, dict[str, Any]], version: dict[str, int]) -> None:
        """A slave takes its master's table and data version as they are."""
        self.table.clear()  # (in place, as the topic table)
        self.table.update(table)
        self.meta.put_many(self.DB, self.table, replace=True)
        self.meta.set_data_version(self.DB, version)

    def wrapper(self) -> dict[str, Any]:
        return {"dataVersion": self.meta.data_version(self.DB), "subscriptionGroupTable": dict(self.table)}
