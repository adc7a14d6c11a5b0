"""QUERY_MESSAGE (by KEYS token or, with ``_UNIQUE_KEY_QUERY``, by UNIQ_KEY) and VIEW_MESSAGE_BY_ID
(``QueryMessageProcessor``). A key query first waits for the index to cover what was stored; it runs
on a worker thread, as Java's queryMessageExecutor does, so that wait never stalls other requests."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, ClassVar

from rmqgate.server.remoting import Channel, RequestProcessor, server_serialized
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.headers import QueryMessageRequestHeader, ViewMessageRequestHeader

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController

UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"


class QueryMessageProcessor(RequestProcessor):
    codes: ClassVar[tuple[int, ...]] = (RequestCode.QUERY_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID)

    def __init__(self, broker: BrokerController) -> None:
        self.store = broker.store
        self.default_query_max_num = broker.config.defaultQueryMaxNum

    def process(
        self, channel: Channel, request: RemotingCommand
    ) -> RemotingCommand | Coroutine[Any, Any, RemotingCommand]:
        ext = request.ext_fields or {}
        if request.code == RequestCode.VIEW_MESSAGE_BY_ID:
            v = ViewMessageRequestHeader.from_ext(ext)
            buf = self.store.select_one_message_by_offset(v.offset)
            if buf is None:
                return request.response(
                    ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {v.offset}"
                )
            return server_serialized(request.response(ResponseCode.SUCCESS, body=bytes(buf)))
        q = QueryMessageRequestHeader.from_ext(ext)
        max_num = self.default_query_max_num if ext.get(UNIQUE_MSG_QUERY_FLAG) == "true" else q.max_num
        return self._query(request, q, max_num)

    async def _query(
        self, request: RemotingCommand, q: QueryMessageRequestHeader, max_num: int
    ) -> RemotingCommand:
        res = await asyncio.get_running_loop().run_in_executor(
            None, self.store.query_message, q.topic, q.key, max_num, q.begin_timestamp, q.end_timestamp
        )
        header = {
            "indexLastUpdateTimestamp": str(res.index_last_update_timestamp),
            "indexLastUpdatePhyoffset": str(res.index_last_update_phyoffset),
        }
        if res.buffers:
            return server_serialized(
                request.response(ResponseCode.SUCCESS, None, header, b"".join(res.buffers))
            )
        return request.response(
            ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", header
        )
