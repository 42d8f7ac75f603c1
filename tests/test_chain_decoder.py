"""Kafka's InsertField$Value and ReplaceField$Value applied by the sink's decoder to columns (``ChainDecoder``,
decision 012), alone or after Debezium's unwrap, against the tasks' stage, which applies the chain record by record
before the sink decodes: for every kind of record, the two give the same rows, the same bad records with the same
reasons, and the same count of skipped ones."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow as pa
import pytest

from connectors.config import SinkConfig
from tests.conftest import sink_config
from tests.test_columnar_unwrap import outcome
from tests.test_columnar_unwrap import value as change_event
from workers.chain_decoder import ChainDecoder
from workers.json_decoder import Decoded, JsonDecoder
from workers.staging import RecordChunk
from workers.transformed import KEY_NOT_JSON, RecordTransformer

INSERT = "org.apache.kafka.connect.transforms.InsertField$Value"
REPLACE = "org.apache.kafka.connect.transforms.ReplaceField$Value"
UNWRAP = "io.debezium.transforms.ExtractNewRecordState"
TS = 1_700_000_000_123

# The chains (alias: class and keys), and the columns of the table each writes.
LINEAGE = {
    "meta": {
        "type": INSERT,
        "topic.field": "_topic",
        "partition.field": "_partition",
        "offset.field": "_offset",
        "timestamp.field": "_ts",
        "static.field": "_source",
        "static.value": 'orders "eu"',
    }
}
RENAMED = {"fields": {"type": REPLACE, "exclude": "secret", "renames": "name:customer,amount:total"}}
INCLUDED = {"fields": {"type": REPLACE, "include": "id,name,_offset", "renames": "name:customer"}}
CHAINS: dict[str, dict[str, dict[str, str]]] = {
    "InsertField": LINEAGE,
    "ReplaceField": RENAMED,
    "ReplaceField, then InsertField": {**RENAMED, **LINEAGE},
    "InsertField, then ReplaceField (renaming and dropping inserted fields)": {
        **LINEAGE,
        "fields": {"type": REPLACE, "exclude": "_partition", "renames": "_offset:offset,name:customer"},
    },
    "ReplaceField's include, then InsertField": {**INCLUDED, **LINEAGE},
    "the Iceberg sink's CopyValue, then ReplaceField": {
        "copy": {
            "type": "org.apache.iceberg.connect.transforms.CopyValue",
            "source.field": "id",
            "target.field": "_offset",
        },
        **RENAMED,
    },
    "two InsertFields, the second overwriting the first's static field": {
        **LINEAGE,
        "again": {"type": INSERT, "static.field": "_source", "static.value": "second"},
    },
}
COLUMNS = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("customer", pa.string()),
        ("amount", pa.float64()),
        ("total", pa.float64()),
        ("secret", pa.string()),
        ("tags", pa.list_(pa.string())),
        ("_topic", pa.string()),
        ("_partition", pa.int32()),
        ("_offset", pa.int64()),
        ("offset", pa.int64()),
        ("_ts", pa.int64()),
        ("_source", pa.string()),
    ]
)


def config(
    chain: dict[str, dict[str, str]],
    unwrap: dict[str, str] | None = None,
    first: dict[str, dict[str, str]] | None = None,
    predicates: dict[str, dict[str, str]] | None = None,
) -> SinkConfig:
    """The connector's config with ``first`` (steps before the unwrap), the unwrap if given, then ``chain``."""
    steps = (first or {}) | ({"unwrap": {"type": UNWRAP, **unwrap}} if unwrap is not None else {}) | chain
    predicates = predicates or {}
    predicate_keys = {
        "predicates": ",".join(predicates),
        **{f"predicates.{alias}.{k}": v for alias, keys in predicates.items() for k, v in keys.items()},
    }
    return SinkConfig.parse(
        sink_config(
            "orders",
            "db.orders",
            **{
                "value.converter": "json",
                "value.converter.schemas.enable": "false",
                "transforms": ",".join(steps),
                **{f"transforms.{alias}.{k}": v for alias, keys in steps.items() for k, v in keys.items()},
                **(predicate_keys if predicates else {}),
            },
        )
    )


