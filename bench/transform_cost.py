#!/usr/bin/env python
"""What Kafka Connect's transforms cost a task, per record, as it stages them (workers.transformed).

Builds runs of ~1 KB records as a task fetches them (``RecordChunk``): Debezium
change events (``before``/``after``/``source``, a quarter of them updates with
both states) for the CDC chains, the sink benchmark's plain JSON for the others,
and measures in microseconds of this process's CPU per record (the median of
``--rounds`` rounds, after two that warm up) the transform stage
(``RecordTransformer.apply``: the JSON parse, the chain, the JSON text of what it
leaves) for each chain, against two baselines measured in the same run:

- staging the run without transforms (``RecordChunk.raw_table`` and the
  staging file's write: what every record costs a task anyway);
- a JSON parse and serialisation of each value alone, as the stage does them
  (orjson: the floor of any schemaless transform).

And, for each chain the Iceberg writer's decoder applies to columns
(``SinkConfig.columnar_chain``, decision 012: Debezium's unwrap, its defaults
and ``rewrite`` with ``add.fields``, and followed by a RegexRouter; the Iceberg sink's DebeziumTransform;
Kafka's InsertField$Value and ReplaceField$Value, alone and after the unwrap),
the two ways the product takes a record to its row, run in turn on the same
records: the transform stage then the sink's decoding of its rows
(``JsonDecoder``: what a sink whose decoders cannot apply the chain does, and
the Iceberg sink with schema evolution or a route field), against the
decoder applying the chain as it reads the values (``ChainDecoder``).

And the Debezium chains on the same events in JsonConverter's schema envelope
(``value.converter.schemas.enable=true``, Debezium's default), which the stage
transforms with their schema and writes in the envelope of the schema the chain
gives them (``connectors.smt.schemas``), against the same chain on the events
without their schema, measured in turn.

In a process tuned as the tasks' are (``workers.runtime.tune_process_for_tasks``).
No Spark, broker or database. Prints and writes bench/results/transform_cost.json.

    .venv/bin/python bench/transform_cost.py [--records 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sink_throughput import LINEAGE as LINEAGE_KEYS
from spark_decoding import ROOT, values_of  # (the benchmarks' records; sets up Django)
from staging_costs import per_record_us

from connectors.config import SinkConfig
from workers.chain_decoder import ChainDecoder
from workers.json_decoder import JsonDecoder
from workers.json_text import json_text, parse_json
from workers.runtime import tune_process_for_tasks
from workers.staging import RawStagingFile, RecordChunk
from workers.transformed import RecordTransformer

SOURCE = {
    "version": "2.7.3.Final",
    "connector": "postgresql",
    "name": "dbserver1",
    "db": "inventory",
    "schema": "public",
    "table": "orders",
}


def debezium_values(records: int) -> list[bytes | None]:
    """Change events of the benchmark's rows: snapshot reads, inserts and (one in four) updates."""
    padding = "x" * 700
    events = []
    for i in range(records):
        after = {"id": i, "user": f"user-{i % 1000}", "amount": i * 0.25, "ok": i % 2 == 0, "note": padding}
        op = "u" if i % 4 == 0 else ("r" if i % 4 == 1 else "c")
        before = {**after, "amount": i * 0.5, "note": ""} if op == "u" else None
        source = {**SOURCE, "ts_ms": 1_700_000_000_000 + i, "lsn": 1000 + 8 * i}
        events.append(
            json.dumps(
                {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1_700_000_000_500 + i}
            ).encode()
        )
    return list(events)


