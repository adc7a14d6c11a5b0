"""Typed request/response headers for every code rmqgate serves (PROTOCOL.md §2-3).

Fields carry RocketMQ 4.9.8's Java names (plus the optional 5.x additions clients send); those
without a default are required (@CFNotNull). Required fields come first only because dataclasses
demand it — extFields is a map, so order never reaches the wire. ``REQUEST_HEADERS`` and
``RESPONSE_HEADERS`` map a request code to its classes (``None``: the code has no custom header);
``decode_request_header`` applies the one-letter aliases for the V2 send codes.
"""

from __future__ import annotations

from rmqgate.wire.codes import RequestCode
from rmqgate.wire.header import CommandHeader, Integer, Long, command_header, wire


# --- send (§3.1) ---------------------------------------------------------------------------------
@command_header
class SendMessageRequestHeader(CommandHeader):
    """SEND_MESSAGE/SEND_REPLY_MESSAGE (10/324) with long names; 310/320/325 with the V2 aliases."""

    producer_group: str = wire(alias="a")
    topic: str = wire(alias="b")
    default_topic: str = wire(alias="c")
    default_topic_queue_nums: Integer = wire(alias="d")
    queue_id: Integer = wire(alias="e")
    sys_flag: Integer = wire(alias="f")
    born_timestamp: Long = wire(alias="g")
    flag: Integer = wire(alias="h")
    properties: str | None = wire(alias="i", default=None)
    reconsume_times: Integer | None = wire(alias="j", default=None)
    unit_mode: bool = wire(alias="k", default=False)
    max_reconsume_times: Integer | None = wire(alias="l", default=None)
    batch: bool = wire(alias="m", default=False)
    bname: str | None = wire(alias="n", default=None)


@command_header
class SendMessageResponseHeader(CommandHeader):
    msg_id: str
    queue_id: Integer
    queue_offset: Long
    transaction_id: str | None = None
    batch_uniq_id: str | None = None  # 5.x
    recall_handle: str | None = None  # 5.x


@command_header
class ReplyMessageRequestHeader(CommandHeader):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326), broker -> requester: the reply's send header plus where
    and when the broker took it."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: Integer
    queue_id: Integer
    sys_flag: Integer
    born_timestamp: Long
    flag: Integer
    born_host: str
    store_host: str
    store_timestamp: Long
    properties: str | None = None
    reconsume_times: Integer | None = None
    unit_mode: bool = False


# --- pull (§3.2) ---------------------------------------------------------------------------------
@command_header
class PullMessageRequestHeader(CommandHeader):
    """PULL_MESSAGE (11) and 5.x LITE_PULL_MESSAGE (361)."""

    consumer_group: str
    topic: str
    queue_id: Integer
    queue_offset: Long
    max_msg_nums: Integer
    sys_flag: Integer
    commit_offset: Long
    suspend_timeout_millis: Long
    sub_version: Long
    subscription: str | None = None
    expression_type: str | None = None
    max_msg_bytes: Integer | None = None  # 5.x
    request_source: Integer | None = None  # 5.x
    proxy_froward_client_id: str | None = None  # 5.x (sic)
    bname: str | None = None


@command_header
class PullMessageResponseHeader(CommandHeader):
    suggest_which_broker_id: Long
    next_begin_offset: Long
    min_offset: Long
    max_offset: Long
    offset_delta: Long | None = None  # 5.x
    topic_sys_flag: Integer | None = None  # 5.x
    group_sys_flag: Integer | None = None  # 5.x
    forbidden_type: Integer | None = None  # 5.x


# --- offsets (§3.3) ------------------------------------------------------------------------------
@command_header
class QueryConsumerOffsetRequestHeader(CommandHeader):
    consumer_group: str
    topic: str
    queue_id: Integer
    set_zero_if_not_found: bool | None = None  # 5.x
    bname: str | None = None


@command_header
class QueryConsumerOffsetResponseHeader(CommandHeader):
    offset: Long