def record_value(rng: random.Random, i: int) -> bytes | None:
    """A value of a topic of plain JSON rows, or one that is no object, does not decode, or does not fit."""
    kind = rng.randrange(20)
    row: dict[str, Any] = {"id": i, "name": f"n{i}", "amount": i * 0.5}
    if rng.random() < 0.5:
        row["tags"] = [f"t{j}" for j in range(rng.randrange(3))]
    if rng.random() < 0.3:
        row["secret"] = rng.choice(["s", 5, None, {"x": 1}])  # (dropped, or read when a chain keeps it)
    if kind == 0:
        return None  # a tombstone
    if kind == 1:
        return rng.choice([b"null", b"[1, 2]", b'"text"', b"17"])  # JSON, but no object
    if kind == 2:
        return rng.choice([b"{not json", b'{"id": 1', b"\xff\xfe"])
    if kind == 3:
        row["amount"] = "abc"  # does not fit: bad, unless a chain drops or renames it into no column
    elif kind == 4:
        row["_offset"] = "not a number"  # overwritten by InsertField where it inserts one
    elif kind == 5:
        row["_topic"] = 17  # does not fit, unless overwritten
    elif kind == 6:
        row["customer"] = "own"  # beside name renamed to customer: the rename's, later in the value, wins
    elif kind == 7:
        row["_ts"] = "2020-01-01T00:00:00Z"  # the value's own, kept when the record has no timestamp
    elif kind == 8:
        row["id"] = [1]  # does not fit, unless dropped
    elif kind == 9:
        return json.dumps(row, indent=2).encode()  # (line breaks inside the value)
    elif kind == 10:
        row["name"] = rng.choice([i, i / 8, False, {"a": [i]}, [i]])  # not text: its text, in any column it fills
    return json.dumps(row).encode()


def both_ways(
    cfg: SinkConfig, columns: pa.Schema, chunk: RecordChunk, most_through_chain: int | None = None
) -> tuple[Any, Any]:
    """What the stage then a plain decoder make of the chunk (rows by position, bad records, skipped count), and
    what the decoder applying the chain to columns makes of it, as the Iceberg writer's lanes build it; at most
    ``most_through_chain`` of its rows, if given, made by the chain itself rather than read in columns."""
    made_by_chain = 0
    staged, kept = RecordTransformer(cfg, cfg.transforms)._apply(chunk)  # type: ignore[arg-type]
    plain = JsonDecoder(columns).decode(staged.values, staged.errors)
    expected = outcome(
        plain.columns,
        [kept[p] for p in plain.positions],
        [(kept[p], r) for p, r in plain.bad],
        plain.skipped + len(chunk) - len(kept),
    )
    view = cfg.sink_view
    assert view.decoder_columnar == cfg.columnar_chain
    decoder = ChainDecoder(columns, view)
    deferred: list[int] = []
    through_chain = decoder._through_chain

    def counted(chunk: RecordChunk, positions: list[int]) -> Decoded:
        nonlocal made_by_chain
        deferred.extend(positions)
        made = through_chain(chunk, positions)
        made_by_chain += len(made.positions)
        return made

    decoder._through_chain = counted  # type: ignore[method-assign]
    decoded = decoder.decode(chunk)
    if most_through_chain is not None:
        assert made_by_chain <= most_through_chain, "the columns read most rows"
    assert decoded.positions == sorted(decoded.positions)
    assert (
        decoded.columns.schema == columns
    )  # (the plain decoder's, but for nullability: Arrow C++'s makes all nullable)
    return expected, outcome(decoded.columns, decoded.positions, decoded.bad, decoded.skipped)


def chunk_of(rng: random.Random, values: list[bytes | None], partition: int = 3) -> RecordChunk:
    n = len(values)
    errors: list[str | None] = [("a converter's error" if rng.random() < 0.02 else None) for _ in range(n)]
    # (Offsets as a chunk's: consecutive from where the partition was; a few records without a timestamp.)
    timestamps: list[int | None] = [None if rng.random() < 0.05 else TS + i for i in range(n)]
    return RecordChunk("orders", partition, list(range(n)), timestamps, [None] * n, values, [None] * n, errors)