# The columns of the events' rows (``after``), as a table the sink created from them has them.
ROW_SCHEMA = pa.schema(
    [("id", pa.int64()), ("user", pa.string()), ("amount", pa.float64()), ("ok", pa.bool_()), ("note", pa.string())]
)
UNWRAP = "ExtractNewRecordState (Debezium's defaults)"
UNWRAP_REWRITE = "ExtractNewRecordState, rewrite, add.fields=op,table,source.ts_ms"
DEBEZIUM = "the Iceberg sink's DebeziumTransform"
LINEAGE = "InsertField (topic, partition, offset, timestamp) and ReplaceField (exclude, renames)"
UNWRAP_LINEAGE = "ExtractNewRecordState, then that InsertField and ReplaceField"
FILTERED_UNWRAP = "a Filter of tombstones (RecordIsTombstone), then ExtractNewRecordState"
ROUTED_UNWRAP = "ExtractNewRecordState, then a RegexRouter (Debezium's unwrap,route)"
# The columns InsertField and ReplaceField (LINEAGE_KEYS: the sink benchmark's iceberg-lineage) leave of the rows.
LINEAGE_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("customer", pa.string()),
        ("amount", pa.float64()),
        ("note", pa.string()),
        ("_topic", pa.string()),
        ("_partition", pa.int32()),
        ("_offset", pa.int64()),
        ("_ts", pa.int64()),
    ]
)
# The columns of the rows each chain the decoder applies gives, as a table the sink created from them has them.
APPLIED_SCHEMAS = {
    UNWRAP: ROW_SCHEMA,
    FILTERED_UNWRAP: ROW_SCHEMA,
    ROUTED_UNWRAP: ROW_SCHEMA,
    LINEAGE: LINEAGE_SCHEMA,
    UNWRAP_LINEAGE: LINEAGE_SCHEMA,
    DEBEZIUM: pa.schema(
        [
            *ROW_SCHEMA,
            (
                "_cdc",
                pa.struct(
                    [
                        ("op", pa.string()),
                        ("ts", pa.int64()),
                        ("offset", pa.int64()),
                        ("source", pa.string()),
                        ("target", pa.string()),
                        ("key", pa.struct([("id", pa.int64())])),
                    ]
                ),
            ),
        ]
    ),
    UNWRAP_REWRITE: pa.schema(
        [
            *ROW_SCHEMA,
            ("__deleted", pa.string()),
            ("__op", pa.string()),
            ("__table", pa.string()),
            ("__source_ts_ms", pa.int64()),
        ]
    ),
}


def staged_then_decoded(transformer: RecordTransformer, decoder: JsonDecoder, chunk: RecordChunk) -> pa.Table:
    """The transform stage, then the sink's decoding of what it staged."""
    out, _ = transformer.apply(chunk)
    return decoder.decode(out.values, out.errors).columns


def applied_by_the_decoder(decoder: ChainDecoder, chunk: RecordChunk) -> pa.Table:
    """The Iceberg writer's decoder, applying the chain as it reads the values."""
    return decoder.decode(chunk).columns


def in_turn(works: list[Callable[[], object]], records: int, rounds: int) -> list[float]:
    """Median CPU microseconds per record of each work, run in turn in every round (two more warm up first):
    so that the machine's drift during the run weighs on each alike."""
    spent: list[list[float]] = [[] for _ in works]
    for round_ in range(rounds + 2):
        for i, work in enumerate(works):
            began = time.process_time()
            work()
            if round_ >= 2:
                spent[i].append(time.process_time() - began)
    return [round(statistics.median(s) * 1e6 / records, 3) for s in spent]


def chunk_of(values: list[bytes | None]) -> RecordChunk:
    n = len(values)
    keys: list[bytes | None] = [json.dumps({"id": i}).encode() for i in range(n)]
    stamps: list[int | None] = [1_700_000_000_000 + i for i in range(n)]
    return RecordChunk("dbserver1.public.orders", 0, list(range(n)), stamps, keys, values, [None] * n, [None] * n)


BASE = {
    "connector.class": "iceberg",
    "topics": "dbserver1.public.orders",
    "iceberg.tables": "db.orders",
    "key.converter": "json",
    "value.converter": "json",
    "value.converter.schemas.enable": "false",
}


