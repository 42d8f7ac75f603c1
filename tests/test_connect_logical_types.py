"""Kafka Connect's logical types in JsonConverter's schema envelope (``value.converter.schemas.enable=true``):
columns typed as the Iceberg sink types them, and a Decimal, which JsonConverter writes as the base64 of its
unscaled integer, read as the decimal it is: against Kafka's own JsonConverter, and through the decoder and the
transforms' stage."""

from __future__ import annotations

import base64
import json
import random
from decimal import Decimal
from typing import Any

import pyarrow as pa

from connectors.config import SinkConfig
from tests.conftest import sink_config
from tests.java_oracles import run_oracle
from workers.json_decoder import JsonDecoder
from workers.schemas import CONNECT_DECIMAL, connect_decimals, envelope_decimals_as_text, schema_from_connect
from workers.staging import RecordChunk
from workers.transformed import RecordTransformer


def decimal_schema(scale: int, optional: bool = True) -> dict[str, Any]:
    return {
        "type": "bytes",
        "optional": optional,
        "name": CONNECT_DECIMAL,
        "version": 1,
        "parameters": {"scale": str(scale)},
    }


def base64_of(unscaled: int) -> str:
    """JsonConverter's text of a Decimal: its unscaled integer's two's complement, big-endian, fewest bytes."""
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


ROW_SCHEMA = {
    "type": "struct",
    "optional": False,
    "fields": [
        {"field": "id", "type": "int32", "optional": False},
        {"field": "amount", **decimal_schema(2)},
        {"field": "rate", **decimal_schema(0)},
        {"field": "born", "type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Date"},
        {"field": "opens", "type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Time"},
        {"field": "seen", "type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp"},
        {"field": "prices", "type": "array", "optional": True, "items": decimal_schema(3)},
        {"field": "by_tier", "type": "map", "optional": True, "keys": {"type": "string"}, "values": decimal_schema(1)},
        {
            "field": "nested",
            "type": "struct",
            "optional": True,
            "fields": [{"field": "fee", **decimal_schema(4)}],
        },
    ],
}


def test_connects_logical_types_are_the_columns_the_iceberg_sink_makes_of_them() -> None:
    """(As its SchemaUtils.toIcebergType: a Decimal a decimal of precision 38 and the schema's scale, a Date a date,
    a Time a time, a Timestamp a timestamp with a zone; an int32 without a logical name an int.)"""
    schema = schema_from_connect(ROW_SCHEMA)
    assert {f.name: f.type for f in schema} == {
        "id": pa.int32(),
        "amount": pa.decimal128(38, 2),
        "rate": pa.decimal128(38, 0),
        "born": pa.date32(),
        "opens": pa.time64("us"),
        "seen": pa.timestamp("us", tz="UTC"),
        "prices": pa.list_(pa.decimal128(38, 3)),
        "by_tier": pa.map_(pa.string(), pa.decimal128(38, 1)),
        "nested": pa.struct([("fee", pa.decimal128(38, 4))]),
    }
    # (Beyond a decimal column's scales, the decimal's text; without a scale, the bytes, each value a bad record.)
    unscaled = {"field": "y", "type": "bytes", "name": CONNECT_DECIMAL}
    odd = schema_from_connect({"type": "struct", "fields": [{"field": "x", **decimal_schema(40)}, unscaled]})
    assert [f.type for f in odd] == [pa.string(), pa.binary()]


def test_a_decimal_of_a_scale_no_column_has_is_its_text_and_one_of_no_scale_a_bad_record_where_it_has_a_value() -> None:
    """(PostgreSQL's NUMERIC(50, 40) has a scale of 40; JsonConverter fails a Decimal whose schema has no scale,
    record by record, where there is a value to read.)"""
    schema = {
        "type": "struct",
        "fields": [
            {"field": "id", "type": "int64"},
            {"field": "fine", **decimal_schema(40)},
            {"field": "odd", "type": "bytes", "optional": True, "name": CONNECT_DECIMAL},
        ],
    }
    decoder = JsonDecoder(schema_from_connect(schema), envelope=True)
    values = [
        json.dumps({"schema": schema, "payload": {"id": 1, "fine": base64_of(-12345), "odd": None}}).encode(),
        json.dumps({"schema": schema, "payload": {"id": 2, "fine": None, "odd": base64_of(5)}}).encode(),
    ]
    decoded = decoder.decode(values, [None, None])
    assert decoded.columns.to_pylist() == [{"id": 1, "fine": "-0." + "0" * 35 + "12345", "odd": None}]
    assert decoded.bad == [(1, "field odd: 'BQ==' is of a Decimal whose schema has no scale parameter")]


