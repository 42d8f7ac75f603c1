#!/usr/bin/env python
"""What columns of the types JSON readers lack (UUID, binary, time, map) cost the decode, per record (decision 018).

The JSON decoder both data planes run (``workers.json_decoder``) over runs of ~1 KB
records, in microseconds of this process's CPU per record (the median of ``--rounds``
rounds, after two that warm up). The same records each time:

- the baseline, measured in the same run: a table whose four such columns are text
  (``uid``, ``raw``, ``at`` as strings, ``attrs`` left out), read by Arrow's reader alone;
- the table with those columns typed UUID, binary, time and map<string, long>, which
  the decoder converts in Python from each record's parsed JSON (``workers.json_values``);
- each of the four typed alone, the other three as text;
- a table whose one time column is a date (``day``, days since the epoch, as Debezium writes a ``DATE``),
  which Arrow C++'s reader decodes (arrow-rs refuses such numbers), beside the same table with ``day`` a
  long, which arrow-rs decodes;
- records in Kafka Connect's schema envelope (``value.converter.schemas.enable=true``) whose ``amount`` is a
  Connect Decimal (JsonConverter's base64 of its unscaled integer, read as the decimal it is), beside the
  same envelopes with ``amount`` a double.

No Spark, broker or database. Prints and writes bench/results/typed_columns_cost.json.

    .venv/bin/python bench/typed_columns_cost.py [--records 20000] [--rounds 7]
"""

from __future__ import annotations

import base64
import functools
import json
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa
from staging_costs import per_record_arguments, per_record_us, report_per_record

from workers.json_decoder import JsonDecoder
from workers.runtime import tune_process_for_tasks
from workers.schemas import CONNECT_DECIMAL, schema_from_connect

TEXT = {"uid": pa.string(), "raw": pa.string(), "at": pa.string(), "attrs": None}
TYPED = {"uid": pa.uuid(), "raw": pa.binary(), "at": pa.time64("us"), "attrs": pa.map_(pa.string(), pa.int64())}


def values(records: int) -> list[bytes | None]:
    padding = "x" * 760
    return [
        json.dumps(
            {
                "id": i,
                "user": f"user-{i % 1000}",
                "amount": i * 0.25,
                "uid": str(uuid.UUID(int=i * 7919)),
                "raw": base64.b64encode(f"raw-{i}".encode()).decode(),
                "at": f"{i % 24:02d}:{i % 60:02d}:07.123",
                "attrs": {"n": i, "m": i % 7},
                "day": 18_000 + i % 3_000,
                "note": padding,
            }
        ).encode()
        for i in range(records)
    ]


def envelope_values(records: int, decimal: bool) -> list[bytes | None]:
    """The records' id, user, amount and note in Connect's envelope, ``amount`` a Decimal of scale 2 or a double."""
    amount: dict[str, object] = (
        {"type": "bytes", "optional": True, "name": CONNECT_DECIMAL, "parameters": {"scale": "2"}}
        if decimal
        else {"type": "double", "optional": True}
    )
    connect_schema = {
        "type": "struct",
        "fields": [
            {"field": "id", "type": "int64"},
            {"field": "user", "type": "string"},
            {"field": "amount", **amount},
            {"field": "note", "type": "string"},
        ],
    }
    padding = "x" * 760

    def amount_of(i: int) -> object:
        return base64.b64encode((i * 25).to_bytes(4, "big", signed=True)).decode() if decimal else i * 0.25

    return [
        json.dumps(
            {
                "schema": connect_schema,
                "payload": {"id": i, "user": f"user-{i % 1000}", "amount": amount_of(i), "note": padding},
            }
        ).encode()
        for i in range(records)
    ]


def schema(columns: dict[str, pa.DataType | None]) -> pa.Schema:
    fixed = [pa.field("id", pa.int64()), pa.field("user", pa.string()), pa.field("amount", pa.float64())]
    return pa.schema([*fixed, *(pa.field(n, t) for n, t in columns.items() if t is not None), ("note", pa.string())])


def main() -> None:
    args = per_record_arguments(__doc__, "typed_columns_cost.json")
    tune_process_for_tasks()
    n = args.records
    run = values(n)
    errors: list[str | None] = [None] * n
    cases = {
        "text columns, Arrow's reader only (baseline)": schema(TEXT),
        "uuid, binary, time and map typed": schema(TYPED),
        **{f"{name} typed alone": schema({**TEXT, name: TYPED[name]}) for name in TYPED},
        "day a long (arrow-rs)": schema({**TEXT, "day": pa.int64()}),
        "day a date, the table's one time column (Arrow C++)": schema({**TEXT, "day": pa.date32()}),
    }

    def decode(columns: pa.Schema) -> None:
        decoded = JsonDecoder(columns).decode(run, errors)
        assert len(decoded.positions) == n and not decoded.bad, decoded.bad[:1]

    measured = {name: per_record_us(functools.partial(decode, s), n, args.rounds) for name, s in cases.items()}
    for name, decimal in (("envelope, amount a double", False), ("envelope, amount a Connect Decimal", True)):
        enveloped = envelope_values(n, decimal)
        columns = schema_from_connect(json.loads(enveloped[0] or b"")["schema"])

        def decode_envelopes(columns: pa.Schema = columns, enveloped: list[bytes | None] = enveloped) -> None:
            decoded = JsonDecoder(columns, envelope=True).decode(enveloped, errors)
            assert len(decoded.positions) == n and not decoded.bad, decoded.bad[:1]

        measured[name] = per_record_us(decode_envelopes, n, args.rounds)
    report_per_record(measured, "text columns, Arrow's reader only (baseline)", n, len(run[0] or b""), args.output)


if __name__ == "__main__":
    main()
