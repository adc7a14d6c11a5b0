"""Name server: the route table brokers register into and clients read (RocketMQ's namesrv).

``RouteInfoManager`` keeps clusters, brokers, topic queue data and broker liveness (expiry after
120 s without registration, and when the registering connection closes); ``KVConfigManager`` the
namespaced key/value configs; ``NamesrvProcessor`` serves the request codes of
``DefaultRequestProcessor``. Route JSON has quoted integer keys for requests with version >= 401
(V4_9_4) or acceptStandardJsonOnly, and fastjson's bare keys otherwise (PROTOCOL.md §6).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rmqgate.server.config import ConfigUpdateRefused, NamesrvConfig, update_from_body
from rmqgate.server.jsonbody import dumpb, dumps, loads_object
from rmqgate.server.remoting import Channel, RequestProcessor, cancel_and_wait
from rmqgate.wire import headers as H
from rmqgate.wire.bodies import DataVersion, RegisterBrokerBody, TopicConfigSerializeWrapper
from rmqgate.wire.codes import MQVersion, RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.errors import BodyError

log = logging.getLogger("rmqgate.server.namesrv")

MASTER_ID = 0
PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 8, 4, 2, 1
TOPIC_SYS_FLAG_UNIT, TOPIC_SYS_FLAG_UNIT_SUB = 1, 2
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
BROKER_CHANNEL_EXPIRED_TIME = 120.0
FAQ_APPLY_TOPIC = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


# --- data -----------------------------------------------------------------------------------------
@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerAddrs": dict(sorted(self.broker_addrs.items())),
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update: float
    data_version: dict[str, int]
    channel: Channel | None
    ha_server_addr: str


def data_version_equal(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if a is None or b is None:
        return False
    return a.get("counter") == b.get("counter") and a.get("timestamp") == b.get("timestamp")


# --- RegisterBrokerBody ---------------------------------------------------------------------------
def encode_register_body(
    topic_config_table: dict[str, dict[str, Any]],
    data_version: dict[str, int],
    filter_server_list: list[str] | None = None,
    *,
    compressed: bool = False,
) -> bytes:
    """A REGISTER_BROKER body (``wire.bodies.RegisterBrokerBody``) from plain topic configs."""
    wrapper = {"dataVersion": data_version, "topicConfigTable": topic_config_table}
    body = {"topicConfigSerializeWrapper": wrapper, "filterServerList": filter_server_list or []}
    return RegisterBrokerBody.from_obj(body).encode(compressed)


def decode_register_body(body: bytes, compressed: bool) -> tuple[dict[str, Any], list[str]]:
    """-> (TopicConfigSerializeWrapper as a dict, filterServerList)."""
    decoded = RegisterBrokerBody.decode(body, compressed)
    return decoded.topic_config_serialize_wrapper.to_obj(), list(decoded.filter_server_list)


# --- route table ----------------------------------------------------------------------------------
class RouteInfoManager:
    def __init__(self, expire_after: float = BROKER_CHANNEL_EXPIRED_TIME) -> None:
        self.expire_after = expire_after
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    def register_broker(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        wrapper: dict[str, Any] | None,
        filter_server_list: list[str] | None,
        channel: Channel | None,
    ) -> tuple[str | None, str | None]:
        """Returns (haServerAddr, masterAddr) for a slave; (None, None) for a master."""
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        register_first = False
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            register_first = True
            broker_data = self.broker_addr_table[broker_name] = BrokerData(cluster, broker_name)
        addrs = broker_data.broker_addrs
        # the same address under another id (slave promoted to master): drop the old entry
        for bid, addr in list(addrs.items()):
            if addr == broker_addr and bid != broker_id:
                del addrs[bid]
        old = addrs.get(broker_id)
        addrs[broker_id] = broker_addr
        register_first = register_first or old is None

        data_version = (wrapper or {}).get("dataVersion") or {"counter": 0, "timestamp": 0}
        if wrapper is not None and broker_id == MASTER_ID:
            prev = self.broker_live_table.get(broker_addr)
            if register_first or prev is None or not data_version_equal(prev.data_version, data_version):
                for tc in (wrapper.get("topicConfigTable") or {}).values():
                    self._create_and_update_queue_data(broker_name, tc)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            time.monotonic(), data_version, channel, ha_server_addr
        )
        if filter_server_list:
            self.filter_server_table[broker_addr] = list(filter_server_list)
        else:
            self.filter_server_table.pop(broker_addr, None)
        if broker_id != MASTER_ID:
            master_addr = addrs.get(MASTER_ID)
            live = self.broker_live_table.get(master_addr) if master_addr else None
            if live is not None:  # both, or neither (a master not live is not named)
                return live.ha_server_addr, master_addr
        return None, None

    def _create_and_update_queue_data(self, broker_name: str, tc: dict[str, Any]) -> None:
        name = tc.get("topicName")
        if not name:
            return
        qd = QueueData(
            broker_name,
            int(tc.get("readQueueNums", 16)),
            int(tc.get("writeQueueNums", 16)),
            int(tc.get("perm", PERM_READ | PERM_WRITE)),
            int(tc.get("topicSysFlag", tc.get("topicSynFlag", 0)) or 0),
        )
        self.topic_queue_table.setdefault(name, {})[broker_name] = qd

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: dict[str, Any]) -> bool:
        prev = self.broker_live_table.get(broker_addr)
        return prev is None or not data_version_equal(prev.data_version, data_version)

    def touch(self, broker_addr: str) -> None:
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update = time.monotonic()

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        removed_name = False
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None:
            broker_data.broker_addrs.pop(broker_id, None)
            if not broker_data.broker_addrs:
                del self.broker_addr_table[broker_name]
                removed_name = True
        if removed_name:
            names = self.cluster_addr_table.get(cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster]
            self._remove_topics_of(broker_name)

    def _remove_topics_of(self, broker_name: str) -> None:
        for topic in list(self.topic_queue_table):
            qds = self.topic_queue_table[topic]
            qds.pop(broker_name, None)
            if not qds:
                del self.topic_queue_table[topic]

    def on_channel_destroy(self, channel: Channel) -> None:
        for addr, live in list(self.broker_live_table.items()):
            if live.channel is channel:
                log.info("broker %s: connection closed, removing its routes", addr)
                self._remove_broker_addr(addr)

    def _remove_broker_addr(self, broker_addr: str) -> None:
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        for name, bd in list(self.broker_addr_table.items()):
            for bid, addr in list(bd.broker_addrs.items()):
                if addr == broker_addr:
                    self.unregister_broker(bd.cluster, broker_addr, name, bid)

    def scan_not_active_brokers(self) -> list[str]:
        deadline = time.monotonic() - self.expire_after
        expired = [addr for addr, live in self.broker_live_table.items() if live.last_update < deadline]
        for addr in expired:
            live = self.broker_live_table[addr]
            log.warning("broker %s: no registration for %.0f s, removing it", addr, self.expire_after)
            if live.channel is not None:
                live.channel.close()
            self._remove_broker_addr(addr)
        return expired

    def pickup_topic_route_data(self, topic: str) -> dict[str, Any] | None:
        qds = self.topic_queue_table.get(topic)
        if not qds:
            return None
        broker_datas = []
        filters: dict[str, list[str]] = {}
        for name in qds:
            bd = self.broker_addr_table.get(name)
            if bd is None:
                continue
            broker_datas.append(bd.to_json())
            for addr in bd.broker_addrs.values():
                if addr in self.filter_server_table:
                    filters[addr] = self.filter_server_table[addr]
        if not broker_datas:
            return None
        return {
            "brokerDatas": broker_datas,
            "filterServerTable": filters,
            "queueDatas": [qd.to_json() for qd in qds.values()],
        }

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {name: bd.to_json() for name, bd in self.broker_addr_table.items()},
            "clusterAddrTable": {c: sorted(names) for c, names in self.cluster_addr_table.items()},
        }

    def wipe_write_perm(self, broker_name: str, add: bool = False) -> int:
        count = 0
        for qds in self.topic_queue_table.values():
            qd = qds.get(broker_name)
            if qd is not None:
                # adding sets exactly READ|WRITE, as Java's operateWritePermOfBroker does
                qd.perm = (PERM_READ | PERM_WRITE) if add else (qd.perm & ~PERM_WRITE)
                count += 1
        return count

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return [t for t, qds in self.topic_queue_table.items() if any(n in names for n in qds)]

    def topics_with_sys_flag(self, want: int, unwanted: int = 0) -> list[str]:
        out = []
        for topic, qds in self.topic_queue_table.items():
            flags = [qd.topic_sys_flag for qd in qds.values()]
            if flags and flags[0] & want == want and not flags[0] & unwanted:
                out.append(topic)
        return out


class KVConfigManager:
    """namespace -> {key: value}, persisted as ``{"configTable":{...}}`` like kvConfig.json."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.table: dict[str, dict[str, str]] = {}
        if path and os.path.exists(path):
            try:
                with open(path, "rb") as f:
                    self.table = {
                        ns: dict(kv)
                        for ns, kv in (loads_object(f.read(), path).get("configTable") or {}).items()
                    }
            except (OSError, BodyError) as exc:
                log.warning("cannot load %s: %s", path, exc)

    def put(self, namespace: str, key: str, value: str) -> None:
        self.table.setdefault(namespace, {})[key] = value
        self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        """Removes the key; its namespace stays, even empty, as Java's does: an empty ORDER_TOPIC_CONFIG
        table tells the brokers that no topic is an order topic any more."""
        kv = self.table.get(namespace)
        if kv is not None and kv.pop(key, None) is not None:
            self._persist()

    def kv_list(self, namespace: str) -> bytes | None:
        kv = self.table.get(namespace)
        return None if kv is None else dumpb({"table": kv})

    def _persist(self) -> None:
        if not self.path:
            return
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(dumps({"configTable": self.table}))
        os.replace(tmp, self.path)


