"""A partition's JSON values decoded in runs that share one schema, as the sinks without a fixed table schema
(the files and Hudi sinks) decode them.

The schema comes from the converter (a Kafka Connect envelope, an Avro schema,
a Schema Registry's schemas) or is inferred from the values, as auto-create
types a table; a value with fields the schema lacks ends a run, and the next
run is decoded with the wider schema. Both data planes run it (Spark's Python
workers, or the participant itself), with the JSON decoder the Iceberg sink
uses, so the same records are bad on every sink and plane.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

import pyarrow as pa

from connectors.config import SinkConfig
from workers.converters import sample_json_objects, schemaless_payloads
from workers.json_decoder import Decoded, JsonDecoder, text_column
from workers.schemas import (
    infer_schema_from_json,
    plain,
    schema_from_avro,
    schema_from_connect,
    schemas_from_registered,
    widened,
)


class RecordRuns:
    """One staged partition's values, decoded run by run (``decode``)."""

    # Whether Kafka Connect's Date, Time and Timestamp in a schema envelope are date, time and timestamp columns
    # (``workers.schemas.schema_from_connect``), or the int and longs JsonConverter writes.
    CONNECT_TIMES: ClassVar[bool] = True

    def __init__(self, config: SinkConfig, value_schemas: Sequence[str] = (), ignore_nulls: bool = True) -> None:
        self.config = config
        # Whether a null value (a tombstone) is skipped and counted, or left to the caller.
        self.ignore_nulls = ignore_nulls
        self.schema: pa.Schema | None = None
        self.decoder: JsonDecoder | None = None
        # The registry's schemas (Avro, JSON Schema) the values were decoded with, as one
        # schema of every field they name: a field's column has the type its schema gives it.
        self.registered: pa.Schema | None = None
        schema_type = config.schema_registry.schema_type if config.schema_registry else "AVRO"
        for typed in schemas_from_registered(value_schemas, schema_type):
            schema = plain(typed)
            self.registered = schema if self.registered is None else widened(self.registered, schema)
        # An Avro value decoded to JSON names every field of its schema version, null or
        # not: its fields tell its version. A JSON value leaves optional fields out.
        self.versions_by_fields = self.registered is not None and schema_type == "AVRO"

    def schema_changing(self) -> None:
        """Called before the next run's wider schema replaces the current one (the files sink closes its files)."""

    # Decoding.

    def settle(self, samples: Sequence[bytes | None]) -> None:
        """The records' schema, as auto-create would give a table: from the converter, or inferred."""
        cfg = self.config
        envelope = cfg.value_converter == "json" and cfg.schemas_enable
        if cfg.value_converter in ("string", "bytearray"):
            self.schema = pa.schema([("value", pa.string() if cfg.value_converter == "string" else pa.binary())])
            return
        if cfg.value_converter == "avro" and cfg.avro_schema and cfg.schema_registry is None:
            schema = plain(schema_from_avro(json.loads(cfg.avro_schema)))
        elif envelope:
            found = sample_json_objects(samples, envelope=True)
            if found:
                schema = plain(schema_from_connect(found[0]["schema"], self.CONNECT_TIMES))
            else:  # (envelopes of no schema, if any: their payloads')
                payloads = schemaless_payloads(samples)
                schema = self._inferred(payloads) if payloads else pa.schema([])
        else:
            objects = sample_json_objects(samples, envelope=False)
            # Avro through a registry: the first value's version's fields, so
            # that the first value of a later version starts a new file. JSON
            # Schema through a registry: every registered field (values leave
            # optional ones out). Plain JSON: the fields of a sample, so that
            # sparse fields do not end a file at every record that brings one.
            # No object among them (each is a bad record): no fields yet; the first object adds its own.
            if objects and self.versions_by_fields:
                schema = self._fields_of(objects[0])
            elif self.registered is not None:
                schema = widened(self.registered, self._inferred(objects)) if objects else self.registered
            else:
                schema = self._inferred(objects) if objects else pa.schema([])
        self._use(schema)

    def _fields_of(self, value: dict[str, Any]) -> pa.Schema:
        """The schema of one decoded value: with a registry, its schema version's fields (an
        Avro value decoded to JSON names every field of its schema, null or not)."""
        if self.registered is None or not self.versions_by_fields:
            return self._inferred([value])
        names = self.registered.names
        known = pa.schema([self.registered.field(k) for k in value if k in names])
        return widened(known, self._inferred([{k: v for k, v in value.items() if k not in names}]))

    @staticmethod
    def _inferred(values: list[dict[str, Any]]) -> pa.Schema:
        return plain(infer_schema_from_json(values))

    def _use(self, schema: pa.Schema) -> None:
        cfg = self.config
        envelope = cfg.value_converter == "json" and cfg.schemas_enable
        pinned = cfg.value_converter == "avro" and cfg.avro_schema is not None and cfg.schema_registry is None
        if self.registered is not None:
            # Which fields come from the values (so a record of a new schema
            # version, with fields of its own, still starts a new file);
            # their types from the registry (an Avro int is an int, not the
            # long a JSON number would infer).
            registered = self.registered
            schema = pa.schema(
                [registered.field(f.name) if f.name in registered.names else f for f in schema],
                metadata=schema.metadata,
            )
        self.schema = schema
        self.decoder = JsonDecoder(schema, evolve=not (envelope or pinned), envelope=envelope)

    def decode(self, values: Sequence[bytes | None], errors: Sequence[str | None]) -> tuple[Decoded, int]:
        """The leading values that share one schema, decoded, and how many they are: a value
        with fields the open files' schema lacks ends the run, and is decoded (with the
        wider schema, into new files) by the next call."""
        if self.decoder is None:
            column, bad = text_column(values, as_string=self.config.value_converter == "string")
            bad += [(i, str(e)) for i, e in enumerate(errors) if e is not None]
            positions = [i for i in range(len(values)) if i not in {b for b, _ in bad}]
            skipped = 0
            if self.ignore_nulls:
                skipped = sum(1 for i in positions if values[i] is None)
                positions = [i for i in positions if values[i] is not None]
            return Decoded(pa.table({"value": column.take(positions)}), positions, sorted(bad), skipped), len(values)
        decoded = self.decoder.decode(values, errors)
        if decoded.records_schema is not None:
            assert self.schema is not None
            candidate = widened(self.schema, plain(decoded.records_schema))
            if candidate != self.schema:
                # Records with a new schema start new files, as the Confluent sinks do:
                # those before the first of them go to the open files first, and the
                # new files take the records up to the next change.
                change = _first_outside(self.schema, values, errors)
                if change is not None and change > 0:
                    return self.decoder.decode(values[:change], errors[:change]), change
                end = len(values)
                if change == 0:
                    fields = self._fields_of(json.loads(values[0] or b"{}"))
                    after = _first_outside(widened(self.schema, fields), values[1:], errors[1:])
                    end = len(values) if after is None else after + 1
                    run = self.decoder.decode(values[:end], errors[:end])
                    if self.versions_by_fields:
                        candidate = widened(self.schema, fields)
                    elif run.records_schema is not None:
                        candidate = widened(self.schema, plain(run.records_schema))
                self.schema_changing()
                self._use(candidate)
                assert self.decoder is not None
                return self.decoder.decode(values[:end], errors[:end]), end
        return decoded, len(values)


def _first_outside(schema: pa.Schema, values: Sequence[bytes | None], errors: Sequence[str | None]) -> int | None:
    """The index of the first value with a field (top-level or nested) that ``schema`` lacks, if any."""

    def fits(value: Any, fields: Any) -> bool:
        names = {f.name: f.type for f in fields}
        return all(
            key in names and (not isinstance(v, dict) or not pa.types.is_struct(names[key]) or fits(v, names[key]))
            for key, v in value.items()
        )

    for i, value in enumerate(values):
        if value is None or errors[i] is not None:
            continue
        try:
            parsed = json.loads(value)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(parsed, dict) and not fits(parsed, schema):
            return i
    return None