@command_header
class UpdateConsumerOffsetRequestHeader(CommandHeader):
    consumer_group: str
    topic: str
    queue_id: Integer
    commit_offset: Long
    bname: str | None = None


@command_header
class GetMaxOffsetRequestHeader(CommandHeader):
    topic: str
    queue_id: Integer
    committed: bool | None = None  # 5.x; absent means true
    bname: str | None = None


@command_header
class GetMaxOffsetResponseHeader(CommandHeader):
    offset: Long


@command_header
class GetMinOffsetRequestHeader(CommandHeader):
    topic: str
    queue_id: Integer
    bname: str | None = None


@command_header
class GetMinOffsetResponseHeader(CommandHeader):
    offset: Long


@command_header
class GetEarliestMsgStoretimeRequestHeader(CommandHeader):
    topic: str
    queue_id: Integer
    bname: str | None = None


@command_header
class GetEarliestMsgStoretimeResponseHeader(CommandHeader):
    timestamp: Long


@command_header
class SearchOffsetRequestHeader(CommandHeader):
    topic: str
    queue_id: Integer
    timestamp: Long
    bname: str | None = None


@command_header
class SearchOffsetResponseHeader(CommandHeader):
    offset: Long


# --- query / view (§3.4) -------------------------------------------------------------------------
@command_header
class ViewMessageRequestHeader(CommandHeader):
    offset: Long


@command_header
class QueryMessageRequestHeader(CommandHeader):
    topic: str
    key: str
    max_num: Integer
    begin_timestamp: Long
    end_timestamp: Long


@command_header
class QueryMessageResponseHeader(CommandHeader):
    index_last_update_timestamp: Long
    index_last_update_phyoffset: Long


# --- client management (§3.5) --------------------------------------------------------------------
@command_header
class UnregisterClientRequestHeader(CommandHeader):
    client_id: str = wire("clientID")
    producer_group: str | None = None
    consumer_group: str | None = None


@command_header
class GetConsumerListByGroupRequestHeader(CommandHeader):
    consumer_group: str


@command_header
class NotifyConsumerIdsChangedRequestHeader(CommandHeader):
    consumer_group: str


@command_header
class ConsumerSendMsgBackRequestHeader(CommandHeader):
    offset: Long
    group: str
    delay_level: Integer
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: Integer | None = None
    bname: str | None = None


# --- transactions (§3.6) -------------------------------------------------------------------------
@command_header
class EndTransactionRequestHeader(CommandHeader):
    producer_group: str
    tran_state_table_offset: Long
    commit_log_offset: Long
    commit_or_rollback: Integer
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None
    topic: str | None = None  # 5.x
    bname: str | None = None


@command_header
class CheckTransactionStateRequestHeader(CommandHeader):
    """Broker -> producer (oneway)."""

    tran_state_table_offset: Long
    commit_log_offset: Long
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None
    topic: str | None = None  # 5.x
    bname: str | None = None


# --- broker admin (§3.7) -------------------------------------------------------------------------
@command_header
class CreateTopicRequestHeader(CommandHeader):
    """@CFNotNull ``defaultTopic`` and ``order`` may be missing: 4.9.8 only logs a missing field and
    keeps its default, and updateAndCreateTopic reads neither."""

    topic: str
    read_queue_nums: Integer
    write_queue_nums: Integer
    perm: Integer
    topic_filter_type: str
    default_topic: str | None = None
    order: bool = False
    topic_sys_flag: Integer | None = None
    attributes: str | None = None  # 5.x
    force: bool | None = None  # 5.x


@command_header
class DeleteTopicRequestHeader(CommandHeader):
    """DELETE_TOPIC_IN_BROKER (215)."""

    topic: str


@command_header
class GetTopicStatsInfoRequestHeader(CommandHeader):
    topic: str


@command_header
class QueryTopicConsumeByWhoRequestHeader(CommandHeader):
    topic: str


@command_header
class GetConsumeStatsRequestHeader(CommandHeader):
    consumer_group: str
    topic: str | None = None


