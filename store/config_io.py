"""Import/export RocketMQ's config JSON (topics, consumerOffset, subscriptionGroup, delayOffset,
consumerFilter).

Files are fastjson's: unquoted integer keys in offset tables, tab-indented PrettyFormat, written via
``.tmp`` with the previous content kept as ``.bak`` (``MixAll.string2File``).
"""

from __future__ import annotations

import array
import os
from pathlib import Path
from typing import Any

from rmqgate.store.meta import (
    CONSUMER_FILTER,
    CONSUMER_OFFSETS,
    DELAY_OFFSETS,
    SUBSCRIPTION_GROUPS,
    TOPICS,
    LmdbMetaStore,
)
from rmqgate.wire import fastjson

TOPICS_JSON = "topics.json"
CONSUMER_OFFSET_JSON = "consumerOffset.json"
SUBSCRIPTION_GROUP_JSON = "subscriptionGroup.json"
DELAY_OFFSET_JSON = "delayOffset.json"
CONSUMER_FILTER_JSON = "consumerFilter.json"


def _read(path: Path) -> Any | None:
    """``ConfigManager.load``: the file, else (missing, empty or unreadable) its ``.bak``; None when
    neither exists or both are empty; the file's own error when the ``.bak`` does not help either."""
    error: Exception | None = None
    for p in (path, path.with_name(path.name + ".bak")):
        if p.is_file():
            try:
                text = p.read_text("utf-8")
                if text.strip():
                    return fastjson.loads(text)
            except (ValueError, OSError) as exc:  # (BodyError and UnicodeDecodeError are ValueErrors)
                error = error or exc
    if error is not None:
        raise error
    return None


def string2file(text: str, path: Path) -> None:
    """``MixAll.string2File``: write ``.tmp``, keep the old content as ``.bak``, then replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    if path.is_file():
        bak = path.with_name(path.name + ".bak")
        bak.write_bytes(path.read_bytes())
    os.replace(tmp, path)


def _dump(obj: Any) -> str:
    return fastjson.dumps(obj, quoted_keys=False, pretty=True).decode("utf-8")


def _filter_groups(by_topic: Any) -> dict[str, dict[str, Any]]:
    """A FilterDataMapByTopic's groups that are objects (anything else in the file is passed over)."""
    groups = by_topic.get("groupFilterData") if isinstance(by_topic, dict) else None
    if not isinstance(groups, dict):
        return {}
    return {str(g): data for g, data in groups.items() if isinstance(data, dict)}


def _filter_rows(data: Any) -> dict[str, Any]:
    """consumerFilter.json's filterDataByTopic as the metadata's rows: topic -> FilterDataMapByTopic
    (each group's ConsumerFilterData as the file has it; the broker checks them when it loads)."""
    rows: dict[str, Any] = {}
    table = data.get("filterDataByTopic") if isinstance(data, dict) else None
    for topic, by_topic in (table if isinstance(table, dict) else {}).items():
        if isinstance(by_topic, dict) and isinstance(by_topic.get("groupFilterData"), dict):
            rows[str(topic)] = {"groupFilterData": _filter_groups(by_topic), "topic": str(topic)}
    return rows


def _bit_positions(positions: Any) -> Any:
    """bitPos as an int[] (one line, as fastjson writes it) when it is one, else as it is."""
    if isinstance(positions, list) and all(type(p) is int and -(1 << 31) <= p < 1 << 31 for p in positions):
        return array.array("i", positions)
    return positions


def _filter_file(rows: dict[str, Any]) -> dict[str, Any]:
    """The rows as ConsumerFilterManager's JSON (a row holding no group's data is left out)."""
    out: dict[str, Any] = {}
    for topic, row in rows.items():
        groups = _filter_groups(row)
        for group, data in groups.items():
            bloom = data.get("bloomFilterData")
            if isinstance(bloom, dict) and "bitPos" in bloom:
                bloom = {**bloom, "bitPos": _bit_positions(bloom["bitPos"])}
                groups[group] = {**data, "bloomFilterData": bloom}
        if groups:
            out[topic] = {"groupFilterData": groups, "topic": topic}
    return {"filterDataByTopic": out}


def import_config(meta: LmdbMetaStore, config_dir: Path) -> dict[str, int]:
    """Load whatever of the five files exists into the metadata store (replacing each table)."""
    d = Path(config_dir)
    counts: dict[str, int] = {}
    for file_name, table_name, key in (
        (TOPICS_JSON, TOPICS, "topicConfigTable"),
        (SUBSCRIPTION_GROUP_JSON, SUBSCRIPTION_GROUPS, "subscriptionGroupTable"),
    ):
        data = _read(d / file_name)
        if data is not None:
            table = data.get(key) or {}
            meta.put_many(table_name, dict(table), replace=True)
            if "dataVersion" in data:
                meta.set_data_version(table_name, data["dataVersion"])
            counts[file_name] = len(table)
    data = _read(d / CONSUMER_OFFSET_JSON)
    if data is not None:
        table = data.get("offsetTable") or {}
        rows = {k: {str(int(q)): int(o) for q, o in v.items()} for k, v in table.items()}
        meta.put_many(CONSUMER_OFFSETS, rows, replace=True)
        counts[CONSUMER_OFFSET_JSON] = len(rows)
    data = _read(d / DELAY_OFFSET_JSON)
    if data is not None:
        table = data.get("offsetTable") or {}
        meta.put_many(DELAY_OFFSETS, {str(int(k)): int(v) for k, v in table.items()}, replace=True)
        counts[DELAY_OFFSET_JSON] = len(table)
    data = _read(d / CONSUMER_FILTER_JSON)
    if data is not None:
        rows = _filter_rows(data)
        meta.put_many(CONSUMER_FILTER, rows, replace=True)
        counts[CONSUMER_FILTER_JSON] = sum(len(r["groupFilterData"]) for r in rows.values())
    return counts


def export_config(meta: LmdbMetaStore, config_dir: Path) -> dict[str, int]:
    """Write the five files from the metadata store, as a Java broker would persist them."""
    d = Path(config_dir)
    meta.persist_offsets()
    topics = dict(meta.items(TOPICS))
    string2file(
        _dump({"dataVersion": meta.data_version(TOPICS), "topicConfigTable": topics}), d / TOPICS_JSON
    )
    groups = dict(meta.items(SUBSCRIPTION_GROUPS))
    string2file(
        _dump({"dataVersion": meta.data_version(SUBSCRIPTION_GROUPS), "subscriptionGroupTable": groups}),
        d / SUBSCRIPTION_GROUP_JSON,
    )
    offsets = {k: {int(q): int(o) for q, o in v.items()} for k, v in meta.items(CONSUMER_OFFSETS)}
    string2file(_dump({"offsetTable": offsets}), d / CONSUMER_OFFSET_JSON)
    delays = {int(k): int(v) for k, v in meta.items(DELAY_OFFSETS)}
    string2file(_dump({"offsetTable": delays}), d / DELAY_OFFSET_JSON)
    filters = dict(meta.items(CONSUMER_FILTER))
    string2file(_dump(_filter_file(filters)), d / CONSUMER_FILTER_JSON)
    return {
        CONSUMER_FILTER_JSON: sum(len(_filter_groups(r)) for r in filters.values()),
        TOPICS_JSON: len(topics),
        SUBSCRIPTION_GROUP_JSON: len(groups),
        CONSUMER_OFFSET_JSON: len(offsets),
        DELAY_OFFSET_JSON: len(delays),
    }