# --- request processor ----------------------------------------------------------------------------
R = RequestCode


class NamesrvProcessor(RequestProcessor):
    codes: ClassVar[tuple[int, ...]] = (
        R.PUT_KV_CONFIG,
        R.GET_KV_CONFIG,
        R.DELETE_KV_CONFIG,
        R.QUERY_DATA_VERSION,
        R.REGISTER_BROKER,
        R.UNREGISTER_BROKER,
        R.GET_ROUTEINFO_BY_TOPIC,
        R.GET_BROKER_CLUSTER_INFO,
        R.WIPE_WRITE_PERM_OF_BROKER,
        R.ADD_WRITE_PERM_OF_BROKER,
        R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        R.DELETE_TOPIC_IN_NAMESRV,
        R.GET_KVLIST_BY_NAMESPACE,
        R.GET_TOPICS_BY_CLUSTER,
        R.GET_SYSTEM_TOPIC_LIST_FROM_NS,
        R.GET_UNIT_TOPIC_LIST,
        R.GET_HAS_UNIT_SUB_TOPIC_LIST,
        R.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
        R.UPDATE_NAMESRV_CONFIG,
        R.GET_NAMESRV_CONFIG,
    )

    def __init__(self, controller: NamesrvController) -> None:
        self.routes = controller.routes
        self.kv = controller.kv
        self.controller = controller
        self._handlers = {
            R.PUT_KV_CONFIG: self.put_kv_config,
            R.GET_KV_CONFIG: self.get_kv_config,
            R.DELETE_KV_CONFIG: self.delete_kv_config,
            R.QUERY_DATA_VERSION: self.query_data_version,
            R.REGISTER_BROKER: self.register_broker,
            R.UNREGISTER_BROKER: self.unregister_broker,
            R.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            R.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            R.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            R.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            R.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            R.GET_KVLIST_BY_NAMESPACE: self.get_kv_list,
            R.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            R.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topic_list,
            R.GET_UNIT_TOPIC_LIST: lambda ch, req: self._topic_list(req, self.routes.topics_with_sys_flag(1)),
            R.GET_HAS_UNIT_SUB_TOPIC_LIST: lambda ch, req: self._topic_list(
                req, self.routes.topics_with_sys_flag(TOPIC_SYS_FLAG_UNIT_SUB)
            ),
            R.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: lambda ch, req: self._topic_list(
                req, self.routes.topics_with_sys_flag(TOPIC_SYS_FLAG_UNIT_SUB, TOPIC_SYS_FLAG_UNIT)
            ),
            R.UPDATE_NAMESRV_CONFIG: self.update_config,
            R.GET_NAMESRV_CONFIG: self.get_config,
        }

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        return self._handlers[request.code](channel, request)

    # -- config (mqadmin getNamesrvConfig / updateNamesrvConfig) --
    def update_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        try:
            props = update_from_body(self.controller.config, req.body)
        except ConfigUpdateRefused as exc:
            return req.response(exc.code, exc.remark)
        log.info("updateNamesrvConfig by %s: %s", channel.remote_addr, props)
        return req.response(ResponseCode.SUCCESS)

    def get_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS, body=self.controller.config.properties_text().encode())

    # -- kv --
    def put_kv_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = H.PutKVConfigRequestHeader.from_ext(req.ext_fields or {})
        self.kv.put(h.namespace, h.key, h.value)
        return req.response(ResponseCode.SUCCESS)

    def get_kv_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = H.GetKVConfigRequestHeader.from_ext(req.ext_fields or {})
        ns, key = h.namespace, h.key
        value = self.kv.get(ns, key)
        if value is not None:
            return req.response(ResponseCode.SUCCESS, ext_fields={"value": value})
        return req.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}", {})

    def delete_kv_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = H.DeleteKVConfigRequestHeader.from_ext(req.ext_fields or {})
        self.kv.delete(h.namespace, h.key)
        return req.response(ResponseCode.SUCCESS)

    def get_kv_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        ns = H.GetKVListByNamespaceRequestHeader.from_ext(req.ext_fields or {}).namespace
        body = self.kv.kv_list(ns)
        if body is not None:
            return req.response(ResponseCode.SUCCESS, body=body)
        return req.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")

    # -- brokers --
    def register_broker(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = H.RegisterBrokerRequestHeader.from_ext(req.ext_fields or {})
        compressed, crc = h.compressed, h.body_crc32
        body = req.body
        if crc != 0 and (zlib.crc32(body or b"") & 0x7FFFFFFF) != crc:
            log.warning("REGISTER_BROKER from %s: body CRC32 mismatch", channel.remote_addr)
            return req.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if body:
            try:
                wrapper, filters = decode_register_body(bytes(body), compressed)
            except BodyError as exc:
                raise BodyError(f"Failed to decode RegisterBrokerBody: {exc}") from None
        else:
            wrapper, filters = TopicConfigSerializeWrapper().to_obj(), []
        if not channel.attrs.get("namesrv_close_hook"):
            channel.attrs["namesrv_close_hook"] = True
            channel.add_close_listener(self.routes.on_channel_destroy)
        ha, master = self.routes.register_broker(
            h.cluster_name,
            h.broker_addr,
            h.broker_name,
            h.broker_id,
            h.ha_server_addr,
            wrapper,
            filters,
            channel,
        )
        out: dict[str, str] = {}
        if ha:
            out["haServerAddr"] = ha
        if master:
            out["masterAddr"] = master
        return req.response(
            ResponseCode.SUCCESS, ext_fields=out, body=self.kv.kv_list(NAMESPACE_ORDER_TOPIC_CONFIG)
        )

    def unregister_broker(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = H.UnRegisterBrokerRequestHeader.from_ext(req.ext_fields or {})
        self.routes.unregister_broker(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id)
        return req.response(ResponseCode.SUCCESS)

    def query_data_version(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        broker_addr = H.QueryDataVersionRequestHeader.from_ext(req.ext_fields or {}).broker_addr
        version = DataVersion.from_json(req.body).to_obj()
        changed = self.routes.is_broker_topic_config_changed(broker_addr, version)
        if not changed:
            self.routes.touch(broker_addr)
        live = self.routes.broker_live_table.get(broker_addr)
        body = dumpb(live.data_version) if live else None
        return req.response(
            ResponseCode.SUCCESS, ext_fields={"changed": "true" if changed else "false"}, body=body
        )

    # -- routes --
    def get_route_info_by_topic(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = H.GetRouteInfoRequestHeader.from_ext(req.ext_fields or {})
        topic = h.topic
        route = self.routes.pickup_topic_route_data(topic)
        if route is None:
            return req.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}{FAQ_APPLY_TOPIC}",
            )
        if self.controller.config.orderMessageEnable:
            conf = self.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
            if conf is not None:
                route = {**route, "orderTopicConf": conf}
                route = dict(sorted(route.items()))
        standard = req.version >= MQVersion.V4_9_4 or bool(h.accept_standard_json_only)
        return req.response(ResponseCode.SUCCESS, body=dumpb(route, standard=standard))

    def get_broker_cluster_info(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS, body=dumpb(self.routes.cluster_info()))

    def wipe_write_perm(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        name = H.WipeWritePermOfBrokerRequestHeader.from_ext(req.ext_fields or {}).broker_name
        count = self.routes.wipe_write_perm(name)
        return req.response(ResponseCode.SUCCESS, ext_fields={"wipeTopicCount": str(count)})

    def add_write_perm(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        name = H.AddWritePermOfBrokerRequestHeader.from_ext(req.ext_fields or {}).broker_name
        count = self.routes.wipe_write_perm(name, add=True)
        return req.response(ResponseCode.SUCCESS, ext_fields={"addTopicCount": str(count)})

    def _topic_list(
        self, req: RemotingCommand, topics: list[str], broker_addr: str | None = None
    ) -> RemotingCommand:
        body: dict[str, Any] = {"topicList": topics}
        if broker_addr:
            body = {"brokerAddr": broker_addr, "topicList": topics}
        return req.response(ResponseCode.SUCCESS, body=dumpb(body))

    def get_all_topic_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return self._topic_list(req, list(self.routes.topic_queue_table))

    def delete_topic(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = H.DeleteTopicFromNamesrvRequestHeader.from_ext(req.ext_fields or {})
        topic, cluster = h.topic, h.cluster_name
        if cluster:
            names = self.routes.cluster_addr_table.get(cluster, set())
            qds = self.routes.topic_queue_table.get(topic, {})
            for name in list(qds):
                if name in names:
                    del qds[name]
            if not qds:
                self.routes.topic_queue_table.pop(topic, None)
        else:
            self.routes.topic_queue_table.pop(topic, None)
        return req.response(ResponseCode.SUCCESS)

    def get_topics_by_cluster(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        cluster = H.GetTopicsByClusterRequestHeader.from_ext(req.ext_fields or {}).cluster
        return self._topic_list(req, self.routes.topics_by_cluster(cluster))

    def get_system_topic_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topics: list[str] = []
        for cluster, names in self.routes.cluster_addr_table.items():
            topics.append(cluster)
            topics.extend(sorted(names))
        addr = None
        for bd in self.routes.broker_addr_table.values():
            if bd.broker_addrs:
                addr = next(iter(bd.broker_addrs.values()))
                break
        return self._topic_list(req, list(dict.fromkeys(topics)), addr)  # a set in Java's TopicList


class NamesrvController:
    """Name server state plus its expiry scan (every 10 s, like NamesrvController's scheduler)."""

    def __init__(
        self,
        config: NamesrvConfig | None = None,
        *,
        broker_expire_after: float = BROKER_CHANNEL_EXPIRED_TIME,
        scan_interval: float = 10.0,
    ) -> None:
        self.config = config = config if config is not None else NamesrvConfig()
        self.routes = RouteInfoManager(broker_expire_after)
        self.kv = KVConfigManager(config.kvConfigPath)
        self.scan_interval = scan_interval
        self.processor = NamesrvProcessor(self)
        self._scanner: asyncio.Task[None] | None = None

    def processors(self) -> list[RequestProcessor]:
        return [self.processor]

    async def start(self) -> None:
        self._scanner = asyncio.get_running_loop().create_task(self._scan())

    async def _scan(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval)
            try:
                self.routes.scan_not_active_brokers()
            except Exception:
                log.exception("broker expiry scan failed")

    async def stop(self) -> None:
        await cancel_and_wait([self._scanner])
        self._scanner = None