@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("seed", range(4))
def test_the_decoders_chain_gives_what_the_stage_and_a_plain_decoder_give(chain: str, seed: int) -> None:
    cfg = config(CHAINS[chain])
    assert cfg.columnar_chain is not None and cfg.staged_transforms is None
    assert ChainDecoder(COLUMNS, cfg.sink_view).columnar, "every column traced back"
    rng = random.Random(seed)
    chunk = chunk_of(rng, [record_value(rng, i) for i in range(300)])
    # (The chain takes the bad records, and makes the rows of those without a timestamp and of those whose value
    # holds a field the columns cannot tell from another, a few.)
    expected, found = both_ways(cfg, COLUMNS, chunk, most_through_chain=len(chunk) // 8)
    assert found == expected
    assert len(expected[0]) > 150  # (most records are rows)


@pytest.mark.parametrize("mode", [{}, {"delete.handling.mode": "rewrite", "add.fields": "op,source.ts_ms"}])
@pytest.mark.parametrize("seed", range(3))
def test_the_decoders_unwrap_then_kafkas_transforms_give_what_the_stage_gives(mode: dict[str, str], seed: int) -> None:
    cfg = config({**RENAMED, **LINEAGE}, unwrap=mode)
    columnar = cfg.columnar_chain
    assert columnar is not None and columnar.unwrap is not None and len(columnar.shape) == 2
    columns = pa.schema([*COLUMNS, ("__deleted", pa.string()), ("__op", pa.string()), ("__source_ts_ms", pa.int64())])
    rng = random.Random(seed)
    chunk = chunk_of(rng, [change_event(rng, i) for i in range(300)])
    expected, found = both_ways(cfg, columns, chunk, most_through_chain=len(chunk) // 5)
    assert found == expected
    assert len(expected[0]) > 60


def test_inserted_fields_are_the_records_and_renamed_fields_read_under_their_old_names() -> None:
    cfg = config({**RENAMED, **LINEAGE})
    values: list[bytes | None] = [
        b'{"id": 1, "name": "ann", "amount": 2.5, "secret": "x", "_offset": "mine"}',
        b'{"id": 2, "amount": "abc"}',
        b"[1]",
        None,
    ]
    chunk = RecordChunk(
        "orders", 7, [40, 41, 42, 43], [TS, TS + 1, None, TS], [None] * 4, values, [None] * 4, [None] * 4
    )
    decoded = ChainDecoder(COLUMNS, cfg.sink_view).decode(chunk)
    assert decoded.positions == [0] and decoded.skipped == 1
    row = decoded.columns.to_pylist()[0]
    assert row == {
        "id": 1,
        "name": None,
        "customer": "ann",
        "amount": None,
        "total": 2.5,
        "secret": None,
        "tags": None,
        "_topic": "orders",
        "_partition": 7,
        "_offset": 40,
        "offset": None,
        "_ts": TS,
        "_source": 'orders "eu"',
    }
    reasons = dict(decoded.bad)
    assert "total" in reasons[1] or "abc" in reasons[1]  # (the plain decoder's, of the renamed field)
    assert reasons[2].startswith("transforms.fields (ReplaceField$Value): Only Map objects supported")


@pytest.mark.parametrize(
    ("chain", "columns", "why"),
    [
        (
            {"fields": {"type": REPLACE, "exclude": "id"}},
            pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())]),
            "a required column the chain always drops",
        ),
        (
            {
                "first": {"type": INSERT, "offset.field": "a"},
                "one": {"type": REPLACE, "renames": "a:c"},
                "second": {"type": INSERT, "topic.field": "b"},
                "two": {"type": REPLACE, "renames": "b:c"},
            },
            pa.schema([("c", pa.string()), ("name", pa.string())]),
            "c is the topic, or the offset where the value has a c of its own",
        ),
        (
            {
                "copy": {
                    "type": "org.apache.iceberg.connect.transforms.CopyValue",
                    "source.field": "id",
                    "target.field": "b",
                },
                "fields": {"type": REPLACE, "renames": "name:b"},
            },
            pa.schema([("b", pa.string())]),
            "b is the name renamed, or the copy of id, whichever is later in the value",
        ),
        (
            {
                "route": {
                    "type": "org.apache.kafka.connect.transforms.RegexRouter",
                    "regex": "orders",
                    "replacement": "renamed",
                },
                "meta": {"type": INSERT, "topic.field": "_topic"},
            },
            pa.schema([("id", pa.int64()), ("_topic", pa.string())]),
            "_topic is the topic as renamed, not as consumed",
        ),
    ],
)
def test_a_table_whose_columns_cannot_be_traced_takes_every_record_through_the_chain(
    chain: dict[str, dict[str, str]], columns: pa.Schema, why: str
) -> None:
    cfg = config(chain)
    decoder = ChainDecoder(columns, cfg.sink_view)
    assert not decoder.columnar, why
    rng = random.Random(1)
    chunk = chunk_of(rng, [record_value(rng, i) for i in range(100)])
    expected, found = both_ways(cfg, columns, chunk)
    assert found == expected


