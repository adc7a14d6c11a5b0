"""Broker and name server configuration: RocketMQ's ``BrokerConfig``/``MessageStoreConfig`` and
``NamesrvConfig`` keys with their defaults.

``load_broker_conf`` reads a Java properties file (broker.conf); unknown keys are kept in
``extra`` and ignored. ``store_config`` derives the store's ``StoreConfig``. The UPDATE_*_CONFIG
requests set keys from the same text form.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rmqgate.server.remoting import DEFAULT_IDLE_TIMEOUT
from rmqgate.store.api import BROKER_ROLES, DEFAULT_DELAY_LEVELS, SLAVE, StoreConfig, parse_delay_levels
from rmqgate.wire.codes import ResponseCode


def _default_broker_name() -> str:
    try:
        return socket.gethostname() or "DEFAULT_BROKER"
    except OSError:
        return "DEFAULT_BROKER"


class PropertiesConfig:
    """Typed keys set from their text form (a properties file, an UPDATE_*_CONFIG body); unknown
    keys are kept in ``extra``."""

    extra: dict[str, str]
    configBlackList: str  # keys UPDATE_*_CONFIG refuses, ";"-separated
    always_refused: ClassVar[frozenset[str]] = frozenset()  # refused whatever configBlackList says
    #: keys of Java's config classes that rmqgate keeps (in ``extra``) but does not act on, with
    #: their 4.9.8 defaults: reported like the others, as tools such as mqadmin exportConfigs read them
    java_defaults: ClassVar[Callable[[], dict[str, str]]] = dict

    def _converted(self, key: str, value: str) -> Any:
        """``value`` as field ``key`` holds it (raises ValueError); unknown keys stay text."""
        f = _fields(type(self)).get(key)
        kind = str if f is None else f.type if isinstance(f.type, type) else str(f.type)
        value = value.strip() if f is not None else value
        if kind in (int, "int"):
            return int(value)
        if kind in (bool, "bool"):
            return value.lower() == "true"
        return value

    def _assign(self, key: str, value: Any) -> None:
        if key in _fields(type(self)):
            setattr(self, key, value)
        else:
            self.extra[key] = value

    def set(self, key: str, value: str) -> None:
        self._assign(key, self._converted(key, value))

    def set_all(self, props: dict[str, str]) -> None:
        """``set`` every key, or none: a value that does not convert raises ValueError naming its key."""
        converted = {}
        for key, value in props.items():
            try:
                converted[key] = self._converted(key, value)
            except ValueError as exc:
                raise ValueError(f"{key}={value!r}: {exc}") from None
        for key, value in converted.items():
            self._assign(key, value)

    def to_properties(self) -> dict[str, str]:
        out = {k: self.extra.get(k, v) for k, v in type(self).java_defaults().items()}
        for name in _fields(type(self)):
            value = getattr(self, name)
            if value is None:
                continue
            out[name] = "true" if value is True else "false" if value is False else str(value)
        return out

    def properties_text(self) -> str:
        """What GET_BROKER_CONFIG / GET_NAMESRV_CONFIG answer: ``key=value`` lines."""
        return "".join(f"{k}={v}\n" for k, v in sorted(self.to_properties().items()))


@functools.cache
def _fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls) if f.name != "extra"}


def _netty_server_defaults() -> dict[str, str]:
    """NettyServerConfig's keys (NettySystemConfig's defaults without -D overrides)."""
    return {
        "serverWorkerThreads": "8", "serverCallbackExecutorThreads": "0", "serverSelectorThreads": "3",
        "serverOnewaySemaphoreValue": "256", "serverAsyncSemaphoreValue": "64",
        "serverChannelMaxIdleTimeSeconds": str(int(DEFAULT_IDLE_TIMEOUT)), "serverSocketSndBufSize": "0",
        "serverSocketRcvBufSize": "0", "writeBufferHighWaterMark": "0", "writeBufferLowWaterMark": "0",
        "serverSocketBacklog": "1024", "serverPooledByteBufAllocatorEnable": "true",
        "useEpollNativeSelector": "false",
    }  # fmt: skip


@functools.cache
def _broker_java_defaults() -> dict[str, str]:
    """BrokerConfig's, NettyServerConfig's, NettyClientConfig's and MessageStoreConfig's keys that
    BrokerConfig does not declare; the thread counts follow this machine's CPUs, as Java's do."""
    cpus = os.cpu_count() or 1
    send_threads = min(cpus, 4)
    return {
        # BrokerConfig
        "messageStorePlugIn": "", "sendMessageThreadPoolNums": str(send_threads),
        "putMessageFutureThreadPoolNums": str(send_threads),
        "pullMessageThreadPoolNums": str(16 + cpus * 2), "processReplyMessageThreadPoolNums": str(16 + cpus * 2),
        "queryMessageThreadPoolNums": str(8 + cpus), "adminBrokerThreadPoolNums": "16",
        "clientManageThreadPoolNums": "32", "consumerManageThreadPoolNums": "32",
        "heartbeatThreadPoolNums": str(min(32, cpus)),
        "endTransactionThreadPoolNums": str(max(8 + cpus * 2, send_threads * 4)),
        "flushConsumerOffsetHistoryInterval": "60000", "fetchNamesrvAddrByAddressServer": "false",
        "sendThreadPoolQueueCapacity": "10000", "putThreadPoolQueueCapacity": "10000",
        "pullThreadPoolQueueCapacity": "100000", "replyThreadPoolQueueCapacity": "10000",
        "queryThreadPoolQueueCapacity": "20000", "clientManagerThreadPoolQueueCapacity": "1000000",
        "consumerManagerThreadPoolQueueCapacity": "1000000", "heartbeatThreadPoolQueueCapacity": "50000",
        "endTransactionPoolQueueCapacity": "100000", "filterServerNums": "0", "highSpeedMode": "false",
        "isEnableBatchPush": "false",
        "commercialEnable": "true", "commercialTimerCount": "1", "commercialTransCount": "1",
        "commercialBigCount": "1", "commercialBaseCount": "1", "transferMsgByHeap": "true",
        "maxDelayTime": "40", "disableConsumeIfConsumerReadSlowly": "false",
        "consumerFallbehindThreshold": str(16 << 30), "brokerFastFailureEnable": "true",
        "waitTimeMillsInSendQueue": "200", "waitTimeMillsInPullQueue": "5000",
        "waitTimeMillsInHeartbeatQueue": "31000", "waitTimeMillsInTransactionQueue": "3000",
        "startAcceptSendRequestTimeStamp": "0", "enableCalcFilterBitMap": "false",
        "expectConsumerNumUseFilter": "32", "maxErrorRateOfBloomFilter": "20",
        "filterDataCleanTimeSpan": "86400000",
        "enableDetailStat": "true", "autoDeleteUnusedStats": "false", "isolateLogEnable": "false",
        # NettyServerConfig
        **_netty_server_defaults(),
        # NettyClientConfig
        "clientWorkerThreads": "4", "clientCallbackExecutorThreads": str(cpus),
        "clientOnewaySemaphoreValue": "65535", "clientAsyncSemaphoreValue": "65535",
        "connectTimeoutMillis": "3000", "channelNotActiveInterval": "60000",
        "clientChannelMaxIdleTimeSeconds": "120", "clientSocketSndBufSize": "0", "clientSocketRcvBufSize": "0",
        "clientPooledByteBufAllocatorEnable": "false", "clientCloseSocketIfTimeout": "true", "useTLS": "false",
        # MessageStoreConfig
        "enableConsumeQueueExt": "false", "mappedFileSizeConsumeQueueExt": str(48 << 20),
        "bitMapLengthConsumeQueueExt": "64", "commitIntervalCommitLog": "200",
        "useReentrantLockWhenPutMessage": "true", "flushCommitLogTimed": "true",
        "deleteCommitLogFilesInterval": "100", "deleteConsumeQueueFilesInterval": "100",
        "destroyMapedFileIntervalForcibly": "120000", "redeleteHangedFileInterval": "120000",
        "putMsgIndexHightWater": "600000", "checkCRCOnRecover": "true", "commitCommitLogLeastPages": "4",
        "flushLeastPagesWhenWarmMapedFile": "4096", "commitCommitLogThoroughInterval": "200",
        "messageIndexSafe": "false", "slaveTimeout": "3000", "flushDelayOffsetInterval": "10000",
        "cleanFileForciblyEnable": "true", "warmMapedFileEnable": "false", "debugLockEnable": "false",
        "duplicationEnable": "false", "diskFallRecorded": "true", "osPageCacheBusyTimeOutMills": "1000",
        "transientStorePoolEnable": "false", "transientStorePoolSize": "5",
        "fastFailIfNoBufferInStorePool": "false", "enableDLegerCommitLog": "false",
        "enableScheduleMessageStats": "true", "enableLmq": "false", "enableMultiDispatch": "false",
        "maxLmqConsumeQueueNum": "20000", "enableScheduleAsyncDeliver": "false",
        "scheduleAsyncDeliverMaxPendingLimit": "2000", "scheduleAsyncDeliverMaxResendNum2Blocked": "3",
    }  # fmt: skip


@dataclass
class NamesrvConfig(PropertiesConfig):
    kvConfigPath: str | None = None  # rmqgate: None keeps the KV config in memory only
    productEnvName: str = "center"
    clusterTest: bool = False
    orderMessageEnable: bool = False
    configBlackList: str = "configBlackList;configStorePath;kvConfigPath"
    always_refused: ClassVar[frozenset[str]] = frozenset(
        ("configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome")
    )  # DefaultRequestProcessor.initConfigBlackList
    java_defaults: ClassVar[Callable[[], dict[str, str]]] = _netty_server_defaults
    listenPort: int = 9876
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class BrokerConfig(PropertiesConfig):
    brokerClusterName: str = "DefaultCluster"
    brokerName: str = field(default_factory=_default_broker_name)
    brokerId: int = 0
    namesrvAddr: str | None = None
    listenPort: int = 10911
    serverChannelMaxIdleTimeSeconds: int = int(DEFAULT_IDLE_TIMEOUT)  # NettyServerConfig's; 0: never close
    brokerIP1: str = "127.0.0.1"
    brokerIP2: str | None = None
    brokerPermission: int = 6
    regionId: str = "DefaultRegion"
    traceOn: bool = True
    storePathRootDir: str = os.path.join(os.path.expanduser("~"), ".rmqgate", "store")
    storePathCommitLog: str | None = None
    flushDiskType: str = "ASYNC_FLUSH"
    brokerRole: str = "ASYNC_MASTER"  # ASYNC_MASTER / SYNC_MASTER / SLAVE, read at start
    offsetCheckInSlave: bool = False
    slaveReadEnable: bool = False  # a master may send slow consumers to the slave, and a slave serves them
    haMasterAddress: str | None = None  # a slave's master HA address; unset: from the name server's answer
    autoCreateTopicEnable: bool = True
    autoCreateSubscriptionGroup: bool = True
    defaultTopicQueueNums: int = 8
    clusterTopicEnable: bool = True
    brokerTopicEnable: bool = True
    traceTopicEnable: bool = False
    msgTraceTopicName: str = "RMQ_SYS_TRACE_TOPIC"
    registerNameServerPeriod: int = 30_000
    registerBrokerTimeoutMills: int = 6000
    compressedRegister: bool = False
    forceRegister: bool = True
    longPollingEnable: bool = True
    shortPollingTimeMills: int = 1000
    notifyConsumerIdsChangedEnable: bool = True
    enablePropertyFilter: bool = False  # SQL92 subscriptions
    aclEnable: bool = False  # plain ACL (server/acl.py), read at start
    eventLoop: str = "auto"  # rmqgate: auto | asyncio | uvloop (server/eventloop.py), read at start
    metricsPort: int = 0  # rmqgate: Prometheus /metrics served on this port (server/metrics.py); 0 = off
    filterSupportRetry: bool = False  # a retry topic's messages filtered by the original topic's SQL92
    channelExpiredTimeout: int = 120_000
    transactionTimeOut: int = 6000
    transactionCheckMax: int = 15
    transactionCheckInterval: int = 60_000
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    maxMessageSize: int = 4 * 1024 * 1024
    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024
    mappedFileSizeConsumeQueue: int = 300_000 * 20
    maxHashSlotNum: int = 5_000_000
    maxIndexNum: int = 5_000_000 * 4
    messageIndexEnable: bool = True
    indexDispatchProcess: bool = True  # rmqgate: IndexFile built by a dispatcher process
    commitLogWarmAhead: int = 4 * 1024 * 1024  # rmqgate: bytes zeroed ahead of the CommitLog write position
    flushIntervalCommitLog: int = 500
    flushCommitLogLeastPages: int = 4
    flushCommitLogThoroughInterval: int = 10_000
    flushIntervalConsumeQueue: int = 1000
    flushConsumeQueueLeastPages: int = 2
    flushConsumeQueueThoroughInterval: int = 60_000
    flushConsumerOffsetInterval: int = 5000
    cleanResourceInterval: int = 10_000
    syncFlushTimeout: int = 5000
    # HA replication (server/ha.py); haListenPort -1: listenPort + 1, which 4.9.8 always takes
    haListenPort: int = -1
    haSendHeartbeatInterval: int = 5000
    haHousekeepingInterval: int = 20_000
    haTransferBatchSize: int = 32 * 1024
    haSlaveFallbehindMax: int = 256 * 1024 * 1024
    fileReservedTime: int = 72
    deleteWhen: str = "04"
    diskMaxUsedSpaceRatio: int = 75
    accessMessageInMemoryMaxRatio: int = 40
    maxTransferCountOnMessageInMemory: int = 32
    maxTransferBytesOnMessageInMemory: int = 256 * 1024
    maxTransferCountOnMessageInDisk: int = 8
    maxTransferBytesOnMessageInDisk: int = 64 * 1024
    maxMsgsNumBatch: int = 64
    defaultQueryMaxNum: int = 32
    rejectTransactionMessage: bool = False
    storeReplyMessageEnable: bool = True  # replies are also stored in <cluster>_REPLY_TOPIC
    configBlackList: str = "configBlackList;brokerConfigPath"  # keys UPDATE_BROKER_CONFIG refuses
    always_refused: ClassVar[frozenset[str]] = frozenset(
        ("brokerConfigPath", "rocketmqHome", "configBlackList")
    )  # AdminBrokerProcessor.initConfigBlackList
    java_defaults: ClassVar[Callable[[], dict[str, str]]] = _broker_java_defaults
    extra: dict[str, str] = field(default_factory=dict)

    def to_properties(self) -> dict[str, str]:
        out = super().to_properties()
        # keys Java always has a value for: brokerIP2 defaults to the host's address (rmqgate
        # announces brokerIP1 for HA when it is unset), the CommitLog to the store root's commitlog/
        out.setdefault("brokerIP2", self.brokerIP1)
        out.setdefault("storePathCommitLog", os.path.join(self.storePathRootDir, "commitlog"))
        out["haListenPort"] = str(self.ha_listen_port)
        return out

    def check_role(self) -> None:
        """BrokerStartup's rules: a master's brokerId is 0, a slave's must be above 0; an unknown
        brokerRole is refused (``ConfigError``) rather than read as a master."""
        if self.brokerRole not in BROKER_ROLES:
            raise ConfigError(f"brokerRole={self.brokerRole!r}: not one of {', '.join(BROKER_ROLES)}")
        if self.brokerRole != SLAVE:
            self.brokerId = 0
        elif self.brokerId <= 0:
            raise ConfigError(f"brokerId={self.brokerId}: a slave's brokerId must be > 0")

    def check_delay_levels(self) -> None:
        """BrokerStartup stops when ``messageDelayLevel`` does not parse (``ConfigError`` here)."""
        try:
            parse_delay_levels(self.messageDelayLevel)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def check_store_paths(self) -> None:
        """4.9.8 spreads the CommitLog over several directories given as ``a,b`` (MessageStoreConfig's
        MULTI_PATH_SPLITTER); rmqgate keeps it in one, so such a value is refused (``ConfigError``)
        rather than taken as one directory's name."""
        if self.storePathCommitLog and "," in self.storePathCommitLog:
            raise ConfigError(
                f"storePathCommitLog={self.storePathCommitLog!r}: one directory only "
                "(rmqgate does not spread the CommitLog over several paths)"
            )

    @property
    def ha_listen_port(self) -> int:
        """The HA port: haListenPort when set (0: any free port), else listenPort + 1."""
        return self.haListenPort if self.haListenPort >= 0 else self.listenPort + 1

    @property
    def broker_addr(self) -> str:
        return f"{self.brokerIP1}:{self.listenPort}"

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in re.split(r"[;,]", self.namesrvAddr or "") if a.strip()]

    def store_config(self) -> StoreConfig:
        return StoreConfig(
            store_path_root_dir=self.storePathRootDir,
            store_path_commit_log=self.storePathCommitLog,
            mapped_file_size_commitlog=self.mappedFileSizeCommitLog,
            mapped_file_size_consume_queue=self.mappedFileSizeConsumeQueue,
            max_hash_slot_num=self.maxHashSlotNum,
            max_index_num=self.maxIndexNum,
            message_index_enable=self.messageIndexEnable,
            index_dispatch_process=self.indexDispatchProcess,
            commitlog_warm_ahead=self.commitLogWarmAhead,
            flush_disk_type=self.flushDiskType,
            broker_role=self.brokerRole,
            offset_check_in_slave=self.offsetCheckInSlave,
            flush_interval_commitlog=self.flushIntervalCommitLog,
            flush_commitlog_least_pages=self.flushCommitLogLeastPages,
            flush_commitlog_thorough_interval=self.flushCommitLogThoroughInterval,
            flush_interval_consume_queue=self.flushIntervalConsumeQueue,
            flush_consume_queue_least_pages=self.flushConsumeQueueLeastPages,
            flush_consume_queue_thorough_interval=self.flushConsumeQueueThoroughInterval,
            flush_consumer_offset_interval=self.flushConsumerOffsetInterval,
            clean_resource_interval=self.cleanResourceInterval,
            sync_flush_timeout=self.syncFlushTimeout,
            file_reserved_time=self.fileReservedTime,
            delete_when=self.deleteWhen,
            disk_max_used_space_ratio=self.diskMaxUsedSpaceRatio,
            max_message_size=self.maxMessageSize,
            access_message_in_memory_max_ratio=self.accessMessageInMemoryMaxRatio,
            max_transfer_count_on_message_in_memory=self.maxTransferCountOnMessageInMemory,
            max_transfer_bytes_on_message_in_memory=self.maxTransferBytesOnMessageInMemory,
            max_transfer_count_on_message_in_disk=self.maxTransferCountOnMessageInDisk,
            max_transfer_bytes_on_message_in_disk=self.maxTransferBytesOnMessageInDisk,
            max_msgs_num_batch=self.maxMsgsNumBatch,
            default_query_max_num=self.defaultQueryMaxNum,
            message_delay_level=self.messageDelayLevel,
            store_host=self.brokerIP1,
            store_port=self.listenPort,
        )


