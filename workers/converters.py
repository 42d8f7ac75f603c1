"""Record decoding: key/value converters with Kafka Connect names.

JSON (with or without Connect's schema envelope), string and bytes are
decoded by the data plane. Avro has no decoder in stock Spark (spark-avro is
a separate artifact), so Avro values are decoded here with fastavro while
staging and handed on as JSON: with the config's schema, or with the one a
Schema Registry holds under each value's schema id.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import fastavro

from workers.avro_connect import AvroConnect
from workers.schema_registry import SchemaRegistry, UnknownSchema
from workers.schemas import is_connect_envelope

if TYPE_CHECKING:
    from connectors.config import SinkConfig

_CONFLUENT_MAGIC = 0


class AvroValueDecoder:
    """Avro values whose schema is the config's (``value.converter.avro.schema``)."""

    def __init__(self, schema_json: str) -> None:
        self.schema = fastavro.parse_schema(json.loads(schema_json))
        self._connect: AvroConnect | None = None

    def to_json(self, payload: bytes) -> bytes:
        """Decode one value (raw Avro, or Confluent wire format) to JSON bytes; raises ValueError."""
        return _avro_json(self._record(payload))

    def to_envelope(self, payload: bytes) -> bytes:
        """One value in JsonConverter's envelope of its Connect schema (``workers.avro_connect``), as Kafka
        Connect's AvroConverter hands it to a connector's transforms; raises ValueError."""
        if self._connect is None:
            self._connect = AvroConnect(self.schema)
        return self._connect.envelope(self._record(payload))

    def _record(self, payload: bytes) -> Any:
        attempts = []
        if len(payload) > 5 and payload[0] == _CONFLUENT_MAGIC:
            attempts.append(payload[5:])  # magic byte + 4-byte schema id
        attempts.append(payload)
        last_error: Exception | None = None
        for body in attempts:
            try:
                return _avro_record(body, self.schema)
            except Exception as exc:  # fastavro raises many types on corrupt input
                last_error = exc
        raise ValueError(f"not a valid Avro record for the configured schema: {last_error}")

    def schemas(self) -> list[str]:
        return []


class RegistryAvroDecoder:
    """Avro values in the Confluent wire format, each decoded with the schema registered under its id.

    It remembers the schemas it decoded with: their fields are the ones the
    tables need (``schemas``), so a new schema version's fields become
    columns, typed from the schema, before Spark decodes records of it.
    """

    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry
        self._parsed: dict[int, Any] = {}
        self._seen: dict[int, str] = {}
        self._connect: dict[int, AvroConnect] = {}
        self._lock = threading.Lock()

    def to_json(self, payload: bytes) -> bytes:
        """One value to JSON bytes; raises ValueError for a value that cannot be decoded,
        RegistryUnavailable (not a ValueError) when the registry cannot be reached."""
        return _avro_json(self._record(payload)[1])

    def to_envelope(self, payload: bytes) -> bytes:
        """One value in JsonConverter's envelope of the Connect schema of its registered schema
        (``workers.avro_connect``), as Kafka Connect's AvroConverter hands it to a connector's transforms."""
        schema_id, record = self._record(payload)
        connect = self._connect.get(schema_id)
        if connect is None:
            connect = self._connect[schema_id] = AvroConnect(self._parsed[schema_id])
        return connect.envelope(record)

    def _record(self, payload: bytes) -> tuple[int, Any]:
        if len(payload) < 5 or payload[0] != _CONFLUENT_MAGIC:
            raise ValueError("not in the Confluent wire format (magic byte 0, then a 4-byte schema id)")
        schema_id = int.from_bytes(payload[1:5], "big")
        parsed = self._parsed.get(schema_id)
        if parsed is None:
            text = self.registry.schema(schema_id)
            try:
                parsed = fastavro.parse_schema(json.loads(text))
            except Exception as exc:
                raise UnknownSchema(f"schema id {schema_id} is not a valid Avro schema: {exc}") from None
            with self._lock:
                self._parsed[schema_id] = parsed
                self._seen[schema_id] = text
        try:
            return schema_id, _avro_record(payload[5:], parsed)
        except Exception as exc:  # fastavro raises many types on corrupt input
            raise ValueError(f"not a valid Avro record for schema id {schema_id}: {exc}") from None

    def schemas(self) -> list[str]:
        """The schemas values were decoded with so far, oldest id first."""
        with self._lock:
            return [self._seen[i] for i in sorted(self._seen)]