def test_a_keys_decimals_are_read_as_its_values_are() -> None:
    """(A Debezium key in its envelope, ``{"id": <Decimal>}``: the key a transformation reads, and the key a Hudi
    tombstone deletes by, are the decimal's text, as the record's own id is, not its base64.)"""
    key_schema = {"type": "struct", "fields": [{"field": "id", **decimal_schema(2)}]}
    key = json.dumps({"schema": key_schema, "payload": {"id": base64_of(1)}}).encode()
    config = SinkConfig.parse(
        sink_config(
            "orders",
            "db.orders",
            **{
                "key.converter": "json",
                "value.converter": "json",
                "value.converter.schemas.enable": "true",
                "transforms": "dbz",
                "transforms.dbz.type": "org.apache.iceberg.connect.transforms.DebeziumTransform",
            },
        )
    )
    assert config.transforms is not None
    assert RecordTransformer(config, config.transforms).staged_keys([key]) == [b'{"id":"0.01"}']


def random_decimals(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """A struct of Decimals of random scales, alone, in an array and in a map, with random unscaled integers (of
    one to 17 bytes, either sign, zero), or null; and a payload of it."""
    scales = [rng.choice([0, 1, 2, 4, 9, 18, 38]) for _ in range(3)]
    fields = [
        {"field": "plain", **decimal_schema(scales[0])},
        {"field": "listed", "type": "array", "optional": True, "items": decimal_schema(scales[1])},
        {
            "field": "mapped",
            "type": "map",
            "optional": True,
            "keys": {"type": "string"},
            "values": decimal_schema(scales[2]),
        },
    ]

    def unscaled() -> str | None:
        if rng.random() < 0.1:
            return None
        magnitude = rng.choice([0, 1, 7, 127, 128, 255, 256, 10**6, 2**63, 10**38 - 1, rng.getrandbits(130)])
        return base64_of(magnitude * rng.choice([1, -1]))

    payload = {
        "plain": unscaled(),
        "listed": [unscaled() for _ in range(rng.randrange(3))],
        "mapped": {f"k{i}": unscaled() for i in range(rng.randrange(3))},
    }
    return {"type": "struct", "optional": False, "fields": fields}, payload


def test_a_decimal_in_the_envelope_is_the_bigdecimal_kafkas_json_converter_reads() -> None:
    rng = random.Random(7)
    cases = [random_decimals(rng) for _ in range(200)]
    records = [
        {
            "topic": "t",
            "partition": 0,
            "offset": i,
            "timestamp": None,
            "key": None,
            "value": json.dumps({"schema": schema, "payload": payload}),
            "headers": [],
        }
        for i, (schema, payload) in enumerate(cases)
    ]
    # (A transformation that leaves values alone: the records as JsonConverter reads them.)
    config = {
        "transforms": "mark",
        "transforms.mark.type": "org.apache.kafka.connect.transforms.InsertHeader",
        "transforms.mark.header": "h",
        "transforms.mark.value.literal": "v",
    }
    (result,) = run_oracle("ApplyTransforms.java", [{"config": config, "schemas": True, "records": records}])
    compared = 0
    for (schema, payload), found in zip(cases, result["results"], strict=True):
        ours, _ = connect_decimals(schema, json.loads(json.dumps(payload)))

        def same(java: Any, python: Any) -> None:
            nonlocal compared
            if isinstance(java, list) and len(java) == 2 and java[0] == "n":
                # (Java's BigDecimal.toString may write an exponent: the same value, of the same scale.)
                assert isinstance(python, str) and Decimal(java[1]).as_tuple() == Decimal(python).as_tuple(), (
                    java,
                    python,
                )
                compared += 1
            elif isinstance(java, dict):
                assert isinstance(python, dict) and java.keys() == python.keys()
                for k in java:
                    same(java[k], python[k])
            elif isinstance(java, list):
                assert isinstance(python, list) and len(java) == len(python)
                for j, p in zip(java, python, strict=True):
                    same(j, p)
            else:
                assert java == python

        same(found["value"], ours)
    assert compared > 300


def envelope(payload: dict[str, Any] | None) -> bytes:
    return json.dumps({"schema": ROW_SCHEMA, "payload": payload}).encode()


ROW = {
    "id": 1,
    "amount": base64_of(7412),
    "rate": base64_of(-3),
    "born": 19000,
    "opens": 3_600_000,
    "seen": 1_700_000_000_123,
    "prices": [base64_of(1500), None],
    "by_tier": {"gold": base64_of(-5)},
    "nested": {"fee": base64_of(1)},
}


def test_the_decoder_reads_an_envelopes_decimals_as_decimals_and_its_other_logical_values_as_theirs() -> None:
    decoder = JsonDecoder(schema_from_connect(ROW_SCHEMA), envelope=True)
    values = [
        envelope(ROW),
        envelope({**ROW, "id": 2, "amount": "not base64!"}),
        envelope({**ROW, "id": 3, "amount": 74.12}),  # (decimal.format=NUMERIC: a number already)
        None,
    ]
    decoded = decoder.decode(values, [None] * len(values))
    rows = decoded.columns.to_pylist()
    assert [r["id"] for r in rows] == [1, 3] and decoded.skipped == 1
    first = rows[0]
    assert (first["amount"], first["rate"], first["prices"], first["by_tier"], first["nested"]) == (
        Decimal("74.12"),
        Decimal("-3"),
        [Decimal("1.500"), None],
        [("gold", Decimal("-0.5"))],
        {"fee": Decimal("0.0001")},
    )
    assert str(first["born"]) == "2022-01-08" and str(first["opens"]) == "01:00:00"
    assert first["seen"].isoformat() == "2023-11-14T22:13:20.123000+00:00"
    assert rows[1]["amount"] == Decimal("74.12")
    [(at, why)] = decoded.bad
    assert at == 1 and why.startswith("field amount: 'not base64!' is no org.apache.kafka.connect.data.Decimal")


def test_an_envelope_without_a_decimal_in_base64_keeps_its_text() -> None:
    # (decimal.format=NUMERIC: JsonConverter writes numbers, whose digits a parse into doubles would lose.)
    row = {**ROW, "amount": 0, "rate": 0, "prices": None, "by_tier": None, "nested": {"fee": 0}}
    numeric = envelope(row).replace(b'"amount": 0', b'"amount": 12345678901234567890.12')
    plain = b'{"schema": {"type": "struct", "fields": []}, "payload": {"a": 1.10}}'
    for value in (numeric, plain):
        assert envelope_decimals_as_text(value) is value
    decoded = JsonDecoder(schema_from_connect(ROW_SCHEMA), envelope=True).decode([numeric], [None])
    assert decoded.columns.column("amount").to_pylist() == [Decimal("12345678901234567890.12")]


def test_the_transforms_are_given_an_envelopes_decimals_as_their_text() -> None:
    """(Kafka's give them a BigDecimal; here, as Avro's decimals are, text: the chain passes it on whole. The stage
    writes the row in the envelope of its schema, each Decimal in base64 again, as JsonConverter writes it, and
    the sink reads it into a decimal column.)"""
    event = {
        "schema": {
            "type": "struct",
            "fields": [
                {"field": "before", **ROW_SCHEMA, "optional": True},
                {"field": "after", **ROW_SCHEMA, "optional": True},
                {"field": "op", "type": "string"},
            ],
        },
        "payload": {"before": None, "after": ROW, "op": "c"},
    }
    config = SinkConfig.parse(
        sink_config(
            "orders",
            "db.orders",
            **{
                "value.converter": "json",
                "value.converter.schemas.enable": "true",
                "transforms": "unwrap",
                "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
            },
        )
    )
    assert config.transforms is not None
    chunk = RecordChunk("orders", 0, [0], [None], [None], [json.dumps(event).encode()], [None], [None])
    out, dropped = RecordTransformer(config, config.transforms).apply(chunk)
    assert dropped == 0 and out.errors == [None]
    staged = json.loads(out.values[0] or b"")
    assert staged["schema"] == {**ROW_SCHEMA, "optional": False}
    assert staged["payload"] == ROW
    row = connect_decimals(staged["schema"], staged["payload"])[0]
    assert (row["amount"], row["rate"], row["prices"], row["by_tier"], row["nested"]) == (
        "74.12",
        "-3",
        ["1.500", None],
        {"gold": "-0.5"},
        {"fee": "0.0001"},
    )


def test_a_decimal_into_a_binary_column_keeps_its_bytes_as_tables_made_before_have_it() -> None:
    """(Until Decimals were read as decimals, a table the sink created from envelopes had a binary column of the
    unscaled integer's bytes: such a table still takes them so, rather than refusing the decimal's text.)"""
    columns = pa.schema([("id", pa.int32()), ("amount", pa.binary()), ("nested", pa.struct([("fee", pa.binary())]))])
    decoded = JsonDecoder(columns, envelope=True).decode([envelope(ROW)], [None])
    assert decoded.bad == []
    [row] = decoded.columns.to_pylist()
    assert (row["amount"], row["nested"]) == ((7412).to_bytes(2, "big"), {"fee": b"\x01"})
