"""A connector's Kafka Connect transforms, applied by its tasks as they stage records.

The participant converts each fetched run of records as Kafka Connect's
converter would (Avro to JSON), then runs the chain (``connectors.smt``) over
each record in its schemaless form, and stages what comes out: so every sink
and both data planes take transformed records, and a replay (after a crash)
transforms the same records the same way. After the chain, values that were
JSON or Avro are plain JSON (``SinkConfig.sink_view``).

- Keys, and values, stay as consumed when no step reads or replaces them (``TransformChain.uses_keys``,
  ``uses_values``), as they are without transforms: not parsed, nor written again. A chain of routers,
  header transforms and filters under a topic's or a header's predicate costs no JSON at all.
- A record a transformation drops (Filter, a Debezium delete) is not staged;
  the partition's staged range still covers it, and it is counted as skipped.
- A record a transformation cannot transform is staged as it came, with the
  reason (the transformation's alias and class, and the field): a bad record,
  which ``errors.tolerance`` decides, and the dead-letter topic receives as it
  was consumed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from connectors.config import SinkConfig
from connectors.smt import ConnectRecord, TransformChain, TransformFailed
from connectors.smt.schemas import Schema, envelope_payload
from workers.json_decoder import NO_PAYLOAD
from workers.json_text import json_text, parse_json
from workers.json_values import jackson_text
from workers.schemas import connect_decimals, is_connect_envelope
from workers.staging import RecordChunk
from workers.writes import Values

# How the reason for a key the key converter cannot read starts (the dead letters name its stage by it).
KEY_NOT_JSON = "the key is not JSON: "


class RecordTransformer:
    """The connector's chain over runs of one partition's records."""

    def __init__(self, config: SinkConfig, chain: TransformChain) -> None:
        self.chain = chain
        self.key_converter = config.key_converter
        self.value_converter = config.value_converter
        # (Avro values reach the chain as the JSON the participant decoded them into.)
        self.json_values = config.value_converter in ("json", "avro")
        # (Avro values come in JsonConverter's envelope of their Connect schema: workers.avro_connect.)
        self.envelope = (config.value_converter == "json" and config.schemas_enable) or config.avro_envelopes
        self.keys_used = chain.uses_keys
        self.values_used = chain.uses_values
        # Each schema of the values, once (by its text), so that the chain knows it again: the schema a step makes
        # of it is worked out once (``TransformChain.apply_with_schema``); and the text of each schema the chain
        # makes, by its id.
        self._schemas: dict[bytes, Schema] = {}
        self._schema_texts: dict[int, tuple[Schema, bytes]] = {}
        # (A Cast to a float type may make NaN or an infinity: written as Jackson's strings for them.)
        self.nonfinite = chain.makes_floats

    def apply(self, chunk: RecordChunk) -> tuple[RecordChunk, int]:
        """The run's records transformed (dropped ones left out), and how many were dropped."""
        out, kept = self._apply(chunk)
        return out, len(chunk) - len(kept)

    def _apply(self, chunk: RecordChunk) -> tuple[RecordChunk, list[int]]:
        """The run's records transformed (dropped ones left out), and the positions in ``chunk`` of those kept."""
        out = RecordChunk(chunk.topic, chunk.partition)
        kept: list[int] = []
        for i, offset in enumerate(chunk.offsets):
            raw_value, raw_key = chunk.values[i], chunk.keys[i]
            headers = chunk.headers[i] if chunk.headers else None
            error = chunk.errors[i]
            if error is None:
                try:
                    done = self._transformed(chunk, i)
                except (TransformFailed, ValueError) as exc:
                    error = str(exc)
                else:
                    if done is None:
                        continue
                    transformed, value = done
                    kept.append(i)
                    out.offsets.append(offset)
                    out.timestamps.append(transformed.timestamp)
                    out.keys.append(
                        _encoded(transformed.key, self.key_converter, self.nonfinite) if self.keys_used else raw_key
                    )
                    out.values.append(value)
                    out.headers.append(
                        [(name, _header(value)) for name, value in transformed.headers] if transformed.headers else None
                    )
                    out.errors.append(None)
                    continue
            # Staged as consumed, with why it could not be transformed (or decoded).
            kept.append(i)
            out.offsets.append(offset)
            out.timestamps.append(chunk.timestamps[i])
            out.keys.append(raw_key)
            out.values.append(raw_value)
            out.headers.append(headers)
            out.errors.append(error)
        return out, kept

    def _transformed(self, chunk: RecordChunk, i: int) -> tuple[ConnectRecord, bytes | None] | None:
        """The chunk's record at ``i`` through the chain, and its value as staged; None when the chain drops it.
        A value in Kafka Connect's schema envelope is transformed with its schema, and staged in the envelope of
        the schema the chain gives it (``connectors.smt.schemas``), as Kafka Connect hands a sink a transformed
        record with its schema."""
        if not (self.envelope and self.values_used):
            transformed = self.chain.apply(self.record(chunk, i))
            if transformed is None:
                return None
            if not self.values_used:
                return transformed, chunk.values[i]
            return transformed, _encoded(transformed.value, self.value_converter, self.nonfinite)
        record, schema = self.record_with_schema(chunk, i)
        done = self.chain.apply_with_schema(record, schema)
        if done is None:
            return None
        transformed, made = done
        if transformed.value is None:
            return transformed, None
        try:
            payload = json_text(envelope_payload(made, transformed.value), self.nonfinite)
            schema_text = self._schema_text(made)
        except ValueError:
            raise
        except Exception as exc:
            # (A schema JsonConverter would refuse, malformed: a bad record, as its DataException is.)
            raise ValueError(f"the value's schema cannot be written: {type(exc).__name__}: {exc}") from None
        return transformed, b'{"schema":' + schema_text + b',"payload":' + payload + b"}"

    def record(self, chunk: RecordChunk, i: int) -> ConnectRecord:
        """The chunk's record at ``i`` as the chain is given it: its key and value read as their converters read
        them, where the chain reads them (ValueError when a converter cannot)."""
        return self.record_with_schema(chunk, i)[0]

    def record_with_schema(self, chunk: RecordChunk, i: int) -> tuple[ConnectRecord, Schema | None]:
        """``record``, and its value's schema: that of its Kafka Connect envelope, None for a schemaless value."""
        headers = chunk.headers[i] if chunk.headers else None
        value, schema = self._value(chunk.values[i]) if self.values_used else (chunk.values[i], None)
        record = ConnectRecord(
            topic=chunk.topic,
            partition=chunk.partition,
            offset=chunk.offsets[i],
            timestamp=chunk.timestamps[i],
            key=self._key(chunk.keys[i]) if self.keys_used else None,
            value=value,
            headers=list(headers or []),
        )
        return record, schema

    def _schema_text(self, schema: Schema | None) -> bytes:
        if schema is None:
            return b"null"
        found = self._schema_texts.get(id(schema))
        if found is None or found[0] is not schema:
            if len(self._schema_texts) >= 1024:
                self._schema_texts.clear()
            found = self._schema_texts[id(schema)] = (schema, json_text(schema))
        return found[1]

    def transform_values(
        self,
        values: Sequence[bytes | None],
        errors: Sequence[str | None],
        keys: Sequence[bytes | None] | None = None,
        offsets: Sequence[int] | None = None,
    ) -> tuple[list[int], list[bytes | None], list[str | None]]:
        """``transform_chunk`` for values alone (with their keys and offsets, for a chain that reads them), for a
        Debezium transformation a decoder applies (``ColumnarChain.unwrap``) to the values it cannot read in
        columns: the records are given no topic, timestamp or header, which it does not read."""
        assert keys is not None or not self.keys_used, "the chain reads keys"
        n = len(values)
        chunk = RecordChunk(
            "",
            0,
            list(offsets) if offsets is not None else list(range(n)),
            [None] * n,
            list(keys) if keys is not None else [None] * n,
            list(values),
            [None] * n,
            list(errors),
        )
        return self.transform_chunk(chunk)

    def transform_chunk(self, chunk: RecordChunk) -> tuple[list[int], list[bytes | None], list[str | None]]:
        """The records' values through the chain, as ``apply`` takes them: the positions of those it keeps, their
        values, and their errors (why a value could not be transformed, or its own). For a chain that writes
        nothing but values, which the sink's decoders apply (``SinkConfig.columnar_chain``)."""
        out, kept = self._apply(chunk)
        return kept, out.values, out.errors

    def staged_keys(self, keys: Sequence[bytes | None]) -> list[bytes | None]:
        """Keys as the stage writes them when no step replaces them: read by the key converter and written
        again (a JSON key without its schema envelope), if the chain reads keys; else as consumed. For keys a
        decoder applying the chain (which leaves keys as consumed) has read without an error."""
        if not self.keys_used:
            return list(keys)
        return [_encoded(self._key(raw), self.key_converter, self.nonfinite) for raw in keys]

    def _key(self, raw: bytes | None) -> Any:
        if raw is None or self.key_converter == "bytearray":
            return raw
        if self.key_converter == "json":
            try:
                return _payload(connect_json(raw))
            except ValueError:
                raise ValueError(f"{KEY_NOT_JSON}{shown(raw)}") from None
        return raw.decode("utf-8", errors="replace")

    def _value(self, raw: bytes | None) -> tuple[Any, Schema | None]:
        """A value as the chain is given it, and its schema (that of its envelope)."""
        if raw is None or self.value_converter == "bytearray":
            return raw, None
        if not self.json_values:
            return raw.decode("utf-8", errors="replace"), None
        try:
            decoded = connect_json(raw)
        except ValueError:
            raise ValueError(f"the value is not JSON: {shown(raw)}") from None
        if not self.envelope:
            return decoded, None
        if not is_connect_envelope(decoded):
            # (As Kafka Connect's JsonConverter refuses it, and the sinks' decoder when there are no transforms.)
            raise ValueError(NO_PAYLOAD)
        schema = decoded["schema"]
        if not isinstance(schema, dict):
            return decoded["payload"], None  # (``"schema": null``: a schemaless value)
        text = json_text(schema)
        known = self._schemas.get(text)
        if known is None:
            if len(self._schemas) >= 256:
                self._schemas.clear()
            known = self._schemas[text] = schema
        # (Connect's Decimals, base64 in the payload, as the decimals they are: the chain sees their text.)
        return connect_decimals(known, decoded["payload"])[0], known


