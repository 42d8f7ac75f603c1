"""The tasks' transform stage (workers.transformed) without servers: what a run of records becomes before it
is staged, what is dropped and still covered by the staged range, and what is staged as a bad record."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors.config import SinkConfig
from sinks.files.writer import PartitionFiles
from sinks.hudi.writer import PartitionRows
from sinks.iceberg.writer import TableWriter
from sinks.iceberg.writes import shaped
from tests.conftest import sink_config
from tests.test_files_sink import files_config
from tests.test_hudi_sink import hudi_config
from tests.test_staging import CollectingSink
from workers.json_decoder import NO_PAYLOAD
from workers.json_text import parse_json
from workers.staging import STAGING_SCHEMA, RecordChunk, StagedPartition, StagingBuffer
from workers.transformed import RecordTransformer, sink_values
from workers.writes import sample_values

TOPIC = "dbserver1.public.orders"


def config(**overrides: str) -> SinkConfig:
    return SinkConfig.parse(sink_config(TOPIC, "db.orders", **overrides))


def run(values: list[dict[str, Any] | None], keys: list[bytes | None] | None = None) -> RecordChunk:
    n = len(values)
    return RecordChunk(
        TOPIC,
        0,
        list(range(10, 10 + n)),
        [1_700_000_000_000 + i for i in range(n)],
        keys or [None] * n,
        [json.dumps(v).encode() if v is not None else None for v in values],
        [None] * n,
        [None] * n,
    )


def appended(chunk: RecordChunk, value: bytes) -> RecordChunk:
    """``chunk`` with one more record, of this raw value (no key, header or timestamp)."""
    chunk.values.append(value)
    for column in (chunk.timestamps, chunk.keys, chunk.headers, chunk.errors):
        column.append(None)
    chunk.offsets.append(chunk.offsets[-1] + 1)
    return chunk


def test_a_debezium_run_becomes_rows_and_its_deletes_are_dropped_but_covered() -> None:
    unwrap = config(
        **{
            "transforms": "unwrap,cast",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
            "transforms.unwrap.delete.tombstone.handling.mode": "drop",
            "transforms.unwrap.add.fields": "op",
            "transforms.cast.type": "org.apache.kafka.connect.transforms.Cast$Value",
            "transforms.cast.spec": "amount:int32",
        }
    )
    assert unwrap.transforms is not None
    events = [
        {"before": None, "after": {"id": 1, "amount": "7"}, "source": {"table": "orders"}, "op": "c"},
        {"before": {"id": 1, "amount": "7"}, "after": None, "source": {"table": "orders"}, "op": "d"},
        None,  # its tombstone
        {"before": None, "after": {"id": 2, "amount": "abc"}, "source": {"table": "orders"}, "op": "c"},
    ]
    chunk = run(events, keys=[b'{"id":1}', b'{"id":1}', b'{"id":1}', b'{"id":2}'])
    out, dropped = RecordTransformer(unwrap, unwrap.transforms).apply(chunk)
    assert dropped == 2
    assert out.offsets == [10, 13]
    assert json.loads(out.values[0] or b"") == {"id": 1, "amount": 7, "__op": "c"}
    assert out.errors[0] is None
    # The cast that cannot be made: staged as consumed, with the transformation and the field in the reason.
    assert out.values[1] == chunk.values[3]
    assert out.errors[1] is not None and out.errors[1].startswith("transforms.cast (Cast$Value): field amount")

    buffer = StagingBuffer(TOPIC, 0, 10, CollectingSink(1 << 20))
    buffer.extend(out)
    buffer.skip(dropped, chunk.offsets[-1] + 1)
    staged = buffer.finish()
    assert (staged.start, staged.end, staged.records, staged.dropped) == (10, 14, 2, 2)


def test_after_the_transforms_the_sink_sees_the_envelope_of_the_schema_the_chain_gives() -> None:
    """As Kafka Connect hands a sink a transformed record with the schema its transformations gave it: HoistField
    makes a struct of one field of the value's schema. A null value (a tombstone) has no schema."""
    enveloped = config(
        **{
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "true",
            "transforms": "hoist",
            "transforms.hoist.type": "org.apache.kafka.connect.transforms.HoistField$Value",
            "transforms.hoist.field": "row",
        }
    )
    assert enveloped.transforms is not None
    view = enveloped.sink_view
    assert (view.value_converter, view.schemas_enable, view.transforms) == ("json", True, None)
    row = {"type": "struct", "optional": False, "fields": [{"field": "id", "type": "int32", "optional": False}]}
    chunk = run([{"schema": row, "payload": {"id": 3}}, None])
    out, dropped = RecordTransformer(enveloped, enveloped.transforms).apply(chunk)
    assert dropped == 0
    assert [json.loads(v) if v else v for v in out.values] == [
        {
            "schema": {"type": "struct", "optional": False, "fields": [{**row, "field": "row"}]},
            "payload": {"row": {"id": 3}},
        },
        {"schema": None, "payload": {"row": None}},
    ]

    # Plain JSON where an envelope is expected: refused, as Kafka Connect's JsonConverter refuses it.
    out, _ = RecordTransformer(enveloped, enveloped.transforms).apply(run([{"id": 4}]))
    assert out.values == [b'{"id": 4}'] and out.errors == [NO_PAYLOAD]
    assert config().sink_view is not None and config().transforms is None