# name: (the transform keys, whether its records are Debezium events)
CHAINS: dict[str, tuple[dict[str, str], bool]] = {
    "ExtractNewRecordState (Debezium's defaults)": (
        {"transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"},
        True,
    ),
    "ExtractNewRecordState, rewrite, add.fields=op,table,source.ts_ms": (
        {
            "transforms": "unwrap",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
            "transforms.unwrap.delete.handling.mode": "rewrite",
            "transforms.unwrap.add.fields": "op,table,source.ts_ms",
        },
        True,
    ),
    DEBEZIUM: (
        {"transforms": "dbz", "transforms.dbz.type": "org.apache.iceberg.connect.transforms.DebeziumTransform"},
        True,
    ),
    FILTERED_UNWRAP: (
        {
            "transforms": "tombstones,unwrap",
            "transforms.tombstones.type": "org.apache.kafka.connect.transforms.Filter",
            "transforms.tombstones.predicate": "null",
            "predicates": "null",
            "predicates.null.type": "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        },
        True,
    ),
    ROUTED_UNWRAP: (
        {
            "transforms": "unwrap,route",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
            "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
            "transforms.route.regex": "([^.]+)\\.([^.]+)\\.([^.]+)",
            "transforms.route.replacement": "$3",
        },
        True,
    ),
    LINEAGE: (LINEAGE_KEYS, False),
    UNWRAP_LINEAGE: (
        {
            **LINEAGE_KEYS,
            "transforms": "unwrap,fields,lineage",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        },
        True,
    ),
    "four of Kafka's: InsertField, ReplaceField, Cast, MaskField": (
        {
            "transforms": "insert,drop,cast,mask",
            "transforms.insert.type": "org.apache.kafka.connect.transforms.InsertField$Value",
            "transforms.insert.topic.field": "_topic",
            "transforms.insert.offset.field": "_offset",
            "transforms.drop.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
            "transforms.drop.exclude": "note",
            "transforms.cast.type": "org.apache.kafka.connect.transforms.Cast$Value",
            "transforms.cast.spec": "amount:string,id:int32",
            "transforms.mask.type": "org.apache.kafka.connect.transforms.MaskField$Value",
            "transforms.mask.fields": "user",
        },
        False,
    ),
    "Filter under a predicate no record matches": (
        {
            "transforms": "drop",
            "transforms.drop.type": "org.apache.kafka.connect.transforms.Filter",
            "transforms.drop.predicate": "other",
            "predicates": "other",
            "predicates.other.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
            "predicates.other.pattern": "other\\..*",
        },
        False,
    ),
}


# The events' schemas, as Debezium's PostgreSQL connector writes them in JsonConverter's envelope.
ROW_CONNECT = {
    "type": "struct",
    "optional": False,
    "name": "dbserver1.public.orders.Value",
    "fields": [
        {"field": "id", "type": "int64", "optional": False},
        {"field": "user", "type": "string", "optional": True},
        {"field": "amount", "type": "double", "optional": True},
        {"field": "ok", "type": "boolean", "optional": True},
        {"field": "note", "type": "string", "optional": True},
    ],
}
SOURCE_CONNECT = {
    "type": "struct",
    "optional": False,
    "name": "io.debezium.connector.postgresql.Source",
    "fields": [
        {"field": name, "type": "int64" if name in ("ts_ms", "lsn") else "string", "optional": name == "lsn"}
        for name in (*SOURCE, "ts_ms", "lsn")
    ],
}
ENVELOPE_CONNECT = {
    "type": "struct",
    "optional": False,
    "name": "dbserver1.public.orders.Envelope",
    "version": 2,
    "fields": [
        {**ROW_CONNECT, "optional": True, "field": "before"},
        {**ROW_CONNECT, "optional": True, "field": "after"},
        {**SOURCE_CONNECT, "field": "source"},
        {"field": "op", "type": "string", "optional": False},
        {"field": "ts_ms", "type": "int64", "optional": True},
    ],
}
WITH_SCHEMAS = (UNWRAP, UNWRAP_REWRITE, DEBEZIUM)


def enveloped(values: list[bytes | None]) -> list[bytes | None]:
    """The events in JsonConverter's schema envelope."""
    return [
        None if v is None else json.dumps({"schema": ENVELOPE_CONNECT, "payload": json.loads(v)}).encode()
        for v in values
    ]


def json_round_trip(chunk: RecordChunk) -> None:
    """Each value parsed and written back as the transform stage does (orjson), and nothing else."""
    for value in chunk.values:
        json_text(parse_json(value or b"null"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "transform_cost.json"))
    args = parser.parse_args()
    n, rounds = args.records, args.rounds
    # The allocator and the garbage collector as in the tasks' processes, where the stage runs (without it,
    # glibc's heap given back and faulted in again at every run cost the stage ~8 µs a record more).
    tune_process_for_tasks()
    runs = {True: chunk_of(debezium_values(n)), False: chunk_of(values_of(range(n)))}

    with tempfile.TemporaryDirectory(
        prefix="transform-cost-", dir=ROOT / "var" if (ROOT / "var").is_dir() else None
    ) as d:

        def staged(chunk: RecordChunk) -> None:
            file = RawStagingFile(Path(d) / "run.parquet", 64 << 20)
            file.write(chunk)
            file.close()

        staging_us = {cdc: per_record_us(functools.partial(staged, chunk), n, rounds) for cdc, chunk in runs.items()}
    json_us = {cdc: per_record_us(functools.partial(json_round_trip, chunk), n, rounds) for cdc, chunk in runs.items()}
    figures: dict[str, dict[str, Any]] = {}
    for name, (keys, cdc) in CHAINS.items():
        config = SinkConfig.parse({**BASE, **keys})
        assert config.transforms is not None
        transformer = RecordTransformer(config, config.transforms)
        out, dropped = transformer.apply(runs[cdc])
        assert not any(out.errors) and dropped == 0, (name, out.errors[:1])
        us = per_record_us(functools.partial(transformer.apply, runs[cdc]), n, rounds)
        figures[name] = {
            "records": "debezium events" if cdc else "plain json",
            "us_per_record": us,
            "records_per_cpu_second": round(1e6 / us),
            "to_staging": round(us / staging_us[cdc], 2),
            "to_json_parse_and_text": round(us / json_us[cdc], 2),
        }
        print(
            f"{name}: {us} µs a record ({round(1e6 / us):,} records per CPU-second), "
            f"{figures[name]['to_staging']}x staging it, {figures[name]['to_json_parse_and_text']}x a JSON parse "
            "and text of it",
            flush=True,
        )
    # The chains the decoder applies and the decoding of their rows: by the stage then the decoder, and by the
    # decoder alone.
    decoding = {}
    for chain, schema in APPLIED_SCHEMAS.items():
        keys, cdc = CHAINS[chain]
        config = SinkConfig.parse({**BASE, **keys})
        assert config.transforms is not None and config.columnar_chain is not None, chain
        transformer = RecordTransformer(config, config.transforms)
        staged_way = functools.partial(staged_then_decoded, transformer, JsonDecoder(schema), runs[cdc])
        decoder_way = functools.partial(applied_by_the_decoder, ChainDecoder(schema, config.sink_view), runs[cdc])
        assert staged_way().equals(decoder_way()), "the two ways must give the same rows"
        staged_us, decoder_us = in_turn([staged_way, decoder_way], n, rounds)
        decoding[chain] = {
            "records": "debezium events" if cdc else "plain json",
            "stage_then_decode_us_per_record": staged_us,
            "applied_by_the_decoder_us_per_record": decoder_us,
            "ratio": round(staged_us / decoder_us, 2),
        }
        print(
            f"{chain} and the decoding of its rows: {staged_us} µs a record (the transform stage, then the "
            f"sink's decoder), against {decoder_us} µs applied by the decoder: {decoding[chain]['ratio']}x",
            flush=True,
        )
    # The Debezium chains on events with their schema, against the same chains on the events without it.
    with_schemas = {}
    envelopes = chunk_of(enveloped(runs[True].values))
    for chain in WITH_SCHEMAS:
        keys, _ = CHAINS[chain]
        transformers = []
        for schemas_enable in ("true", "false"):
            config = SinkConfig.parse({**BASE, **keys, "value.converter.schemas.enable": schemas_enable})
            assert config.transforms is not None
            transformers.append(RecordTransformer(config, config.transforms))
        out, _ = transformers[0].apply(envelopes)
        assert not any(out.errors) and json.loads(out.values[0] or b"")["schema"]["type"] == "struct"
        schema_us, plain_us = in_turn(
            [functools.partial(transformers[0].apply, envelopes), functools.partial(transformers[1].apply, runs[True])],
            n,
            rounds,
        )
        with_schemas[chain] = {
            "record_bytes": round(sum(map(len, filter(None, envelopes.values))) / n),
            "with_schema_us_per_record": schema_us,
            "without_schema_us_per_record": plain_us,
            "ratio": round(schema_us / plain_us, 2),
        }
        print(
            f"{chain}, events with their schema: {schema_us} µs a record, against {plain_us} µs without it: "
            f"{with_schemas[chain]['ratio']}x",
            flush=True,
        )
    print(
        f"baselines: staging {staging_us[True]} µs (events) / {staging_us[False]} µs (plain) a record; "
        f"a JSON parse and text {json_us[True]} / {json_us[False]} µs"
    )
    report = {
        "records_per_run": n,
        "record_bytes": {
            "debezium events": round(sum(map(len, filter(None, runs[True].values))) / n),
            "plain json": round(sum(map(len, filter(None, runs[False].values))) / n),
        },
        "rounds": rounds,
        "cpu_count": os.cpu_count(),
        "staging_us_per_record": {"debezium events": staging_us[True], "plain json": staging_us[False]},
        "json_parse_and_text_us_per_record": {"debezium events": json_us[True], "plain json": json_us[False]},
        "chains": figures,
        "applied_and_decoded": decoding,
        "with_schemas": with_schemas,
    }
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