class RegistryJsonDecoder:
    """JSON values in the Confluent wire format (JsonSchemaConverter): the header is checked against
    the registry (a JSON Schema under that id) and taken off; the JSON is the data plane's to decode."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry
        self._seen: dict[int, str] = {}
        self._lock = threading.Lock()

    def to_json(self, payload: bytes) -> bytes:
        if len(payload) < 5 or payload[0] != _CONFLUENT_MAGIC:
            raise ValueError("not in the Confluent wire format (magic byte 0, then a 4-byte schema id)")
        schema_id = int.from_bytes(payload[1:5], "big")
        if schema_id not in self._seen:
            text = self.registry.schema(schema_id)
            with self._lock:
                self._seen[schema_id] = text
        return payload[5:]

    def schemas(self) -> list[str]:
        """The JSON Schemas values were decoded with so far, oldest id first (they type the columns)."""
        with self._lock:
            return [self._seen[i] for i in sorted(self._seen)]


ValueDecoder = AvroValueDecoder | RegistryAvroDecoder | RegistryJsonDecoder

_registry_decoders: dict[str, RegistryAvroDecoder | RegistryJsonDecoder] = {}
_registry_lock = threading.Lock()


def value_decoder(config: SinkConfig) -> ValueDecoder | None:
    """The decoder of a connector's values that are not JSON to begin with (Avro), if any.

    With a registry it is one per connector config and process, shared by
    the task that decodes and the writer that shapes the tables from the
    schemas decoded with (both run in the task's process).
    """
    if not config.decodes_values:
        return None
    registry = config.schema_registry
    if registry is None:
        return AvroValueDecoder(config.avro_schema or "{}")
    key = json.dumps(config.raw, sort_keys=True)
    with _registry_lock:
        decoder = _registry_decoders.get(key)
        if decoder is None:
            client = SchemaRegistry(registry)
            decoder = RegistryAvroDecoder(client) if registry.schema_type == "AVRO" else RegistryJsonDecoder(client)
            _registry_decoders[key] = decoder
        return decoder


def _avro_record(body: bytes, schema: Any) -> Any:
    stream = io.BytesIO(body)
    record = fastavro.schemaless_reader(stream, schema, None)
    if stream.tell() != len(body):
        raise ValueError(f"{len(body) - stream.tell()} trailing bytes after the Avro record")
    return record


def _avro_json(record: Any) -> bytes:
    return json.dumps(record, default=_json_default, separators=(",", ":")).encode()


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def _parsed(values: Sequence[bytes | None]) -> Iterator[Any]:
    """The values that are JSON, parsed (the others skipped)."""
    for raw in values:
        if raw is None:
            continue
        try:
            yield json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            continue


def schemaless_payloads(values: Sequence[bytes | None]) -> list[Any]:
    """The payloads, objects, of the values in Kafka Connect's envelope whose schema is null (JsonConverter's
    schemaless value: a transformed Avro value whose union has no Connect schema, say): what a table is created
    from when no value carries a schema."""
    return [
        decoded["payload"]
        for decoded in _parsed(values)
        if is_connect_envelope(decoded) and decoded["schema"] is None and isinstance(decoded["payload"], dict)
    ]


def sample_json_objects(values: Sequence[bytes | None], envelope: bool) -> list[Any]:
    """Decoded sample values for schema inference (undecodable ones are skipped)."""
    if envelope:
        return [d for d in _parsed(values) if is_connect_envelope(d) and isinstance(d["schema"], dict)]
    return [d for d in _parsed(values) if isinstance(d, dict)]
