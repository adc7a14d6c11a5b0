"""Typed request/response headers for every code rmqgate serves (PROTOCOL.md §3).

Fields are in RocketMQ's declaration order; those without a default are required (@CFNotNull).
"""

from __future__ import annotations

from rmqgate.wire.header import CommandHeader, command_header, wire


# --- send (§3.1) ---------------------------------------------------------------------------------
@command_header
class SendMessageRequestHeader(CommandHeader):
    """SEND_MESSAGE (10) with long names; SEND_MESSAGE_V2/SEND_BATCH_MESSAGE (310/320) with aliases."""

    producer_group: str = wire(alias="a")
    topic: str = wire(alias="b")
    default_topic: str = wire(alias="c")
    default_topic_queue_nums: int = wire(alias="d")
    queue_id: int = wire(alias="e")
    sys_flag: int = wire(alias="f")
    born_timestamp: int = wire(alias="g")
    flag: int = wire(alias="h")
    properties: str | None = wire(alias="i", default=None)
    reconsume_times: int | None = wire(alias="j", default=None)
    unit_mode: bool = wire(alias="k", default=False)
    max_reconsume_times: int | None = wire(alias="l", default=None)
    batch: bool = wire(alias="m", default=False)
    bname: str | None = wire(alias="n", default=None)


@command_header
class SendMessageResponseHeader(CommandHeader):
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None
    batch_uniq_id: str | None = None


# --- pull (§3.2) ---------------------------------------------------------------------------------
@command_header
class PullMessageRequestHeader(CommandHeader):
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    sub_version: int
    subscription: str | None = None
    expression_type: str | None = None
    max_msg_bytes: int | None = None
    bname: str | None = None


@command_header
class PullMessageResponseHeader(CommandHeader):
    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