@pytest.mark.parametrize(
    "keys",
    [
        {"transforms.fields.type": "org.apache.kafka.connect.transforms.ReplaceField$Key"},
        {
            "transforms.fields.predicate": "orders",
            "predicates": "orders",
            "predicates.orders.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
            "predicates.orders.pattern": "orders",
        },
        {
            "transforms": "fields,cast",
            "transforms.cast.type": "org.apache.kafka.connect.transforms.Cast$Value",
            "transforms.cast.spec": "id:int32",
        },
        {"transforms": "fields,unwrap", "transforms.unwrap.type": UNWRAP},
        {  # (a field inserted twice: the later kind's, unless it is a missing timestamp)
            "transforms": "fields,meta",
            "transforms.meta.type": INSERT,
            "transforms.meta.timestamp.field": "at",
            "transforms.meta.static.field": "at",
            "transforms.meta.static.value": "x",
        },
        {"iceberg.tables": "db.orders,db.copies"},
        {"value.converter.schemas.enable": "true"},
    ],
)
def test_the_tasks_stage_a_chain_the_decoder_cannot_apply(keys: dict[str, str]) -> None:
    raw = {
        **sink_config("orders", "db.orders"),
        "value.converter": "json",
        "value.converter.schemas.enable": "false",
        "transforms": "fields",
        "transforms.fields.type": REPLACE,
        "transforms.fields.exclude": "secret",
        **keys,
    }
    cfg = SinkConfig.parse(raw)
    assert cfg.columnar_chain is None and cfg.staged_transforms is cfg.transforms
    assert cfg.sink_view.decoder_transforms is None


def test_a_field_the_unwrap_adds_to_every_row_is_not_told_apart_from_the_rows_own_in_columns() -> None:
    """(``__deleted`` is in every rewritten row: renaming ``name`` to it makes a column that is either, a record at
    a time, by where each is in the row; the columns cannot tell, so every record goes through the chain.)"""
    cfg = config({"fields": {"type": REPLACE, "renames": "name:__deleted"}}, unwrap={"delete.handling.mode": "rewrite"})
    columns = pa.schema([("id", pa.int64()), ("__deleted", pa.string())])
    assert not ChainDecoder(columns, cfg.sink_view).columnar
    rng = random.Random(5)
    chunk = chunk_of(rng, [change_event(rng, i) for i in range(200)])
    expected, found = both_ways(cfg, columns, chunk)
    assert found == expected


