"""broker.conf parsing, BrokerConfig -> StoreConfig, and the UPDATE_*_CONFIG bodies."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rmqgate.server.config import (
    BrokerConfig,
    ConfigError,
    ConfigUpdateRefused,
    NamesrvConfig,
    load_broker_conf,
    parse_properties_text,
    update_from_body,
)
from rmqgate.store.api import StoreConfig
from rmqgate.tools.cli import main
from rmqgate.wire.codes import ResponseCode


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


def test_every_number_key_the_store_reads_reaches_it_from_broker_conf() -> None:
    """A MessageStoreConfig key declared in BrokerConfig but not passed on would be silently
    ignored (maxMsgsNumBatch and the flush page counts were): each is set and must arrive."""
    store_fields = {f.name.replace("_", "").lower(): f.name for f in dataclasses.fields(StoreConfig)}
    config = BrokerConfig()
    shared = {}
    for f in dataclasses.fields(BrokerConfig):
        name = store_fields.get(f.name.lower())
        if name is not None and f.type in (int, "int"):
            setattr(config, f.name, getattr(config, f.name) + 7)
            shared[f.name] = name
    store = config.store_config()
    assert {key: getattr(store, name) for key, name in shared.items()} == {
        key: getattr(config, key) for key in shared
    }
    assert {"maxMsgsNumBatch", "flushCommitLogLeastPages", "maxTransferCountOnMessageInDisk"} <= set(shared)


def test_a_commitlog_spread_over_several_paths_is_refused_not_read_as_one_name() -> None:
    BrokerConfig(storePathCommitLog="/data/commitlog").check_store_paths()
    with pytest.raises(ConfigError, match="storePathCommitLog='/a,/b': one directory only"):
        BrokerConfig(storePathCommitLog="/a,/b").check_store_paths()


def test_broker_role_rules_as_broker_startup() -> None:
    master = BrokerConfig(brokerRole="SYNC_MASTER", brokerId=3)
    master.check_role()
    assert master.brokerId == 0  # a master is always id 0
    slave = BrokerConfig(brokerRole="SLAVE", brokerId=2)
    slave.check_role()
    assert slave.brokerId == 2 and slave.store_config().broker_role == "SLAVE"
    with pytest.raises(ConfigError, match="a slave's brokerId must be > 0"):
        BrokerConfig(brokerRole="SLAVE").check_role()
    with pytest.raises(ConfigError, match="brokerRole='MASTER': not one of ASYNC_MASTER, SYNC_MASTER, SLAVE"):
        BrokerConfig(brokerRole="MASTER").check_role()


def test_a_broker_conf_value_that_does_not_convert_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\nlistenPort = abc\n")
    with pytest.raises(ConfigError, match=r"broker.conf: listenPort='abc': invalid literal"):
        load_broker_conf(str(conf))
    store = tmp_path / "store"
    assert main(["serve", "--conf", str(conf), "--store", str(store), "--namesrv-port", "0"]) == 2
    assert capsys.readouterr().err.startswith("rmqgate serve: ")  # one line, no traceback
    conf.write_text("brokerRole=SLAVE\n")
    assert main(["serve", "--conf", str(conf), "--store", str(store), "--namesrv-port", "0"]) == 2
    assert "a slave's brokerId must be > 0" in capsys.readouterr().err
    conf.write_text("messageDelayLevel=1s 5x\n")  # BrokerStartup stops when parseDelayLevel fails
    assert main(["serve", "--conf", str(conf), "--store", str(store), "--namesrv-port", "0"]) == 2
    assert (
        capsys.readouterr().err
        == "rmqgate serve: messageDelayLevel='1s 5x': level 2 '5x' has no unit s, m, h or d\n"
    )


def test_update_from_body_sets_all_or_nothing() -> None:
    c = BrokerConfig()
    assert update_from_body(c, b"defaultTopicQueueNums=3\nautoCreateTopicEnable=false\nnewKey=v\n") == {
        "defaultTopicQueueNums": "3",
        "autoCreateTopicEnable": "false",
        "newKey": "v",
    }
    assert (c.defaultTopicQueueNums, c.autoCreateTopicEnable, c.extra["newKey"]) == (3, False, "v")
    with pytest.raises(ConfigUpdateRefused) as refused:
        update_from_body(c, b"defaultTopicQueueNums=5\nlistenPort=many\nother=x\n")
    assert refused.value.code == ResponseCode.SYSTEM_ERROR and "listenPort" in refused.value.remark
    assert c.defaultTopicQueueNums == 3 and "other" not in c.extra
    with pytest.raises(ConfigUpdateRefused) as refused:
        update_from_body(c, b"brokerConfigPath=/x\n")
    assert refused.value.code == ResponseCode.NO_PERMISSION
    with pytest.raises(ConfigUpdateRefused) as refused:
        update_from_body(c, b"\xff\xfe")
    assert refused.value.remark == "string2Properties error"
    assert update_from_body(c, None) == {}


def test_the_config_text_has_the_keys_java_reports_with_java_defaults(tmp_path: Path) -> None:
    """GET_BROKER_CONFIG lists the keys of Java's four config classes. mqadmin exportConfigs copies
    16 of them and fails on a missing one (Properties.setProperty of null); the keys rmqgate does
    not act on are reported with 4.9.8's defaults, or the value broker.conf gave."""
    conf = tmp_path / "broker.conf"
    conf.write_text("slaveReadEnable=true\nhaListenPort=20912\nsomethingElse=x\n")
    props = parse_properties_text(load_broker_conf(str(conf)).properties_text())
    export_configs = [
        "brokerClusterName",
        "brokerId",
        "brokerName",
        "brokerRole",
        "fileReservedTime",
        "filterServerNums",
        "flushDiskType",
        "maxMessageSize",
        "messageDelayLevel",
        "msgTraceTopicName",
        "slaveReadEnable",
        "traceOn",
        "traceTopicEnable",
        "useTLS",
        "autoCreateTopicEnable",
        "autoCreateSubscriptionGroup",
    ]
    assert set(export_configs) <= set(props)
    assert (props["filterServerNums"], props["useTLS"], props["transferMsgByHeap"]) == ("0", "false", "true")
    assert (props["slaveReadEnable"], props["haListenPort"]) == ("true", "20912")
    assert "somethingElse" not in props  # not a Java key: dropped, as properties2Object drops it
    # keys Java always reports (mqadmin getBrokerConfig on a 4.9.8 broker lists them unset too)
    assert (props["brokerIP2"], props["isEnableBatchPush"]) == (props["brokerIP1"], "false")
    assert props["storePathCommitLog"] == str(Path(props["storePathRootDir"]) / "commitlog")
    assert len(props) > 170
    namesrv = parse_properties_text(NamesrvConfig().properties_text())
    assert (namesrv["serverWorkerThreads"], namesrv["serverChannelMaxIdleTimeSeconds"]) == ("8", "120")


