"""Avro records as Kafka Connect's AvroConverter hands them to a connector's transforms: with the Connect schema
of their Avro schema (Confluent's ``AvroData.toConnectSchema``), in JsonConverter's envelope.

A connector with transforms over Avro values has each value decoded (fastavro) and staged in the envelope of
that schema, its payload as JsonConverter writes it (a decimal the base64 of its unscaled integer, a date its
days, a timestamp its milliseconds), so the transforms run with the schema (``connectors.smt.schemas``) and the
tables the sink creates of what they leave are typed from it, as they are without transforms.

The Connect schema of an Avro schema, as AvroData makes it:

- a record a struct named by its full name; ``["null", T]`` an optional ``T`` (its default null);
- ``int`` an int32 (an int8 or int16 where its ``connect.type`` says so), ``long`` an int64, ``float`` and
  ``double``, ``boolean``, ``string``; ``bytes`` and ``fixed`` bytes; an enum a string;
- ``decimal`` Connect's Decimal (its scale, and its precision as ``connect.decimal.precision``); ``date``,
  ``time-millis`` and ``timestamp-millis`` Connect's Date, Time and Timestamp; ``time-micros`` and
  ``timestamp-micros`` an int64 of microseconds; ``uuid`` a string;
- a ``connect.name`` (Debezium's ``io.debezium.time.Date``, say) names the schema; ``connect.parameters`` are
  its parameters;
- an array an array, a map a map of string keys.

A union of other branches (AvroData's ``io.confluent.connect.avro.Union`` struct) has no schema here: such a
value is transformed without one, as before, and the table's columns come from the transformed records.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import uuid
from collections.abc import Callable
from typing import Any

from connectors.smt.schemas import DATE, DECIMAL, TIME, TIMESTAMP, Schema, unscaled_base64
from workers.json_text import json_text

# A value of an Avro type as fastavro decodes it, to its JsonConverter form.
Convert = Callable[[Any], Any]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_PRIMITIVES = {"int": "int32", "long": "int64", "float": "float", "double": "double", "boolean": "boolean"}


class Unschemed(Exception):
    """An Avro schema with no Connect schema here (a union of other branches than null and one type)."""


class AvroConnect:
    """The Connect schema of one parsed Avro schema (fastavro's ``parse_schema``), and its records in
    JsonConverter's envelope."""

    def __init__(self, parsed: Any) -> None:
        self._named: dict[str, Any] = dict(parsed.get("__named_schemas", {})) if isinstance(parsed, dict) else {}
        self.schema: Schema | None
        self._convert: Convert
        try:
            self.schema, self._convert = self._type(parsed)
        except (Unschemed, RecursionError):
            self.schema, self._convert = None, _as_json
        self._schema_text = json_text(self.schema)

    def envelope(self, record: Any) -> bytes:
        """The decoded record in JsonConverter's envelope of the Connect schema (``"schema": null`` for none)."""
        return (
            b'{"schema":' + self._schema_text + b',"payload":' + json_text(self._convert(record), nonfinite=True) + b"}"
        )

    def _type(self, avro: Any) -> tuple[Schema, Convert]:
        if isinstance(avro, list):
            branches = [branch for branch in avro if branch != "null"]
            if len(branches) != 1 or len(avro) > 2:
                raise Unschemed(f"Avro union {avro}")
            branch, convert_branch = self._type(branches[0])
            return ({**branch, "optional": True} if len(avro) == 2 else branch), convert_branch
        if isinstance(avro, str):
            if avro in self._named:
                return self._type(self._named[avro])
            return self._type({"type": avro})
        kind = avro.get("type")
        if isinstance(kind, dict | list) or (isinstance(kind, str) and kind in self._named):
            return self._type(kind)
        logical = avro.get("logicalType")
        schema: Schema
        convert: Convert = _same
        if logical == "decimal" and kind in ("bytes", "fixed"):
            scale = int(avro.get("scale", 0))
            schema = {"type": "bytes", "optional": False, "name": DECIMAL, "version": 1}
            schema["parameters"] = {"scale": str(scale)}
            if avro.get("precision") is not None:
                schema["parameters"]["connect.decimal.precision"] = str(avro["precision"])
            convert = _decimal(scale)
        elif logical == "date" and kind == "int":
            schema, convert = {"type": "int32", "optional": False, "name": DATE, "version": 1}, _days
        elif logical == "time-millis" and kind == "int":
            schema, convert = {"type": "int32", "optional": False, "name": TIME, "version": 1}, _time_millis
        elif logical == "timestamp-millis" and kind == "long":
            schema, convert = {"type": "int64", "optional": False, "name": TIMESTAMP, "version": 1}, _millis
        elif logical == "timestamp-micros" and kind == "long":
            schema, convert = {"type": "int64", "optional": False}, _micros
        elif logical == "time-micros" and kind == "long":
            schema, convert = {"type": "int64", "optional": False}, _time_micros
        elif kind == "record":
            members = [(f["name"], *self._type(f["type"])) for f in avro.get("fields", ())]
            schema = {
                "type": "struct",
                "optional": False,
                "name": avro.get("name"),
                "fields": [{**member, "field": name} for name, member, _ in members],
            }
            converts = [(name, convert) for name, _, convert in members if convert is not _same]
            convert = _record(converts) if converts else _same
        elif kind == "array":
            items, convert_item = self._type(avro["items"])
            schema = {"type": "array", "optional": False, "items": items}
            convert = _same if convert_item is _same else _array(convert_item)
        elif kind == "map":
            values, convert_value = self._type(avro["values"])
            schema = {"type": "map", "optional": False, "keys": {"type": "string", "optional": False}}
            schema["values"] = values
            convert = _same if convert_value is _same else _map(convert_value)
        elif kind in ("bytes", "fixed"):
            schema, convert = {"type": "bytes", "optional": False}, _base64
        elif kind in ("string", "enum"):
            schema, convert = {"type": "string", "optional": False}, _text
        elif kind == "int" and avro.get("connect.type") in ("int8", "int16"):
            schema = {"type": avro["connect.type"], "optional": False}
        elif kind in _PRIMITIVES:
            schema = {"type": _PRIMITIVES[kind], "optional": False}
        else:
            raise Unschemed(f"Avro type {kind!r}")
        if avro.get("connect.name") and "name" not in schema:
            schema["name"] = avro["connect.name"]
        if isinstance(avro.get("connect.parameters"), dict) and "parameters" not in schema:
            schema["parameters"] = dict(avro["connect.parameters"])
        return schema, convert


def _same(value: Any) -> Any:
    return value


def _as_json(value: Any) -> Any:
    """A value without a schema, as ``workers.converters`` writes Avro's as JSON."""
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_json(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    return value


def _record(converts: list[tuple[str, Convert]]) -> Convert:
    def convert(value: Any) -> Any:
        if isinstance(value, dict):
            for name, inner in converts:
                if value.get(name) is not None:
                    value[name] = inner(value[name])
        return value

    return convert


def _array(inner: Convert) -> Convert:
    return lambda value: [None if item is None else inner(item) for item in value]


def _map(inner: Convert) -> Convert:
    return lambda value: {k: None if v is None else inner(v) for k, v in value.items()}


def _decimal(scale: int) -> Convert:
    def convert(value: Any) -> Any:
        if not isinstance(value, decimal.Decimal):
            return value
        return unscaled_base64(int(value.scaleb(scale)))

    return convert


def _days(value: Any) -> Any:
    return (value - dt.date(1970, 1, 1)).days if isinstance(value, dt.date) else value


def _millis(value: Any) -> Any:
    return _micros(value) // 1000 if isinstance(value, dt.datetime) else value


def _micros(value: Any) -> Any:
    if not isinstance(value, dt.datetime):
        return value
    delta = (value if value.tzinfo else value.replace(tzinfo=dt.UTC)) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _time_micros(value: Any) -> Any:
    if not isinstance(value, dt.time):
        return value
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def _time_millis(value: Any) -> Any:
    return _time_micros(value) // 1000 if isinstance(value, dt.time) else value


def _base64(value: Any) -> Any:
    return base64.b64encode(value).decode() if isinstance(value, bytes) else value


def _text(value: Any) -> Any:
    return str(value) if isinstance(value, uuid.UUID) else value
