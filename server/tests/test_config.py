"""broker.conf parsing and BrokerConfig -> StoreConfig."""

from __future__ import annotations

from pathlib import Path

from rmqgate.server.config import BrokerConfig, load_broker_conf, parse_properties_text


def test_properties_syntax() -> None:
    text = "# comment\n! also\nbrokerName = b1\nbrokerId:1\nnamesrvAddr=a:1;\\\n  b:2\n\nflag\n"
    assert parse_properties_text(text) == {
        "brokerName": "b1",
        "brokerId": "1",
        "namesrvAddr": "a:1;b:2",
        "flag": "",
    }


def test_broker_conf_keys_and_defaults(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerClusterName=C1\nbrokerName=broker-x\nbrokerId=0\nnamesrvAddr=127.0.0.1:9876;127.0.0.1:9877\n"
        "listenPort=20911\nbrokerIP1=10.1.2.3\nstorePathRootDir=/data/store\nflushDiskType=SYNC_FLUSH\n"
        "autoCreateTopicEnable=false\ndefaultTopicQueueNums=4\ntransactionTimeOut=3000\n"
        "transactionCheckInterval=30000\nmessageDelayLevel=1s 2s\nmapedFileSizeCommitLog=1024\nsomethingElse=x\n"
    )
    c = load_broker_conf(str(conf))
    assert (c.brokerClusterName, c.brokerName, c.brokerId, c.listenPort) == ("C1", "broker-x", 0, 20911)
    assert c.namesrv_addrs == ["127.0.0.1:9876", "127.0.0.1:9877"] and c.broker_addr == "10.1.2.3:20911"
    assert c.autoCreateTopicEnable is False and c.defaultTopicQueueNums == 4
    assert (c.transactionTimeOut, c.transactionCheckInterval, c.messageDelayLevel) == (3000, 30000, "1s 2s")
    assert c.extra == {"mapedFileSizeCommitLog": "1024", "somethingElse": "x"}
    s = c.store_config()
    assert (s.store_path_root_dir, s.flush_disk_type, s.store_host, s.store_port) == (
        "/data/store", "SYNC_FLUSH", "10.1.2.3", 20911,
    )  # fmt: skip
    assert s.message_delay_level == "1s 2s"
    d = BrokerConfig()
    assert (d.brokerClusterName, d.listenPort, d.defaultTopicQueueNums, d.autoCreateTopicEnable) == (
        "DefaultCluster", 10911, 8, True,
    )  # fmt: skip
    assert d.regionId == "DefaultRegion" and d.channelExpiredTimeout == 120_000