def sink_values(config: SinkConfig, chunks: Iterable[RecordChunk]) -> Iterable[Values]:
    """Staged records' values and their errors, chunk by chunk, as the sink's records are: through the chain its
    decoders apply (``SinkConfig.decoder_transforms``), the values it drops left out; as staged otherwise.
    For what is read of records apart from their decoding: the samples a table is created from."""
    if config.decoder_transforms is None:
        return ((chunk.values, chunk.errors) for chunk in chunks)
    transformer = RecordTransformer(config, config.decoder_transforms)
    return (transformer.transform_chunk(chunk)[1:] for chunk in chunks)


def connect_json(raw: bytes) -> Any:
    """JSON text as Kafka's JsonConverter gives it to the transformations: a number with a fraction or an exponent
    is read as a BigDecimal, which has no negative zero, so ``-0.0`` is ``0.0``."""
    decoded = parse_json(raw)
    # (A double's negative zero is written -0. or -0e: "-0" alone is an integer, and "2024-01-02" holds "-0".)
    negative_zero = b"-0." in raw or b"-0e" in raw or b"-0E" in raw
    return _without_negative_zero(decoded) if negative_zero else decoded


def _without_negative_zero(value: Any) -> Any:
    if isinstance(value, float):
        return value or 0.0
    if isinstance(value, dict):
        return {name: _without_negative_zero(field) for name, field in value.items()}
    if isinstance(value, list):
        return [_without_negative_zero(item) for item in value]
    return value