def test_namesrv_config_text_and_black_list() -> None:
    c = NamesrvConfig(kvConfigPath="/kv.json", listenPort=9877)
    lines = c.properties_text().splitlines()
    assert "orderMessageEnable=false" in lines and "listenPort=9877" in lines and lines == sorted(lines)
    update_from_body(c, b"orderMessageEnable=true")
    assert c.orderMessageEnable is True
    for key in ("kvConfigPath", "configStorePath", "configBlackList", "rocketmqHome"):
        with pytest.raises(ConfigUpdateRefused):
            update_from_body(c, f"{key}=x".encode())


def test_keys_java_always_refuses_stay_refused_whatever_the_black_list_says() -> None:
    """initConfigBlackList adds fixed keys to configBlackList's: rocketmqHome on both servers."""
    for config, fixed in (
        (
            NamesrvConfig(configBlackList=""),
            ("configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome"),
        ),
        (BrokerConfig(configBlackList=""), ("brokerConfigPath", "rocketmqHome", "configBlackList")),
    ):
        for key in fixed:
            with pytest.raises(ConfigUpdateRefused) as refused:
                update_from_body(config, f"{key}=x".encode())
            assert refused.value.code == ResponseCode.NO_PERMISSION, key
        assert "rocketmqHome" not in config.extra