def test_a_value_that_is_not_json_is_a_bad_record_staged_as_consumed() -> None:
    filtered = config(
        **{
            "transforms": "drop",
            "transforms.drop.type": "org.apache.kafka.connect.transforms.Filter",
            "transforms.drop.predicate": "tombstones",
            "predicates": "tombstones",
            "predicates.tombstones.type": "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
        }
    )
    # (RecordIsTombstone reads values: each is decoded, so a JSON null is a tombstone, as Kafka Connect's
    # JsonConverter reads it.)
    assert filtered.transforms is not None and filtered.transforms.uses_values
    chunk = appended(appended(run([{"id": 1}, None]), b"null"), b"{not json")
    out, dropped = RecordTransformer(filtered, filtered.transforms).apply(chunk)
    assert dropped == 2
    assert out.offsets == [10, 13]
    assert out.values[0] == b'{"id":1}'
    assert out.values[1] == b"{not json" and out.errors[1] is not None and "not JSON" in out.errors[1]


def test_integers_beyond_64_bits_stay_whole_and_the_rest_reads_as_orjson_reads_it() -> None:
    beyond = [-(1 << 63) - 1, (1 << 64), 10**30]
    texts = [json.dumps({"id": n, "nested": {"list": [n]}}).encode() for n in beyond]
    for text, n in zip(texts, beyond, strict=True):
        assert parse_json(text) == {"id": n, "nested": {"list": [n]}}
        assert type(parse_json(text)["id"]) is int
    # Within 64 bits (signed or not), and 19 digits that are no integer: as orjson reads them.
    for text in (
        b'{"a": 18446744073709551615, "b": -9223372036854775808}',
        b'{"f": 0.1234567890123456789, "s": "1234567890123456789012"}',
        b'[1e300, 2.5, "x"]',
    ):
        assert parse_json(text) == orjson.loads(text)
    # Beyond a double's range (orjson refuses it): an integer whole, as Jackson reads it; a fraction refused.
    huge = b"1" + b"0" * 400
    assert parse_json(b'{"i": -' + huge + b"}") == {"i": -int(huge)}
    with pytest.raises(ValueError, match="infinity"):
        parse_json(b'{"f": ' + huge + b".5}")
    # What orjson refuses is refused on either path.
    for text in (
        b'{"a": NaN}',
        b'{"a": 12345678901234567890123, "b": Infinity}',
        b'[12345678901234567890123, "\\ud800"]',
        b'{"a": ' + huge + b', "b": Infinity}',
        b'{"a": 1e400, "b": ' + huge + b"}",
        b"[" + huge + b', "\\ud800"]',
    ):
        with pytest.raises(ValueError):
            parse_json(text)


def test_keys_stay_as_consumed_unless_a_step_reads_or_replaces_them() -> None:
    events = [
        {"before": None, "after": {"id": 1}, "source": {"db": "inventory", "table": "orders"}, "op": "c"},
        {"before": None, "after": {"id": 2}, "source": {"db": "inventory", "table": "orders"}, "op": "c"},
    ]
    keys: list[bytes | None] = [b'{"id": 1}', b"not json"]
    unwrap = config(
        **{"transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"}
    )
    assert unwrap.transforms is not None and not unwrap.transforms.uses_keys
    out, _ = RecordTransformer(unwrap, unwrap.transforms).apply(run(events, keys=list(keys)))
    # Not parsed, nor written again: as the sink takes them without transforms.
    assert out.keys == keys and out.errors == [None, None]

    # A step that reads keys (the Iceberg sink's DebeziumTransform keeps a map key as _cdc.key) parses them:
    # a key that is not JSON is then a bad record, staged as consumed.
    dbz = config(
        **{
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "transforms": "dbz",
            "transforms.dbz.type": "org.apache.iceberg.connect.transforms.DebeziumTransform",
        }
    )
    assert dbz.transforms is not None and dbz.transforms.uses_keys
    out, _ = RecordTransformer(dbz, dbz.transforms).apply(run(events, keys=list(keys)))
    assert json.loads(out.values[0] or b"")["_cdc"]["key"] == {"id": 1}
    assert out.keys[0] == b'{"id":1}'
    assert out.keys[1] == b"not json" and out.errors[1] is not None and "the key is not JSON" in out.errors[1]

    # A step that replaces them (ValueToKey, or any $Key variant) writes them as JSON.
    for replacing in (
        {"transforms.k.type": "org.apache.kafka.connect.transforms.ValueToKey", "transforms.k.fields": "id"},
        {"transforms.k.type": "org.apache.kafka.connect.transforms.HoistField$Key", "transforms.k.field": "k"},
    ):
        keyed = config(
            **{"key.converter": "org.apache.kafka.connect.json.JsonConverter", "transforms": "k", **replacing}
        )
        assert keyed.transforms is not None and keyed.transforms.uses_keys
        out, _ = RecordTransformer(keyed, keyed.transforms).apply(run([{"id": 5}], keys=[b'{"id": 5}']))
        assert json.loads(out.keys[0] or b"") in ({"id": 5}, {"k": {"id": 5}})
        assert out.keys[0] != b'{"id": 5}'


