"""Debezium's unwrap applied by the decoder as it reads the events (``JsonDecoder``'s ``unwrap``, decision 012)
against the tasks' stage, which applies it record by record before the sink decodes: for every kind of value,
the two give the same rows, the same bad records with the same reasons, and the same count of skipped ones."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow as pa
import pytest

from connectors.config import SinkConfig
from tests.conftest import sink_config
from workers.chain_decoder import ChainDecoder
from workers.json_decoder import JsonDecoder
from workers.staging import RecordChunk
from workers.transformed import RecordTransformer

UNWRAP = "io.debezium.transforms.ExtractNewRecordState"
MODES = {
    "default (tombstone)": {},
    "drop": {"delete.handling.mode": "drop"},
    "rewrite": {"delete.handling.mode": "rewrite"},
    "rewrite-with-tombstone": {"delete.tombstone.handling.mode": "rewrite-with-tombstone"},
    "none, tombstones kept": {"delete.handling.mode": "none", "drop.tombstones": "false"},
    "rewrite, add.fields": {"delete.handling.mode": "rewrite", "add.fields": "op,table,source.ts_ms,lsn"},
    "add.fields, prefixed and renamed": {"add.fields": "op:kind,source.ts_ms", "add.fields.prefix": "_"},
}
COLUMNS = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("tags", pa.list_(pa.string())),
        ("address", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
        ("ref", pa.string()),
        ("__deleted", pa.string()),
        # add.fields' columns
        ("__op", pa.string()),
        ("__table", pa.string()),
        ("__source_ts_ms", pa.int64()),
        ("__lsn", pa.int64()),
        ("_kind", pa.string()),
        ("_source_ts_ms", pa.int64()),
    ]
)


def config(mode: dict[str, str]) -> SinkConfig:
    return SinkConfig.parse(
        sink_config(
            "dbserver1.public.orders",
            "db.orders",
            **{
                "value.converter": "json",
                "value.converter.schemas.enable": "false",
                "transforms": "unwrap",
                "transforms.unwrap.type": UNWRAP,
                **{f"transforms.unwrap.{k}": v for k, v in mode.items()},
            },
        )
    )


def row(rng: random.Random, i: int) -> dict[str, Any]:
    found: dict[str, Any] = {"id": i, "name": f"n{i}", "amount": i * 0.5}
    if rng.random() < 0.5:
        found["tags"] = [f"t{j}" for j in range(rng.randrange(3))]
    if rng.random() < 0.5:
        found["address"] = {"city": "Lyon", "zip": 69000 + i} if rng.random() < 0.8 else None
    if rng.random() < 0.2:
        found["extra"] = {"nested": [1, 2]}  # (no column: ignored either way)
    if rng.random() < 0.1:
        found["__deleted"] = "mine"  # (rewrite writes its own)
    if rng.random() < 0.1:
        # Not text in a string column: its text, once the fallback's plain decoder reads it.
        found[rng.choice(["name", "ref"])] = rng.choice([i, i / 8, True, {"a": [i]}, [1, "x"]])
    return found


def value(rng: random.Random, i: int) -> bytes | None:
    """A value as a Debezium topic may hold it, or one that is no change event, or that does not decode."""
    kind = rng.randrange(24)
    source = {"lsn": 100 + i, "ts_ms": 1_700_000_000_000 + i, "table": "orders"}
    if rng.random() < 0.1:
        del source["table"]  # (then an event's own "table", if it has one)
    if rng.random() < 0.05:
        source["lsn"] = None
    if kind < 8:
        event = {"op": rng.choice("crcu"), "before": None, "after": row(rng, i), "source": source}
        if event["op"] == "u":
            event["before"] = row(rng, i)
    elif kind < 11:
        event = {"op": "d", "before": row(rng, i), "after": None, "source": source}
    elif kind == 11:
        return None  # a tombstone
    elif kind == 12:
        event = {"op": "t", "before": None, "after": None, "source": source}  # a truncate
    elif kind == 13:
        event = {"op": "c", "after": row(rng, i)}  # no before field at all
    elif kind == 14:
        event = {"op": "d", "before": row(rng, i)}  # no after field at all
    elif kind == 15:
        event = row(rng, i)  # not a change event: passes unchanged
    elif kind == 16:
        event = {"op": None, "after": row(rng, i), "before": None}  # an envelope with a null op
    elif kind == 17:
        event = {"op": "c", "after": {**row(rng, i), "id": "not a number"}, "before": None}  # does not fit
    elif kind == 18:
        # A before that does not fit, on an update: only the after is the row.
        event = {"op": "u", "after": row(rng, i), "before": {"id": [1], "name": {"x": 1}}}
    elif kind == 19:
        event = {"op": "c", "after": "a string", "before": None}
    elif kind == 20:
        event = {"op": 5, "after": row(rng, i), "before": None}  # an op that is no string
    elif kind == 21:
        return rng.choice([b"null", b"[1, 2]", b'"text"', b"17"])  # JSON, but no object
    elif kind == 22:
        return rng.choice([b"{not json", b'{"op": "c", "after": {"id": 1}', b"\xff\xfe"])
    else:
        event = {"op": "c", "after": row(rng, i), "before": None, "ts_ms": i}
        text = json.dumps(event, indent=2)  # (line breaks inside the value)
        return text.encode()
    if isinstance(event, dict) and "op" in event:
        event = {**event, "source": source, "ts_ms": 1_700_000_000_500 + i}
        if rng.random() < 0.1:
            event["table"] = "its own"
        if rng.random() < 0.03:
            event["source"] = None
    return json.dumps(event).encode()


def outcome(columns: pa.Table, positions: list[int], bad: list[tuple[int, str]], skipped: int) -> Any:
    rows = dict(zip(positions, columns.to_pylist(), strict=True))
    return rows, sorted(bad), skipped


def both_ways(
    cfg: SinkConfig, columns: pa.Schema, values: list[bytes | None], errors: list[str | None] | None = None
) -> tuple[Any, Any]:
    """What the stage then a plain decoder make of ``values`` (rows by position, bad records, skipped count),
    and what the decoder unwrapping them as it reads makes of them."""
    n = len(values)
    errors = errors or [None] * n
    chunk = RecordChunk("t", 0, list(range(n)), [None] * n, [None] * n, values, [None] * n, errors)
    staged, dropped = RecordTransformer(cfg, cfg.transforms).apply(chunk)  # type: ignore[arg-type]
    plain = JsonDecoder(columns).decode(staged.values, staged.errors)
    expected = outcome(
        plain.columns,
        [staged.offsets[p] for p in plain.positions],
        [(staged.offsets[p], r) for p, r in plain.bad],
        plain.skipped + dropped,
    )
    decoded = ChainDecoder(columns, cfg.sink_view).decode(chunk)
    assert decoded.positions == sorted(decoded.positions)
    assert (
        decoded.columns.schema == columns
    )  # (the plain decoder's, but for nullability: Arrow C++'s makes all nullable)
    return expected, outcome(decoded.columns, decoded.positions, decoded.bad, decoded.skipped)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(4))
def test_the_decoders_unwrap_gives_what_the_stage_and_a_plain_decoder_give(mode: str, seed: int) -> None:
    cfg = config(MODES[mode])
    assert cfg.transforms is not None and cfg.columnar_chain is not None, "the unwrap is the decoder's"
    assert cfg.staged_transforms is None and cfg.sink_view.decoder_transforms is cfg.transforms
    rng = random.Random(seed)
    n = 400
    values = [value(rng, i) for i in range(n)]
    errors: list[str | None] = [("a converter's error" if rng.random() < 0.02 else None) for _ in range(n)]
    expected, found = both_ways(cfg, COLUMNS, values, errors)
    assert found == expected
    assert len(expected[0]) > n // 3  # (most events are rows)


def test_a_table_with_a_required_column_takes_the_rows_that_have_it_and_the_stages_reason_for_the_others() -> None:
    cfg = config(MODES["rewrite"])
    columns = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("__deleted", pa.string())])
    events = [
        {"op": "c", "after": {"id": 1, "name": "a"}, "before": None},
        {"op": "c", "after": {"name": "no id"}, "before": None},
        {"op": "d", "before": {"id": 1, "name": "a"}, "after": None},
        {"op": "d", "before": {"name": "no id"}, "after": None},
    ]
    values: list[bytes | None] = [json.dumps(e).encode() for e in events]
    expected, found = both_ways(cfg, columns, values)
    assert found == expected
    rows, bad, _ = found
    assert rows == {0: {"id": 1, "name": "a", "__deleted": "false"}, 2: {"id": 1, "name": "a", "__deleted": "true"}}
    assert [p for p, _ in bad] == [1, 3]


@pytest.mark.parametrize(
    "keys",
    [
        {"value.converter.schemas.enable": "true"},
        {
            "value.converter": "io.confluent.connect.json.JsonSchemaConverter",
            "value.converter.schema.registry.url": "http://registry:8081",
        },
        {"iceberg.tables.evolve-schema-enabled": "true"},
        {"iceberg.tables.route-field": "table", "iceberg.table.db.orders.route-regex": "orders"},
        {"iceberg.tables": "db.orders,db.copies"},
        {"transforms.unwrap.add.headers": "op"},
        {"transforms": "unwrap,cast", "transforms.cast.type": "Cast$Value", "transforms.cast.spec": "id:int32"},
    ],
)
def test_the_tasks_stage_the_unwrap_where_the_decoder_cannot_apply_it(keys: dict[str, str]) -> None:
    raw = {
        **sink_config("dbserver1.public.orders", "db.orders"),
        "value.converter": "json",
        "value.converter.schemas.enable": "false",
        "transforms": "unwrap",
        "transforms.unwrap.type": UNWRAP,
        **keys,
    }
    cfg = SinkConfig.parse(raw)
    assert cfg.columnar_chain is None and cfg.staged_transforms is cfg.transforms
    assert cfg.sink_view.decoder_transforms is None


def test_a_row_keeps_its_own_field_where_the_event_lacks_the_one_add_fields_names() -> None:
    cfg = config({"add.fields": "source.ts_ms,ts_ms"})
    columns = pa.schema([("id", pa.int64()), ("__source_ts_ms", pa.int64()), ("__ts_ms", pa.int64())])
    values: list[bytes | None] = [
        b'{"op": "c", "after": {"id": 1, "__source_ts_ms": 99, "__ts_ms": 98}}',  # neither field: the row's own
        b'{"op": "c", "after": {"id": 2, "__source_ts_ms": 99}, "source": {"ts_ms": 5}, "ts_ms": 6}',
        b'{"op": "c", "after": {"id": 3}, "source": {"ts_ms": null}, "ts_ms": null}',
    ]
    expected, found = both_ways(cfg, columns, values)
    assert found == expected
    assert [found[0][p]["__source_ts_ms"] for p in range(3)] == [99, 5, None]


@pytest.mark.parametrize("kind", [pa.bool_(), pa.int32(), pa.struct([("x", pa.string())])])
def test_a_deleted_column_of_another_type_than_text_is_decoded_as_the_stage_writes_it(kind: pa.DataType) -> None:
    cfg = config(MODES["rewrite"])
    columns = pa.schema([("id", pa.int64()), ("__deleted", kind)])
    values: list[bytes | None] = [b'{"op": "c", "after": {"id": 1}}', b'{"op": "d", "before": {"id": 1}}']
    expected, found = both_ways(cfg, columns, values)
    assert found == expected


def test_values_that_end_open_never_run_into_the_next_ones_line() -> None:
    """The readers take a line break for whitespace: an unterminated value followed by one holding two values
    once made three rows out of three values that are not JSON, at the wrong positions."""
    values: list[bytes | None] = [
        b'{"op":"c","after":{"id":1},"z":',
        b"{}}",
        b'{"op":"c","after":{"id":2}}{"op":"c","after":{"id":3}}',
        b'{"op":"c","after":{"id":4}}',
    ]
    expected, found = both_ways(config({}), COLUMNS, values)
    assert found == expected
    assert sorted(found[0]) == [3] and [p for p, _ in found[1]] == [0, 1, 2]
    # And without transforms, the plain decoder.
    plain = JsonDecoder(pa.schema([("id", pa.int64())])).decode(
        [b'{"id":1,"z":', b"{}}", b'{"id":2}{"id":3}', b'{"id":4}'], [None] * 4
    )
    assert plain.positions == [3] and [p for p, _ in plain.bad] == [0, 1, 2]