def parse_properties_text(text: str) -> dict[str, str]:
    """Java ``Properties.load`` for the simple files brokers use: ``key=value`` / ``key: value``,
    ``#``/``!`` comments, backslash line continuations."""
    out: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        line = line.strip()
        while line.endswith("\\"):
            line = line[:-1] + next(lines, "").strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
        else:
            out[line] = ""
    return out


class ConfigUpdateRefused(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def update_from_body(config: PropertiesConfig, body: bytes | bytearray | memoryview | None) -> dict[str, str]:
    """UPDATE_BROKER_CONFIG / UPDATE_NAMESRV_CONFIG: the body's properties set on ``config``, all or
    none (Java skips a value that does not convert, silently); keys in its configBlackList, and those
    Java always refuses, are refused.
    Returns what was set; raises ``ConfigUpdateRefused`` with the response code and remark."""
    if body is None:
        return {}
    try:
        props = parse_properties_text(bytes(body).decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigUpdateRefused(ResponseCode.SYSTEM_ERROR, "string2Properties error") from None
    black = config.always_refused.union(k.strip() for k in config.configBlackList.split(";"))
    if black & props.keys():
        raise ConfigUpdateRefused(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    try:
        config.set_all(props)
    except ValueError as exc:
        raise ConfigUpdateRefused(ResponseCode.SYSTEM_ERROR, f"update config: {exc}") from None
    return props


class ConfigError(ValueError):
    """A broker.conf the broker cannot start with (the message names the key)."""


def load_broker_conf(path: str, config: BrokerConfig | None = None) -> BrokerConfig:
    """``path``'s keys set on ``config``; ``ConfigError`` naming the key of a value that does not convert."""
    config = config or BrokerConfig()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        config.set_all(parse_properties_text(text))
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return config