def test_values_stay_as_consumed_when_no_step_or_predicate_reads_them() -> None:
    routed = config(
        **{
            "transforms": "route,mark,drop",
            "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
            "transforms.route.regex": "dbserver1\\.(.*)",
            "transforms.route.replacement": "$1",
            "transforms.mark.type": "org.apache.kafka.connect.transforms.InsertHeader",
            "transforms.mark.header": "via",
            "transforms.mark.value.literal": "sinkadmin",
            "transforms.drop.type": "org.apache.kafka.connect.transforms.Filter",
            "transforms.drop.predicate": "other",
            "predicates": "other",
            "predicates.other.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
            "predicates.other.pattern": "other\\..*",
        }
    )
    assert routed.transforms is not None and not routed.transforms.uses_values
    chunk = appended(run([{"id": 1}, None]), b"{not json")
    chunk.values[0] = b'{"id": 1,  "note": "as written"}'
    out, dropped = RecordTransformer(routed, routed.transforms).apply(chunk)
    # Not parsed, nor written again: the sink's decoder judges them, as without transforms.
    assert (out.values, out.errors, dropped) == (chunk.values, [None, None, None], 0)
    assert out.headers == [[("via", b"sinkadmin")]] * 3


def test_a_record_a_transformation_failed_on_does_not_shape_the_columns_the_others_are_written_in(
    tmp_path: Path,
) -> None:
    """A record a transformation could not transform is staged as consumed: its fields and types are not the
    transformed records'. The first of a run (here its Cast of "abc" fails, where the others' strings become
    numbers, and ReplaceField would drop ``secret``) must not settle the schema, or every good record of the run
    after it would not fit its columns and go to the dead letters with it (found by a QA run through make run:
    the files and Hudi sinks, both data planes)."""
    chain = {
        "transforms": "cast,drop",
        "transforms.cast.type": "org.apache.kafka.connect.transforms.Cast$Value",
        "transforms.cast.spec": "amount:int32",
        "transforms.drop.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
        "transforms.drop.exclude": "secret",
    }
    values = [b'{"id": 0, "amount": "abc", "secret": "s"}'] + [
        json.dumps({"id": i, "amount": str(i), "secret": "s"}).encode() for i in range(1, 6)
    ]
    raw = RecordChunk("orders", 0, list(range(6)), [1_700_000_000_000] * 6, [None] * 6, values, None, [None] * 6)

    def staged(config: SinkConfig) -> RecordChunk:
        assert config.transforms is not None
        chunk, dropped = RecordTransformer(config, config.transforms).apply(raw)
        assert dropped == 0 and chunk.errors[0] is not None and chunk.values[0] == values[0]
        return chunk

    iceberg = staged(SinkConfig.parse(sink_config("orders", "db.t", **chain)))
    assert sample_values(iceberg.values, iceberg.errors) == iceberg.values[1:]
    assert json.loads(iceberg.values[1] or b"") == {"id": 1, "amount": 1}

    files = SinkConfig.parse(files_config(tmp_path / "files", topics="orders", **chain))
    chunk = staged(files)
    placed = PartitionFiles(files.sink_view, files.settings, uuid.uuid4(), "orders", 0)
    placed.write(chunk.offsets, chunk.timestamps, chunk.values, chunk.errors)
    placed.close_all()
    assert [b.offset for b in placed.bad] == [0]
    [written] = list((tmp_path / "files").rglob("*.parquet"))
    table = pq.read_table(written)
    assert table.column_names == ["id", "amount"] and table.column("amount").to_pylist() == [1, 2, 3, 4, 5]

    hudi = SinkConfig.parse(
        hudi_config(tmp_path / "hudi", topics="orders", **chain, **{"hoodie.datasource.write.precombine.field": ""})
    )
    chunk = staged(hudi)
    rows = PartitionRows(hudi.sink_view, hudi.settings, "orders", 0, ())
    rows.write(chunk.offsets, chunk.keys, chunk.values, chunk.errors)
    assert [b.offset for b in rows.bad] == [0]
    assert rows.schema is not None and rows.schema.names == ["id", "amount"]