@command_header
class ViewBrokerStatsDataRequestHeader(CommandHeader):
    stats_name: str
    stats_key: str


@command_header
class GetConsumerConnectionListRequestHeader(CommandHeader):
    consumer_group: str


@command_header
class GetProducerConnectionListRequestHeader(CommandHeader):
    producer_group: str


@command_header
class DeleteSubscriptionGroupRequestHeader(CommandHeader):
    group_name: str
    remove_offset: bool = False


@command_header
class ResetOffsetRequestHeader(CommandHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) and broker -> client RESET_CONSUMER_CLIENT_OFFSET (220).
    ``isForce`` is @CFNotNull, but a missing one is only logged by 4.9.8 and stays false."""

    topic: str
    group: str
    timestamp: Long
    is_force: bool = False
    queue_id: Integer | None = None  # 5.x; absent means every queue (-1)
    offset: Long | None = None  # 5.x


@command_header
class GetConsumerStatusRequestHeader(CommandHeader):
    """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223) and broker -> client GET_CONSUMER_STATUS_FROM_CLIENT
    (221). ``clientAddr`` is a client id: the one consumer to ask."""

    topic: str
    group: str
    client_addr: str | None = None


@command_header
class GetConsumeStatsInBrokerHeader(CommandHeader):
    """GET_BROKER_CONSUME_STATS (317); a missing ``isOrder`` is false (only logged by 4.9.8)."""

    is_order: bool = False


@command_header
class QueryConsumeQueueRequestHeader(CommandHeader):
    """QUERY_CONSUME_QUEUE (321): ``count`` ConsumeQueue units from ``index``; no field is @CFNotNull."""

    topic: str
    queue_id: Integer = 0
    index: Long = 0
    count: Integer = 0
    consumer_group: str | None = None


@command_header
class GetConsumerRunningInfoRequestHeader(CommandHeader):
    consumer_group: str
    client_id: str
    jstack_enable: bool = False


@command_header
class ConsumeMessageDirectlyResultRequestHeader(CommandHeader):
    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None


# --- name server (§3.8) --------------------------------------------------------------------------
@command_header
class RegisterBrokerRequestHeader(CommandHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: Long
    heartbeat_timeout_millis: Long | None = None  # 5.x
    enable_acting_master: bool | None = None  # 5.x
    compressed: bool = False
    body_crc32: Integer = 0


@command_header
class RegisterBrokerResponseHeader(CommandHeader):
    ha_server_addr: str | None = None
    master_addr: str | None = None


@command_header
class UnRegisterBrokerRequestHeader(CommandHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


@command_header
class QueryDataVersionRequestHeader(CommandHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


@command_header
class QueryDataVersionResponseHeader(CommandHeader):
    changed: bool


@command_header
class GetRouteInfoRequestHeader(CommandHeader):
    topic: str
    accept_standard_json_only: bool | None = None


@command_header
class GetKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str


@command_header
class GetKVConfigResponseHeader(CommandHeader):
    value: str | None = None


@command_header
class PutKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str
    value: str


@command_header
class DeleteKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str


@command_header
class GetKVListByNamespaceRequestHeader(CommandHeader):
    namespace: str


@command_header
class GetTopicsByClusterRequestHeader(CommandHeader):
    cluster: str


@command_header
class DeleteTopicFromNamesrvRequestHeader(CommandHeader):
    """DELETE_TOPIC_IN_NAMESRV (216)."""

    topic: str
    cluster_name: str | None = None


@command_header
class WipeWritePermOfBrokerRequestHeader(CommandHeader):
    broker_name: str


@command_header
class WipeWritePermOfBrokerResponseHeader(CommandHeader):
    wipe_topic_count: Integer


@command_header
class AddWritePermOfBrokerRequestHeader(CommandHeader):
    broker_name: str


@command_header
class AddWritePermOfBrokerResponseHeader(CommandHeader):
    add_topic_count: Integer


# --- registry ------------------------------------------------------------------------------------
_R = RequestCode

#: Request code -> request header class; ``None`` for codes that take no custom header.
REQUEST_HEADERS: dict[int, type[CommandHeader] | None] = {
    _R.SEND_MESSAGE: SendMessageRequestHeader,
    _R.SEND_MESSAGE_V2: SendMessageRequestHeader,
    _R.SEND_BATCH_MESSAGE: SendMessageRequestHeader,
    _R.SEND_REPLY_MESSAGE: SendMessageRequestHeader,
    _R.SEND_REPLY_MESSAGE_V2: SendMessageRequestHeader,
    _R.PULL_MESSAGE: PullMessageRequestHeader,
    _R.LITE_PULL_MESSAGE: PullMessageRequestHeader,
    _R.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader,
    _R.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
    _R.GET_MAX_OFFSET: GetMaxOffsetRequestHeader,
    _R.GET_MIN_OFFSET: GetMinOffsetRequestHeader,
    _R.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeRequestHeader,
    _R.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetRequestHeader,
    _R.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader,
    _R.QUERY_MESSAGE: QueryMessageRequestHeader,
    _R.HEART_BEAT: None,
    _R.UNREGISTER_CLIENT: UnregisterClientRequestHeader,
    _R.GET_CONSUMER_LIST_BY_GROUP: GetConsumerListByGroupRequestHeader,
    _R.NOTIFY_CONSUMER_IDS_CHANGED: NotifyConsumerIdsChangedRequestHeader,
    _R.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
    _R.END_TRANSACTION: EndTransactionRequestHeader,
    _R.CHECK_TRANSACTION_STATE: CheckTransactionStateRequestHeader,
    _R.PUSH_REPLY_MESSAGE_TO_CLIENT: ReplyMessageRequestHeader,
    _R.LOCK_BATCH_MQ: None,
    _R.UNLOCK_BATCH_MQ: None,
    _R.UPDATE_AND_CREATE_TOPIC: CreateTopicRequestHeader,
    _R.DELETE_TOPIC_IN_BROKER: DeleteTopicRequestHeader,
    _R.GET_TOPIC_STATS_INFO: GetTopicStatsInfoRequestHeader,
    _R.GET_CONSUME_STATS: GetConsumeStatsRequestHeader,
    _R.QUERY_TOPIC_CONSUME_BY_WHO: QueryTopicConsumeByWhoRequestHeader,
    _R.VIEW_BROKER_STATS_DATA: ViewBrokerStatsDataRequestHeader,
    _R.GET_CONSUMER_CONNECTION_LIST: GetConsumerConnectionListRequestHeader,
    _R.GET_PRODUCER_CONNECTION_LIST: GetProducerConnectionListRequestHeader,
    _R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: None,
    _R.DELETE_SUBSCRIPTIONGROUP: DeleteSubscriptionGroupRequestHeader,
    _R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: None,
    _R.GET_ALL_TOPIC_CONFIG: None,
    _R.GET_ALL_CONSUMER_OFFSET: None,
    _R.GET_BROKER_RUNTIME_INFO: None,
    _R.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetRequestHeader,
    _R.RESET_CONSUMER_CLIENT_OFFSET: ResetOffsetRequestHeader,
    _R.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: GetConsumerStatusRequestHeader,
    _R.GET_CONSUMER_STATUS_FROM_CLIENT: GetConsumerStatusRequestHeader,
    _R.GET_BROKER_CONSUME_STATS: GetConsumeStatsInBrokerHeader,
    _R.GET_ALL_PRODUCER_INFO: None,
    _R.QUERY_CONSUME_QUEUE: QueryConsumeQueueRequestHeader,
    _R.CLEAN_EXPIRED_CONSUMEQUEUE: None,
    _R.CLEAN_UNUSED_TOPIC: None,
    _R.DELETE_EXPIRED_COMMITLOG: None,
    _R.GET_CONSUMER_RUNNING_INFO: GetConsumerRunningInfoRequestHeader,
    _R.CONSUME_MESSAGE_DIRECTLY: ConsumeMessageDirectlyResultRequestHeader,
    _R.REGISTER_BROKER: RegisterBrokerRequestHeader,
    _R.UNREGISTER_BROKER: UnRegisterBrokerRequestHeader,
    _R.QUERY_DATA_VERSION: QueryDataVersionRequestHeader,
    _R.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoRequestHeader,
    _R.GET_BROKER_CLUSTER_INFO: None,
    _R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: None,
    _R.GET_KV_CONFIG: GetKVConfigRequestHeader,
    _R.PUT_KV_CONFIG: PutKVConfigRequestHeader,
    _R.DELETE_KV_CONFIG: DeleteKVConfigRequestHeader,
    _R.GET_KVLIST_BY_NAMESPACE: GetKVListByNamespaceRequestHeader,
    _R.GET_TOPICS_BY_CLUSTER: GetTopicsByClusterRequestHeader,
    _R.DELETE_TOPIC_IN_NAMESRV: DeleteTopicFromNamesrvRequestHeader,
    _R.WIPE_WRITE_PERM_OF_BROKER: WipeWritePermOfBrokerRequestHeader,
    _R.ADD_WRITE_PERM_OF_BROKER: AddWritePermOfBrokerRequestHeader,
}

#: Request code -> header class of its (successful) response; ``None``: the response has none.
RESPONSE_HEADERS: dict[int, type[CommandHeader] | None] = {
    **{code: None for code in REQUEST_HEADERS},
    _R.SEND_MESSAGE: SendMessageResponseHeader,
    _R.SEND_MESSAGE_V2: SendMessageResponseHeader,
    _R.SEND_BATCH_MESSAGE: SendMessageResponseHeader,
    _R.SEND_REPLY_MESSAGE: SendMessageResponseHeader,
    _R.SEND_REPLY_MESSAGE_V2: SendMessageResponseHeader,
    _R.PULL_MESSAGE: PullMessageResponseHeader,
    _R.LITE_PULL_MESSAGE: PullMessageResponseHeader,
    _R.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetResponseHeader,
    _R.GET_MAX_OFFSET: GetMaxOffsetResponseHeader,
    _R.GET_MIN_OFFSET: GetMinOffsetResponseHeader,
    _R.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeResponseHeader,
    _R.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetResponseHeader,
    _R.QUERY_MESSAGE: QueryMessageResponseHeader,
    _R.REGISTER_BROKER: RegisterBrokerResponseHeader,
    _R.QUERY_DATA_VERSION: QueryDataVersionResponseHeader,
    _R.GET_KV_CONFIG: GetKVConfigResponseHeader,
    _R.WIPE_WRITE_PERM_OF_BROKER: WipeWritePermOfBrokerResponseHeader,
    _R.ADD_WRITE_PERM_OF_BROKER: AddWritePermOfBrokerResponseHeader,
}

#: Codes whose request header travels with the one-letter aliases (SendMessageRequestHeaderV2).
V2_CODES = frozenset({_R.SEND_MESSAGE_V2, _R.SEND_BATCH_MESSAGE, _R.SEND_REPLY_MESSAGE_V2})

_EMPTY: dict[str, str] = {}


def decode_request_header(code: int, ext_fields: dict[str, str] | None) -> CommandHeader | None:
    """The typed header of a request (``None`` when the code takes none); raises HeaderFieldError."""
    cls = REQUEST_HEADERS.get(code)
    if cls is None:
        return None
    ext = ext_fields if ext_fields is not None else _EMPTY
    return cls.from_ext_v2(ext) if code in V2_CODES else cls.from_ext(ext)


def encode_request_header(code: int, header: CommandHeader) -> dict[str, str]:
    """extFields for ``header`` in the naming ``code`` uses (aliases for the V2 send codes)."""
    return header.to_ext_v2() if code in V2_CODES else header.to_ext()
