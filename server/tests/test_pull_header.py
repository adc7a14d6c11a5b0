"""PULL_MESSAGE with required header fields missing, as 4.9.8 answers it: PullMessageRequestHeader is a
FastCodesHeader there, so a missing field stays null and the pull fails only where the processor reads
it, after the checks that come first."""

from __future__ import annotations

from rmqgate.server.testing import async_test, heartbeat, pull_cmd, send_v2
from rmqgate.wire import RemotingCommand, ResponseCode


def without(cmd: RemotingCommand, *names: str) -> RemotingCommand:
    for name in names:
        del cmd.ext_fields[name]
    return cmd


@async_test
async def test_a_missing_pull_field_fails_where_java_reads_it(Broker) -> None:
    async with Broker() as b:
        c = await b.client()
        assert (await c.invoke(send_v2("PH"))).code == ResponseCode.SUCCESS
        # no subscription in the request and no consumer of the group: the group check answers first
        resp = await c.invoke(without(pull_cmd("PH", 0, group="G0", sys_flag=0), "queueOffset"))
        assert resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST, resp
        # with its subscription the pull reaches the store read, which needs queueOffset / maxMsgNums
        for name in ("queueOffset", "maxMsgNums", "queueId", "topic", "consumerGroup", "sysFlag"):
            resp = await c.invoke(without(pull_cmd("PH", 0, group="G1"), name))
            assert resp.code == ResponseCode.SYSTEM_ERROR and name in resp.remark, (name, resp)
        # fields the pull does not read stay optional: suspendTimeoutMillis without the suspend flag,
        # commitOffset without the commit flag, subVersion with the subscription in the request
        for name in ("suspendTimeoutMillis", "commitOffset", "subVersion"):
            resp = await c.invoke(without(pull_cmd("PH", 0, group="G1", sys_flag=4), name))
            assert resp.code == ResponseCode.SUCCESS, (name, resp)
        resp = await c.invoke(without(pull_cmd("PH", 1, group="G1", sys_flag=4 | 1), "commitOffset"))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "commitOffset" in resp.remark
        # a registered consumer's pull compares subVersion with its subscription's
        assert (await c.invoke(heartbeat("cid", "G2", "PH"))).code == ResponseCode.SUCCESS
        resp = await c.invoke(without(pull_cmd("PH", 0, group="G2", sys_flag=0), "subVersion"))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "subVersion" in resp.remark
        await c.aclose()