def _payload(decoded: Any) -> Any:
    """A JSON key in Kafka Connect's schema envelope as its ``payload`` (the chain runs schemaless); any other
    JSON key as it is."""
    if is_connect_envelope(decoded):
        # (Connect's Decimals in it as their text, as in a value's payload: connect_decimals.)
        return connect_decimals(decoded["schema"], decoded["payload"])[0]
    return decoded


def shown(raw: bytes, limit: int = 80) -> str:
    """The start of a value as text, for a reason a person reads (not Python's ``b'...'``)."""
    return repr(raw[:limit].decode("utf-8", "backslashreplace")) + ("..." if len(raw) > limit else "")


def _encoded(value: Any, converter: str, nonfinite: bool = False) -> bytes | None:
    """A transformed key or value as the sinks take it: JSON text, or the string or bytes themselves
    (``nonfinite``: it may hold NaN or infinities, ``json_text``)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if converter == "string" and isinstance(value, str):
        return value.encode()
    return json_text(value, nonfinite)


def _header(value: Any) -> bytes | None:
    """A header's value as Kafka Connect's header converter (``SimpleHeaderConverter``) writes it: a string as
    UTF-8, other values as the JSON Jackson writes (a double as Java's text: ``1.0E20``, ``NaN``)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return jackson_text(value).encode()