@pytest.mark.parametrize(
    "arrow_type",
    [
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.float32(),
        pa.float64(),
        pa.string(),
        pa.bool_(),
        pa.decimal128(20, 0),
        pa.timestamp("us", tz="UTC"),
    ],
    ids=str,
)
def test_an_inserted_offset_or_timestamp_fills_a_column_of_any_type_as_its_json_would(arrow_type: pa.DataType) -> None:
    """(Cast into integer and double columns, a value out of a narrow column's range not fitting; read from its JSON
    into any other, as the plain decoder reads what the stage writes.)"""
    cfg = config(LINEAGE)
    columns = pa.schema([("id", pa.int64()), ("_offset", arrow_type), ("_ts", arrow_type), ("_partition", arrow_type)])
    n = 60
    offsets = [0, 1, 127, 128, 255, 32_767, 32_768, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1] * 5 + [5] * 5
    if pa.types.is_timestamp(arrow_type):
        # (Milliseconds beyond a timestamp's range are bad records; in its range but past Python's years, which the
        # comparison cannot show, left out.)
        offsets = [o if o < 2**40 or o > 2**60 else 5 for o in offsets]
    stamps: list[int | None] = [TS, None, -1, 0, 2**40, *([TS] * (n - 5))]
    values: list[bytes | None] = [b'{"id": %d, "_ts": "own"}' % i for i in range(n)]
    chunk = RecordChunk("orders", 9, offsets, stamps, [None] * n, values, [None] * n, [None] * n)
    expected, found = both_ways(cfg, columns, chunk)
    assert found == expected


def chunk_of_values(values: list[bytes | None]) -> RecordChunk:
    n = len(values)
    return RecordChunk("orders", 0, list(range(n)), [TS] * n, [None] * n, values, [None] * n, [None] * n)


@pytest.mark.parametrize(
    ("chain", "columns", "values"),
    [
        pytest.param(
            {"fields": {"type": REPLACE, "renames": "a:x/y"}},
            pa.schema([("x/y", pa.int64())]),
            [b'{"a": 1, "x\\/y": 2}', b'{"x\\/y": 3, "a": 4}', b'{"a": 5}', b'{"x/y": 6}'],
            id="a key JSON may write with an escape other than \\u",
        ),
        pytest.param(
            {"fields": {"type": REPLACE, "exclude": "t"}},
            pa.schema([("n", pa.int64()), ("t", pa.timestamp("us"))]),
            [b'{"n": 1.5}', b'{"n": "17"}', b'{"n": 2, "t": "no time"}'],
            id="the reader of the table's columns, not of those read (Arrow C++'s, for a timestamp)",
        ),
        pytest.param(
            {"fields": {"type": REPLACE, "renames": "a:id"}},
            pa.schema([pa.field("id", pa.int64(), nullable=False), ("t", pa.timestamp("us"))]),
            [b'{"id": 1}', b'{"a": 2, "id": 3}', b'{"a": 4}', b'{"x": 5}', b'{"a": null, "id": 6}'],
            id="a required column from one of two fields, beside a timestamp column",
        ),
        pytest.param(
            {"meta": {"type": INSERT, "static.field": "n", "static.value": "17"}},
            pa.schema([("n", pa.int64()), ("t", pa.timestamp("us"))]),
            [b'{"t": 1700000000123}', b'{"n": 1}'],
            id="a static value into a number column, read as the table's reader reads it",
        ),
    ],
)
def test_what_a_review_found_the_columns_took_otherwise_than_the_chain(
    chain: dict[str, dict[str, str]], columns: pa.Schema, values: list[bytes | None]
) -> None:
    cfg = config(chain)
    assert ChainDecoder(columns, cfg.sink_view).columnar
    expected, found = both_ways(cfg, columns, chunk_of_values(values))
    assert found == expected


def test_the_unwraps_own_fallback_reads_as_the_tables_reader_does() -> None:
    """(An event the unwrap's columns cannot read goes through the unwrap alone, then a plain decoder of the fields
    read: Arrow C++'s too, beside a timestamp column not read, whose refusal of a fraction in an integer column is
    converted as the Java sink converts it: truncated.)"""
    cfg = config({"fields": {"type": REPLACE, "renames": "a:e", "exclude": "n"}}, unwrap={})
    columns = pa.schema([("e", pa.int64()), ("n", pa.timestamp("us"))])
    values: list[bytes | None] = [b'{"op": "c", "after": {"a": 1.5}}', b'{"op": "c", "after": {"a": 2}}']
    expected, found = both_ways(cfg, columns, chunk_of_values(values))
    assert found == expected and [row["e"] for row in found[0].values()] == [1, 2]


