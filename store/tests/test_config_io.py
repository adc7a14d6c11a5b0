"""consumerFilter.json through the metadata store: imported as Java's ConsumerFilterManager writes it
and exported again in the same shape (PrettyFormat, each bitPos an int[] on one line)."""

from __future__ import annotations

import json
from pathlib import Path

from rmqgate.store.config_io import CONSUMER_FILTER_JSON, export_config, import_config
from rmqgate.store.meta import CONSUMER_FILTER, LmdbMetaStore
from rmqgate.wire import fastjson

#: the shape 4.9.8 writes (ConsumerFilterManager.encode(true)): one SQL92 group on one topic
CONSUMER_FILTER_FILE = """{
\t"filterDataByTopic":{
\t\t"TopicS":{
\t\t\t"groupFilterData":{
\t\t\t\t"GroupS":{
\t\t\t\t\t"bloomFilterData":{
\t\t\t\t\t\t"bitNum":112,
\t\t\t\t\t\t"bitPos":[19,2,7]
\t\t\t\t\t},
\t\t\t\t\t"bornTime":1700000000000,
\t\t\t\t\t"clientVersion":1700000000123,
\t\t\t\t\t"consumerGroup":"GroupS",
\t\t\t\t\t"dead":false,
\t\t\t\t\t"deadTime":0,
\t\t\t\t\t"expression":"a > 5 AND TAGS IN ('A', 'B')",
\t\t\t\t\t"expressionType":"SQL92",
\t\t\t\t\t"topic":"TopicS"
\t\t\t\t}
\t\t\t},
\t\t\t"topic":"TopicS"
\t\t}
\t}
}"""


def test_consumer_filter_json_round_trips(tmp_path: Path) -> None:
    src = tmp_path / "java-config"
    src.mkdir()
    (src / CONSUMER_FILTER_JSON).write_text(CONSUMER_FILTER_FILE)
    meta = LmdbMetaStore(tmp_path / "meta")
    try:
        assert import_config(meta, src)[CONSUMER_FILTER_JSON] == 1
        row = meta.get(CONSUMER_FILTER, "TopicS")
        assert row is not None
        assert row["groupFilterData"]["GroupS"]["expression"] == "a > 5 AND TAGS IN ('A', 'B')"
        out = tmp_path / "out"
        assert export_config(meta, out)[CONSUMER_FILTER_JSON] == 1
        text = (out / CONSUMER_FILTER_JSON).read_text()
        assert text == CONSUMER_FILTER_FILE
        assert fastjson.loads(text) == fastjson.loads(CONSUMER_FILTER_FILE)
        # an empty table (a broker without SQL92 consumers) is written as 4.9.8 writes it
        (src / CONSUMER_FILTER_JSON).write_text('{\n\t"filterDataByTopic":{}\n}')
        import_config(meta, src)
        export_config(meta, out)
        assert (out / CONSUMER_FILTER_JSON).read_text() == '{\n\t"filterDataByTopic":{}\n}'
    finally:
        meta.close()


def test_a_garbled_consumer_filter_json_imports_what_is_shaped_right_and_exports(tmp_path: Path) -> None:
    """Entries of the wrong shape are passed over on import; export writes what the table holds, a
    bitPos that is no int[] as it is (never raising), the rest as Java's file."""
    good = fastjson.loads(CONSUMER_FILTER_FILE)["filterDataByTopic"]["TopicS"]["groupFilterData"]["GroupS"]
    garbled = {
        "filterDataByTopic": {
            "TopicS": {"groupFilterData": {"GroupS": good, "G2": 5, "G3": [1], "G4": "x"}, "topic": 7},
            "TopicL": {"groupFilterData": [1]},
            "TopicN": 3,
            "TopicB": {
                "groupFilterData": {"GB": {**good, "bloomFilterData": {"bitNum": 112, "bitPos": ["x"]}}}
            },
            "TopicW": {
                "groupFilterData": {"GW": {**good, "bloomFilterData": {"bitNum": 112, "bitPos": [1 << 40]}}}
            },
        }
    }
    src = tmp_path / "java-config"
    src.mkdir()
    (src / CONSUMER_FILTER_JSON).write_text(json.dumps(garbled))
    meta = LmdbMetaStore(tmp_path / "meta")
    try:
        assert import_config(meta, src)[CONSUMER_FILTER_JSON] == 3
        assert sorted(t for t, _ in meta.items(CONSUMER_FILTER)) == ["TopicB", "TopicS", "TopicW"]
        meta.put(CONSUMER_FILTER, "TopicX", [1, 2])  # a row no import writes
        out = tmp_path / "out"
        assert export_config(meta, out)[CONSUMER_FILTER_JSON] == 3
        text = (out / CONSUMER_FILTER_JSON).read_text()
        table = fastjson.loads(text)["filterDataByTopic"]
        assert table["TopicS"] == {"groupFilterData": {"GroupS": good}, "topic": "TopicS"}
        assert table["TopicB"]["groupFilterData"]["GB"]["bloomFilterData"]["bitPos"] == ["x"]
        assert table["TopicW"]["groupFilterData"]["GW"]["bloomFilterData"]["bitPos"] == [1 << 40]
        assert "TopicX" not in table
    finally:
        meta.close()
