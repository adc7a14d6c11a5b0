"""Offsets: QUERY/UPDATE_CONSUMER_OFFSET (``ConsumerManageProcessor``) and the queue offset queries
GET_MAX/MIN_OFFSET, GET_EARLIEST_MSG_STORETIME, SEARCH_OFFSET_BY_TIMESTAMP (``AdminBrokerProcessor``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rmqgate.server.remoting import Channel, RequestProcessor
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController

R = RequestCode


class OffsetProcessor(RequestProcessor):
    codes: ClassVar[tuple[int, ...]] = (
        R.QUERY_CONSUMER_OFFSET,
        R.UPDATE_CONSUMER_OFFSET,
        R.GET_MAX_OFFSET,
        R.GET_MIN_OFFSET,
        R.GET_EARLIEST_MSG_STORETIME,
        R.SEARCH_OFFSET_BY_TIMESTAMP,
    )

    def __init__(self, broker: BrokerController) -> None:
        self.store = broker.store
        self.meta = broker.store.meta

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields or {}
        code = request.code
        store = self.store
        if code == R.UPDATE_CONSUMER_OFFSET:
            u = UpdateConsumerOffsetRequestHeader.from_ext(ext)
            self.meta.commit_offset(u.consumer_group, u.topic, u.queue_id, u.commit_offset)
            return request.response(ResponseCode.SUCCESS, ext_fields={})
        if code == R.QUERY_CONSUMER_OFFSET:
            q = QueryConsumerOffsetRequestHeader.from_ext(ext)
            offset = self.meta.query_offset(q.consumer_group, q.topic, q.queue_id)
            if offset >= 0:
                return request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})
            # No committed offset: a queue that still starts at 0 is read from 0 (a new group on a new
            # topic) unless that message is no longer in the page cache (a long backlog); otherwise
            # the client decides (consumeFromWhere). ConsumerManageProcessor.queryConsumerOffset.
            if (
                q.set_zero_if_not_found is not False
                and store.get_min_offset_in_queue(q.topic, q.queue_id) <= 0
                and not store.check_in_disk_by_consume_offset(q.topic, q.queue_id, 0)
            ):
                return request.response(ResponseCode.SUCCESS, ext_fields={"offset": "0"})
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
                {},
            )
        if code == R.GET_MAX_OFFSET:
            m = GetMaxOffsetRequestHeader.from_ext(ext)
            return request.response(
                ResponseCode.SUCCESS,
                ext_fields={"offset": str(store.get_max_offset_in_queue(m.topic, m.queue_id))},
            )
        if code == R.GET_MIN_OFFSET:
            n = GetMinOffsetRequestHeader.from_ext(ext)
            return request.response(
                ResponseCode.SUCCESS,
                ext_fields={"offset": str(store.get_min_offset_in_queue(n.topic, n.queue_id))},
            )
        if code == R.GET_EARLIEST_MSG_STORETIME:
            e = GetEarliestMsgStoretimeRequestHeader.from_ext(ext)
            ts = store.get_earliest_message_time(e.topic, e.queue_id)
            return request.response(ResponseCode.SUCCESS, ext_fields={"timestamp": str(ts)})
        s = SearchOffsetRequestHeader.from_ext(ext)
        offset = store.get_offset_in_queue_by_time(s.topic, s.queue_id, s.timestamp)
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})