FILTER = "org.apache.kafka.connect.transforms.Filter"
PREDICATES = "org.apache.kafka.connect.transforms.predicates"
# Filters of records as consumed, each with its predicate: (steps, predicates).
FILTERS: dict[str, tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]] = {
    "tombstones dropped": (
        {"tombstones": {"type": FILTER, "predicate": "null"}},
        {"null": {"type": f"{PREDICATES}.RecordIsTombstone"}},
    ),
    "other topics' records dropped": (
        {"others": {"type": FILTER, "predicate": "mine", "negate": "true"}},
        {"mine": {"type": f"{PREDICATES}.TopicNameMatches", "pattern": "ord.*"}},
    ),
    "this topic's records dropped": (
        {"mine": {"type": FILTER, "predicate": "orders"}},
        {"orders": {"type": f"{PREDICATES}.TopicNameMatches", "pattern": "orders"}},
    ),
    "records with a header dropped, then tombstones": (
        {
            "marked": {"type": FILTER, "predicate": "skip"},
            "tombstones": {"type": FILTER, "predicate": "null"},
        },
        {
            "skip": {"type": f"{PREDICATES}.HasHeaderKey", "name": "skip"},
            "null": {"type": f"{PREDICATES}.RecordIsTombstone"},
        },
    ),
}


def with_headers_and_null_text(rng: random.Random, chunk: RecordChunk) -> RecordChunk:
    """The chunk with headers on some records (``skip`` on a few), and a few values the JSON ``null``."""
    for i in range(len(chunk)):
        chunk.headers[i] = rng.choice([None, [("skip", b"1")], [("other", None)], [("other", b"x"), ("skip", None)]])
        if rng.random() < 0.03:
            chunk.values[i] = rng.choice([b"null", b" null\n"])
    return chunk


@pytest.mark.parametrize("filters", FILTERS)
@pytest.mark.parametrize("after", ["nothing", "Kafka's transforms", "the unwrap", "the unwrap, then Kafka's"])
@pytest.mark.parametrize("seed", range(2))
def test_filters_of_records_as_consumed_drop_them_before_the_decoder_reads_them_as_the_stage_does(
    filters: str, after: str, seed: int
) -> None:
    unwrap = {"delete.handling.mode": "rewrite"} if "unwrap" in after else None
    chain = {**RENAMED, **LINEAGE} if "Kafka" in after else {}
    steps, predicates = FILTERS[filters]
    cfg = config(chain, unwrap, first=steps, predicates=predicates)
    columnar = cfg.columnar_chain
    assert columnar is not None and len(columnar.filters) == len(FILTERS[filters][0])
    assert cfg.staged_transforms is None, "the decoder applies the chain"
    columns = pa.schema([*COLUMNS, ("__deleted", pa.string())])
    rng = random.Random(seed)
    make = change_event if unwrap is not None else record_value
    chunk = with_headers_and_null_text(rng, chunk_of(rng, [make(rng, i) for i in range(300)]))
    expected, found = both_ways(cfg, columns, chunk, most_through_chain=len(chunk) // 5)
    assert found == expected
    if filters != "this topic's records dropped":
        assert len(expected[0]) > 50
    else:
        assert expected[0] == {} and expected[2] > 200  # (every record that reads is dropped)


def test_a_record_a_filter_would_drop_whose_key_or_value_does_not_read_is_the_stages_bad_record() -> None:
    # (Kafka Connect's converters read a record before its transformations see it: one they cannot read is bad,
    # whatever a Filter would make of it. DebeziumTransform reads keys: a tombstone's key must read too.)
    cfg = SinkConfig.parse(
        {
            **sink_config("orders", "db.orders"),
            "value.converter": "json",
            "value.converter.schemas.enable": "false",
            "key.converter": "json",
            "transforms": "others,dbz",
            "transforms.others.type": FILTER,
            "transforms.others.predicate": "mine",
            "transforms.others.negate": "true",
            "transforms.dbz.type": "org.apache.iceberg.connect.transforms.DebeziumTransform",
            "predicates": "mine",
            "predicates.mine.type": f"{PREDICATES}.TopicNameMatches",
            "predicates.mine.pattern": "elsewhere",
        }
    )
    assert cfg.columnar_chain is not None and cfg.columnar_chain.filters
    values: list[bytes | None] = [b'{"op": "c", "after": {"id": 1}}', b"{not json", None, b'{"op": "c"}']
    keys: list[bytes | None] = [b'{"id": 1}', b'{"id": 2}', b"{not a key", b"{not a key"]
    chunk = RecordChunk("orders", 0, [0, 1, 2, 3], [TS] * 4, keys, values, [None] * 4, [None] * 4)
    expected, found = both_ways(cfg, pa.schema([("id", pa.int64())]), chunk)
    assert found == expected
    rows, bad, skipped = found
    assert rows == {} and [at for at, _ in bad] == [1, 2, 3] and skipped == 1
    assert "not JSON" in bad[0][1] and all(reason.startswith(KEY_NOT_JSON) for _, reason in bad[1:])


ROUTE = {
    "route": {
        "type": "org.apache.kafka.connect.transforms.RegexRouter",
        "regex": "([^.]*)",
        "replacement": "dbserver1.inventory.$1",
    }
}
HEADERS = {
    "mark": {"type": "org.apache.kafka.connect.transforms.InsertHeader", "header": "origin", "value.literal": "cdc"},
    "unmark": {"type": "org.apache.kafka.connect.transforms.DropHeaders", "headers": "skip,other"},
}
# Chains with steps of the topic or headers alone, which pass values unchanged: (steps before the unwrap, the
# steps after it, with or without the unwrap).
PASSING: dict[str, tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]] = {
    "the unwrap, then a RegexRouter (Debezium's unwrap,route)": ({}, ROUTE),
    "a RegexRouter, then the unwrap (route,unwrap), then ReplaceField": (ROUTE, RENAMED),
    "header transforms, the unwrap, then InsertField of the topic": (HEADERS, LINEAGE),
    "InsertField of the topic, then a RegexRouter and header transforms": ({}, {**LINEAGE, **ROUTE, **HEADERS}),
}