def test_the_iceberg_sinks_table_is_created_from_the_records_staged_without_an_error(tmp_path: Path) -> None:
    """(On the Spark plane the coordinator-side writer settles a new table from the staging files' first records,
    as the arrow plane does from its first chunk: those staged with their error are left out.)"""
    path = tmp_path / "staged.parquet"
    rows = [
        {
            "topic": "orders",
            "partition": 0,
            "offset": o,
            "timestamp": None,
            "key": None,
            "value": v,
            "headers": None,
            "error": e,
        }
        for o, (v, e) in enumerate(
            [(b'{"amount": "abc"}', "transforms.cast (Cast$Value): no"), (b'{"amount": 1}', None)]
        )
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=STAGING_SCHEMA), path)
    staged = StagedPartition("orders", 0, 0, 2, 2, path, None)
    config = SinkConfig.parse(sink_config("orders", "db.t"))
    records = TableWriter(config)._staged_records([staged], "db.t")
    assert shaped(sink_values(config, records), lambda samples: list(samples())) == [b'{"amount": 1}']


def test_a_cast_to_a_float_that_makes_nan_or_an_infinity_stages_jacksons_text_for_it_and_a_reader_reads_it() -> None:
    cast = config(
        **{
            "transforms": "cast",
            "transforms.cast.type": "org.apache.kafka.connect.transforms.Cast$Value",
            "transforms.cast.spec": "x:float64",
        }
    )
    assert cast.transforms is not None and cast.transforms.makes_floats
    # Java's Double.parseDouble takes "NaN" and "-Infinity", and a hexadecimal beyond a double's range (an
    # infinity); Number.doubleValue() of an integer beyond it is one too. (Python raised on the last two.)
    values: list[dict[str, Any] | None] = [
        {"id": 1, "x": "NaN", "note": None},
        {"id": 2, "x": "-Infinity"},
        {"id": 3, "x": "0x1p2000"},
        {"id": 4, "x": 2.5},
    ]
    chunk = appended(run(values), b'{"id": 5, "x": 1' + b"0" * 400 + b"}")
    out, dropped = RecordTransformer(cast, cast.transforms).apply(chunk)
    assert dropped == 0 and out.errors == [None] * 5
    assert [parse_json(v or b"") for v in out.values] == [
        {"id": 1, "x": "NaN", "note": None},
        {"id": 2, "x": "-Infinity"},
        {"id": 3, "x": "Infinity"},
        {"id": 4, "x": 2.5},
        {"id": 5, "x": "Infinity"},
    ]
    from workers.json_decoder import JsonDecoder

    decoded = JsonDecoder(pa.schema([("id", pa.int64()), ("x", pa.float64())])).decode(out.values, out.errors)
    assert decoded.bad == []
    assert str(decoded.columns.column("x").to_pylist()) == str(
        [float("nan"), -float("inf"), float("inf"), 2.5, float("inf")]
    )


def test_an_exception_a_transformation_raises_on_a_record_makes_it_a_bad_record_not_a_failed_task() -> None:
    """As Kafka Connect tolerates any exception of the TRANSFORMATION stage (errors.tolerance decides)."""
    from connectors.smt.chain import Step, TransformChain
    from connectors.smt.record import ConnectRecord, Props, Transformation

    class Fragile(Transformation):
        def apply(self, record: ConnectRecord) -> ConnectRecord:
            if record.value.get("id") == 2:
                raise ZeroDivisionError("division by zero")
            return record

    chain = TransformChain((Step("fragile", "com.example.Fragile", Fragile(Props({}))),))
    out, dropped = RecordTransformer(config(), chain).apply(run([{"id": 1}, {"id": 2}, {"id": 3}]))
    assert dropped == 0 and out.offsets == [10, 11, 12]
    assert out.errors[0] is None and out.errors[2] is None
    assert out.errors[1] == "transforms.fragile (Fragile): ZeroDivisionError: division by zero"
    assert out.values[1] == b'{"id": 2}'  # (staged as consumed, for the dead letters)


def test_nan_and_infinities_are_written_as_text_beside_integers_beyond_64_bits() -> None:
    from workers.json_text import json_text

    # (orjson cannot write the integer: the standard library, which would write Infinity bare, not JSON.)
    assert (
        json_text({"a": 10**30, "b": float("inf")}, nonfinite=True) == b'{"a":' + b"1" + b"0" * 30 + b',"b":"Infinity"}'
    )
