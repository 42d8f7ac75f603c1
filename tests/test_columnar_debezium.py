"""The Iceberg sink's DebeziumTransform applied by the decoder as it reads the events (``JsonDecoder``'s
``unwrap`` with ``ColumnarDebezium``, decision 012) against the tasks' stage, which applies it record by record
with each record's key and offset before the sink decodes: for every kind of value and key, the two give the
same rows (``_cdc`` included), the same bad records with the same reasons, and the same count of skipped ones."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow as pa
import pytest

from connectors.config import SinkConfig
from connectors.smt.debezium import ColumnarDebezium
from tests.conftest import sink_config
from workers.chain_decoder import ChainDecoder
from workers.json_decoder import JsonDecoder
from workers.staging import RecordChunk
from workers.transformed import RecordTransformer

DEBEZIUM = "org.apache.iceberg.connect.transforms.DebeziumTransform"
CDC = pa.struct(
    [
        ("op", pa.string()),
        ("ts", pa.int64()),
        ("offset", pa.int64()),
        ("source", pa.string()),
        ("target", pa.string()),
        ("key", pa.struct([("id", pa.int64())])),
    ]
)
COLUMNS = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("address", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
        ("_cdc", CDC),
    ]
)
FIRST_OFFSET = 7_000


def config(**keys: str) -> SinkConfig:
    return SinkConfig.parse(
        sink_config(
            "dbserver1.public.orders",
            "db.orders",
            **{
                "key.converter": "org.apache.kafka.connect.json.JsonConverter",
                "key.converter.schemas.enable": "false",
                "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                "value.converter.schemas.enable": "false",
                "transforms": "dbz",
                "transforms.dbz.type": DEBEZIUM,
                "iceberg.tables.cdc-field": "_cdc.op",
                "iceberg.tables.default-id-columns": "id",
                **keys,
            },
        )
    )


def row(rng: random.Random, i: int) -> dict[str, Any]:
    found: dict[str, Any] = {"id": i, "name": f"n{i}", "amount": i * 0.5}
    if rng.random() < 0.5:
        found["address"] = {"city": "Lyon", "zip": 69000 + i} if rng.random() < 0.8 else None
    if rng.random() < 0.1:
        found["_cdc"] = {"op": "mine"}  # (the transformation writes its own)
    if rng.random() < 0.1:
        found["extra"] = [1, {"x": 2}]  # (no column: ignored either way)
    return found


def source(rng: random.Random) -> Any:
    kind = rng.randrange(20)
    if kind < 8:
        return {"db": "inventory", "table": "orders", "ts_ms": 1}  # MySQL's: no schema
    if kind < 16:
        return {"db": "shop", "schema": "public", "table": "orders"}  # PostgreSQL's
    return rng.choice(
        [
            {"db": "inventory", "schema": None, "table": "orders"},  # a schema present, and null: no names
            {"db": "inventory"},  # no table
            {"table": "orders"},  # no db
            None,
            {"db": 5, "table": "orders"},  # a db that is no string
            {"db": "in{table}ventory", "table": "orders"},
        ]
    )


def value(rng: random.Random, i: int) -> bytes | None:
    """A value as a Debezium topic may hold it, or one that is no change event, or that does not decode."""
    kind = rng.randrange(20)
    if kind < 8:
        op = rng.choice("crcu")
        event: Any = {"op": op, "before": row(rng, i) if op == "u" else None, "after": row(rng, i)}
    elif kind < 11:
        event = {"op": "d", "before": row(rng, i), "after": None}
    elif kind == 11:
        return None  # a tombstone
    elif kind == 12:
        event = {"op": "t", "before": None, "after": None}  # a truncate: no payload, skipped
    elif kind == 13:
        event = {"op": "d", "after": row(rng, i)}  # a delete without its before: skipped
    elif kind == 14:
        event = row(rng, i)  # not a change event: no op, a bad record
    elif kind == 15:
        event = {"op": rng.choice([None, 5, "x"]), "after": row(rng, i), "before": None}
    elif kind == 16:
        event = {"op": "c", "after": {**row(rng, i), "id": "not a number"}, "before": None}
    elif kind == 17:
        event = {"op": "u", "after": row(rng, i), "before": {"id": [1]}}  # a before that does not fit
    elif kind == 18:
        return rng.choice([b"[1, 2]", b'"text"', b"{not json", b'{"op": "c", "after": {"id": 1}', b"\xff"])
    else:
        event = {"op": "c", "after": row(rng, i), "before": None, "ts_ms": i}
        return json.dumps({**event, "source": source(rng)}, indent=2).encode()  # (line breaks inside)
    if isinstance(event, dict) and "op" in event:
        event = {**event, "source": source(rng)}
        if rng.random() < 0.8:
            event["ts_ms"] = rng.choice([1_700_000_000_500 + i, None, "17"])
    text = json.dumps(event)
    if rng.random() < 0.03:
        text = text.replace('"orders"', '"ord\\u0065rs"')  # (an escape: the same text, read another way)
    return text.encode()


def key(rng: random.Random, i: int) -> bytes | None:
    if rng.random() < 0.7:
        return json.dumps({"id": i}).encode()
    return rng.choice(
        [
            json.dumps({"id": i, "other": "x"}).encode(),
            None,
            b"not json",
            b'{"id": 1',
            b'{"id": 1}{"id": 2}',  # (two values)
            b'{"id": 1,}',  # (not JSON, though a lenient reader takes it)
            b'{"id": "\\u0000"}',  # (a NUL in the reader's reason once aborted the process)
            b'{"id": 01}',
            json.dumps({"schema": None, "payload": {"id": i}}).encode(),
            json.dumps({"schema": {"type": "int64"}, "payload": i}).encode(),  # (an envelope of no map)
            b'{\n "id": 4\n}',  # (line breaks inside)
            b"17",
            b'"text"',
            json.dumps({"schema": {"type": "struct"}, "payload": {"id": i}}).encode(),
            b'{"id": "abc"}',  # JSON, but no id the column takes: the key does not fit, so neither does the row
            b'{"i\\u0064": 3}',
            b'{"schema": {}, "p\\u0061yload": {"id": 9}}',  # (an envelope all the same)
        ]
    )


def outcome(columns: pa.Table, positions: list[int], bad: list[tuple[int, str]], skipped: int) -> Any:
    rows = dict(zip(positions, columns.to_pylist(), strict=True))
    return rows, sorted(bad), skipped


def both_ways(
    cfg: SinkConfig,
    columns: pa.Schema,
    values: list[bytes | None],
    keys: list[bytes | None],
    errors: list[str | None] | None = None,
) -> tuple[Any, Any]:
    """What the stage then a plain decoder make of the records (rows by position, bad records, skipped count),
    and what the decoder applying the transformation as it reads them makes of them."""
    n = len(values)
    errors = errors or [None] * n
    offsets = [FIRST_OFFSET + i for i in range(n)]
    chunk = RecordChunk("t", 0, offsets, [None] * n, keys, values, [None] * n, errors)
    staged, dropped = RecordTransformer(cfg, cfg.transforms).apply(chunk)  # type: ignore[arg-type]
    plain = JsonDecoder(columns).decode(staged.values, staged.errors)
    expected = outcome(
        plain.columns,
        [staged.offsets[p] - FIRST_OFFSET for p in plain.positions],
        [(staged.offsets[p] - FIRST_OFFSET, r) for p, r in plain.bad],
        plain.skipped + dropped,
    )
    # (As the Iceberg writer's TableLane builds its decoder: from the sink's view of the config.)
    view = cfg.sink_view
    assert view.decoder_columnar == cfg.columnar_chain
    decoded = ChainDecoder(columns, view).decode(chunk)
    assert decoded.positions == sorted(decoded.positions)
    assert (
        decoded.columns.schema == columns
    )  # (the plain decoder's, but for nullability: Arrow C++'s makes all nullable)
    return expected, outcome(decoded.columns, decoded.positions, decoded.bad, decoded.skipped)


@pytest.mark.parametrize("pattern", [None, "cdc_{db}_{table}", "{table}", "lake.{db}.{table}_copy", "lake.orders"])
@pytest.mark.parametrize("seed", range(4))
def test_the_decoders_transform_gives_what_the_stage_and_a_plain_decoder_give(pattern: str | None, seed: int) -> None:
    cfg = config(**({"transforms.dbz.cdc.target.pattern": pattern} if pattern else {}))
    assert cfg.columnar_chain is not None and isinstance(cfg.columnar_chain.unwrap, ColumnarDebezium)
    assert cfg.columnar_chain.unwrap.json_keys
    assert cfg.staged_transforms is None and cfg.sink_view.decoder_transforms is cfg.transforms
    rng = random.Random(seed)
    n = 400
    values = [value(rng, i) for i in range(n)]
    keys = [key(rng, i) for i in range(n)]
    errors: list[str | None] = [("a converter's error" if rng.random() < 0.02 else None) for _ in range(n)]
    expected, found = both_ways(cfg, COLUMNS, values, keys, errors)
    assert found == expected
    assert len(expected[0]) > n // 4  # (most events are rows)


@pytest.mark.parametrize(
    "cdc",
    [
        CDC,
        pa.struct([("op", pa.string())]),  # no key: a key is still read, to tell it is JSON
        pa.struct([("op", pa.string()), ("offset", pa.int32()), ("note", pa.string())]),  # a field of its own
        pa.struct([("op", pa.int32())]),  # an op column of no text: record by record
        pa.struct([("op", pa.string()), ("offset", pa.int32())]),  # (too narrow for some offsets: likewise)
        pa.struct([("op", pa.string()), ("key", pa.struct([]))]),  # a key of no fields the type has
        pa.struct([("key", pa.struct([("id", pa.int64()), ("tags", pa.list_(pa.string()))]))]),
        # The Java sink's: ts a timestamp, which reads the event's epoch milliseconds (Arrow C++'s reader).
        pa.struct([("op", pa.string()), ("ts", pa.timestamp("us", tz="UTC")), ("offset", pa.int64())]),
        None,  # no _cdc column
    ],
)
@pytest.mark.parametrize("at", [None, pa.timestamp("us", tz="UTC")], ids=["arrow-rs", "with a timestamp: arrow-c++"])
def test_every_shape_of_the_cdc_column_comes_to_what_the_stage_makes(
    cdc: pa.DataType | None, at: pa.DataType | None
) -> None:
    """(With a timestamp column the plain decoder reads with Arrow C++'s reader; the keys are read by arrow-rs.)"""
    columns = pa.schema(
        [f for f in COLUMNS if f.name != "_cdc"]
        + ([("_cdc", cdc)] if cdc is not None else [])
        + ([("at", at)] if at is not None else [])
    )
    rng = random.Random(5)
    values = [value(rng, i) for i in range(300)]
    keys = [key(rng, i) for i in range(300)]
    expected, found = both_ways(config(), columns, values, keys)
    assert found == expected


def test_a_string_key_is_no_map_and_no_key_of_the_rows() -> None:
    cfg = config(**{"key.converter": "org.apache.kafka.connect.storage.StringConverter"})
    assert cfg.columnar_chain is not None and isinstance(cfg.columnar_chain.unwrap, ColumnarDebezium)
    assert not cfg.columnar_chain.unwrap.json_keys
    values: list[bytes | None] = [
        json.dumps({"op": "c", "after": {"id": 1}, "source": {"db": "d", "table": "t"}, "ts_ms": 5}).encode(),
        json.dumps({"op": "d", "before": {"id": 1}, "source": {"db": "d", "schema": "s", "table": "t"}}).encode(),
    ]
    expected, found = both_ways(cfg, COLUMNS, values, [b'{"id": 1}', b"not json"])
    assert found == expected
    assert [found[0][p]["_cdc"] for p in (0, 1)] == [
        {"op": "I", "ts": 5, "offset": FIRST_OFFSET, "source": "d.t", "target": "d.t", "key": None},
        {"op": "D", "ts": None, "offset": FIRST_OFFSET + 1, "source": "s.t", "target": "s.t", "key": None},
    ]


def test_the_rows_of_a_postgres_update_and_delete_carry_their_op_offset_and_key() -> None:
    values: list[bytes | None] = [
        json.dumps(
            {
                "op": "u",
                "before": {"id": 1, "name": "old"},
                "after": {"id": 1, "name": "new"},
                "source": {"db": "shop", "schema": "public", "table": "orders"},
                "ts_ms": 17,
            }
        ).encode(),
        json.dumps({"op": "d", "before": {"id": 2, "name": "gone"}, "after": None, "source": {"db": "x", "table": "y"}})
        .replace(" ", "")
        .encode(),
    ]
    cfg = config(**{"transforms.dbz.cdc.target.pattern": "{db}_cdc.{table}"})
    expected, found = both_ways(cfg, COLUMNS, values, [b'{"id": 1}', b'{"id": 2}'])
    assert found == expected
    rows = found[0]
    assert (rows[0]["name"], rows[0]["_cdc"]) == (
        "new",
        {
            "op": "U",
            "ts": 17,
            "offset": FIRST_OFFSET,
            "source": "public.orders",
            "target": "public_cdc.orders",
            "key": {"id": 1},
        },
    )
    assert (rows[1]["name"], rows[1]["_cdc"]["op"], rows[1]["_cdc"]["key"]) == ("gone", "D", {"id": 2})


def test_a_target_pattern_with_braces_of_its_own_is_applied_record_by_record() -> None:
    cfg = config(**{"transforms.dbz.cdc.target.pattern": "{ta{db}ble}"})
    values: list[bytes | None] = [
        json.dumps({"op": "c", "after": {"id": 1}, "source": {"db": "", "table": "orders"}}).encode()
    ]
    expected, found = both_ways(cfg, COLUMNS, values, [None])
    assert found == expected
    assert found[0][0]["_cdc"]["target"] == "orders"  # ("{ta" + "" + "ble}" is "{table}", then replaced)


def test_an_offset_too_large_for_a_narrow_offset_field_is_the_plain_decoders_bad_record() -> None:
    columns = pa.schema([("id", pa.int64()), ("_cdc", pa.struct([("op", pa.string()), ("offset", pa.int32())]))])
    event = json.dumps({"op": "c", "after": {"id": 1}, "source": {"db": "d", "table": "t"}}).encode()
    cfg = config()
    chunk = RecordChunk("t", 0, [2**31 - 1, 2**31], [None] * 2, [None] * 2, [event, event], [None] * 2, [None] * 2)
    decoded = ChainDecoder(columns, cfg.sink_view).decode(chunk)
    assert decoded.positions == [0] and [p for p, _ in decoded.bad] == [1]


def test_the_keys_a_decoder_leaves_as_consumed_are_staged_as_the_stage_stages_them() -> None:
    """(The ``_kafka_key`` column of a chain the decoder applies: ``RecordTransformer.staged_keys``.)"""
    cfg = config()
    keys: list[bytes | None] = [b'{ "id" : 1 }', json.dumps({"schema": {}, "payload": {"id": 2}}).encode(), None]
    values: list[bytes | None] = [b'{"op": "c", "after": {"id": 1}, "source": {"db": "d", "table": "t"}}'] * 3
    chunk = RecordChunk("t", 0, [0, 1, 2], [None] * 3, keys, values, [None] * 3, [None] * 3)
    transformer = RecordTransformer(cfg, cfg.transforms)  # type: ignore[arg-type]
    staged, _ = transformer.apply(chunk)
    assert transformer.staged_keys(keys) == staged.keys == [b'{"id":1}', b'{"id":2}', None]