@pytest.mark.parametrize("passing", PASSING)
@pytest.mark.parametrize("unwrap", [None, {}, {"delete.handling.mode": "rewrite"}])
@pytest.mark.parametrize("seed", range(2))
def test_routers_and_header_transforms_pass_values_to_the_decoders_chain_as_the_stage_does(
    passing: str, unwrap: dict[str, str] | None, seed: int
) -> None:
    first, after = PASSING[passing]
    cfg = config(after, unwrap, first=first)
    columnar = cfg.columnar_chain
    assert columnar is not None and cfg.staged_transforms is None, "the decoder applies the chain"
    assert (columnar.unwrap_step is not None) == (unwrap is not None)
    if columnar.unwrap_step is not None:
        assert columnar.unwrap_step.alias == "unwrap"
    columns = pa.schema([*COLUMNS, ("__deleted", pa.string())])
    assert ChainDecoder(columns, cfg.sink_view).columnar, "every column traced back"
    rng = random.Random(seed)
    make = change_event if unwrap is not None else record_value
    chunk = with_headers_and_null_text(rng, chunk_of(rng, [make(rng, i) for i in range(300)]))
    expected, found = both_ways(cfg, columns, chunk, most_through_chain=len(chunk) // 5)
    assert found == expected
    assert len(expected[0]) > 50


@pytest.mark.parametrize(
    "steps",
    [
        {"stamp": {"type": "org.apache.kafka.connect.transforms.TimestampRouter"}},  # (fails without a timestamp)
        {"keyed": {"type": "org.apache.kafka.connect.transforms.ReplaceField$Key", "exclude": "id"}},
    ],
)
def test_a_step_of_the_topic_or_key_that_the_columns_cannot_follow_keeps_the_chain_in_the_stage(
    steps: dict[str, dict[str, str]],
) -> None:
    for unwrap in (None, {}):
        cfg = config(steps, unwrap, first=ROUTE)
        assert cfg.columnar_chain is None and cfg.staged_transforms is cfg.transforms
