"""Record decoding: key/value converters with Kafka Connect names.

JSON (with or without Connect's schema envelope), string and bytes are
decoded by Spark in the JVM (``from_json``). Avro has no decoder in stock
Spark (spark-avro is a separate artifact), so Avro values are decoded here
with fastavro while staging and handed to Spark as JSON.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import uuid
from collections.abc import Sequence
from typing import Any

import fastavro

_CONFLUENT_MAGIC = 0


class AvroValueDecoder:
    def __init__(self, schema_json: str) -> None:
        self.schema = fastavro.parse_schema(json.loads(schema_json))

    def to_json(self, payload: bytes) -> bytes:
        """Decode one value (raw Avro, or Confluent wire format) to JSON bytes; raises ValueError."""
        attempts = []
        if len(payload) > 5 and payload[0] == _CONFLUENT_MAGIC:
            attempts.append(payload[5:])  # magic byte + 4-byte schema id
        attempts.append(payload)
        last_error: Exception | None = None
        for body in attempts:
            try:
                stream = io.BytesIO(body)
                record = fastavro.schemaless_reader(stream, self.schema, None)
                if stream.tell() != len(body):
                    raise ValueError(f"{len(body) - stream.tell()} trailing bytes after the Avro record")
                return json.dumps(record, default=_json_default, separators=(",", ":")).encode()
            except Exception as exc:  # fastavro raises many types on corrupt input
                last_error = exc
        raise ValueError(f"not a valid Avro record for the configured schema: {last_error}")


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


def sample_json_objects(values: Sequence[bytes | None], envelope: bool) -> list[Any]:
    """Decoded sample values for schema inference (undecodable ones are skipped)."""
    samples = []
    for raw in values:
        if raw is None:
            continue
        try:
            decoded = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            continue
        if envelope:
            if isinstance(decoded, dict) and isinstance(decoded.get("schema"), dict):
                samples.append(decoded)
        elif isinstance(decoded, dict):
            samples.append(decoded)
    return samples
