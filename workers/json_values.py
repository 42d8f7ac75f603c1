"""Parsed JSON values to the Arrow column types neither JSON reader reads, as Iceberg's sink converts them.

The JSON decoder (``workers.json_decoder``) reads most columns with Arrow's readers. A column whose type has,
anywhere within it, a UUID, binary, fixed, time or map is converted here instead (a UUID, binary or fixed
column from the text the readers read for it, others from each record's parsed JSON), by the rules of the
Iceberg sink's ``RecordConverter``:

- UUID: its text (``UUID.fromString``); written as Iceberg stores it, 16 bytes.
- binary and fixed: base64 text (``Base64.getDecoder``); a fixed value must have the fixed length.
- time: ISO-8601 text (``LocalTime.parse``: ``10:15``, ``10:15:30``, ``10:15:30.123456``), or a number of
  milliseconds since midnight (Kafka Connect's ``Time``).
- map: an object; its keys converted to the key type (text to a number for a numeric key).
- text: a string; a number, boolean, object or array as its text (``converted_text``).
- structs and lists of these, with the other types as RecordConverter takes them: a number with a fraction
  into an integer truncated toward zero, a string of digits into a number; a date from ISO-8601 text or days
  since the epoch, a timestamp from ISO-8601 text or milliseconds since the epoch, a decimal from a number
  or its text, rounded half up to its scale.

A value that does not convert, or no value for a required field, raises ValueError naming the field and the
value: the decoder isolates its record as bad, with that reason.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import math
import re
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from connectors.smt.kafka import java_double, java_double_of, java_parse_double, java_wrap
from connectors.smt.record import java_map_order
from connectors.smt.schemas import Struct

Convert = Callable[[Any, str], Any]


def python_decoded(arrow_type: pa.DataType) -> bool:
    """Whether a column of this type is converted here: a UUID, binary, fixed, time or map within it."""
    if pa.types.is_struct(arrow_type):
        return any(python_decoded(f.type) for f in arrow_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return python_decoded(arrow_type.value_type)
    return read_as_text(arrow_type) or pa.types.is_time(arrow_type) or pa.types.is_map(arrow_type)


def read_as_text(arrow_type: pa.DataType) -> bool:
    """Whether a column of this type holds JSON text only (UUID, binary, fixed), which Arrow's readers read
    as text for it to be converted from (``column_of_text``), with no second parse of the records."""
    return (
        isinstance(arrow_type, pa.UuidType)
        or pa.types.is_binary(arrow_type)
        or pa.types.is_large_binary(arrow_type)
        or pa.types.is_fixed_size_binary(arrow_type)
    )


def column_of_text(text: pa.ChunkedArray | pa.Array, field: pa.Field, convert: Convert) -> pa.Array:
    """The column ``field`` from the text a JSON reader read for it, each value converted by ``convert``."""
    name = field.name
    return array_of(
        [convert(v, name) if v is not None else _present(v, field, convert) for v in text.to_pylist()], field.type
    )


def column_of(records: Sequence[Any], field: pa.Field, convert: Convert) -> pa.Array:
    """The column ``field`` of the parsed ``records`` (objects, or None for a record without a payload), each
    value converted by ``convert`` (``converter(field.type)``)."""
    values = []
    for record in records:
        value = record.get(field.name) if isinstance(record, dict) else None
        values.append(_present(value, field, convert))
    return array_of(values, field.type)


def _present(value: Any, field: pa.Field, convert: Convert, name: str | None = None) -> Any:
    """``value`` converted; None if it is None (absent or null), which a required field refuses."""
    if value is not None:
        return convert(value, name or field.name)
    if not field.nullable:
        raise ValueError(f"field {name or field.name}: no value, and the column is required")
    return None


def array_of(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    """An Arrow array of converted values (UUIDs as their 16 bytes)."""
    if isinstance(arrow_type, pa.UuidType):
        return pa.ExtensionArray.from_storage(arrow_type, pa.array(values, arrow_type.storage_type))
    if _has_uuid(arrow_type):
        # (pa.array cannot build a UUID inside a nested type: build it with the UUIDs' storage, then cast.)
        return pa.array(values, _storage(arrow_type)).cast(arrow_type)
    return pa.array(values, arrow_type)


def converter(arrow_type: pa.DataType) -> Convert:
    """The conversion of one parsed JSON value (not None) to a value of ``arrow_type``; raises ValueError."""
    if isinstance(arrow_type, pa.UuidType):
        return _uuid
    if pa.types.is_fixed_size_binary(arrow_type):
        return _fixed(arrow_type.byte_width)
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return _binary
    if pa.types.is_time(arrow_type):
        return _time(arrow_type)
    if pa.types.is_map(arrow_type):
        return _map(converter(arrow_type.key_type), arrow_type.item_field, converter(arrow_type.item_type))
    if pa.types.is_struct(arrow_type):
        return _struct([(f, converter(f.type)) for f in arrow_type])
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _list(arrow_type.value_field, converter(arrow_type.value_type))
    if pa.types.is_date(arrow_type):
        return _date
    if pa.types.is_timestamp(arrow_type):
        return _timestamp(arrow_type)
    if pa.types.is_decimal(arrow_type):
        return _decimal(arrow_type)
    if pa.types.is_boolean(arrow_type):
        return _boolean
    if pa.types.is_integer(arrow_type):
        return _integer(arrow_type)
    if pa.types.is_floating(arrow_type):
        return _floating
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return _string
    raise ValueError(f"a column of type {arrow_type} cannot be decoded from JSON")


def _refused(name: str, value: Any, kind: str, why: str = "") -> ValueError:
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    return ValueError(f"field {name}: {shown} is not {kind}{f' ({why})' if why else ''}")


# A UUID's text as java.util.UUID.fromString reads it: five groups of hexadecimal digits, each up to its width.
_UUID_TEXT = re.compile(
    r"\A([0-9a-fA-F]{1,8})-([0-9a-fA-F]{1,4})-([0-9a-fA-F]{1,4})-([0-9a-fA-F]{1,4})-([0-9a-fA-F]{1,12})\Z"
)


_CANONICAL_UUID = re.compile(r"\A[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")


def _uuid(value: Any, name: str) -> bytes:
    if not isinstance(value, str):
        raise _refused(name, value, "a UUID", "a UUID is its text")
    if len(value) == 36 and _CANONICAL_UUID.match(value):
        return bytes.fromhex(value.replace("-", ""))
    found = _UUID_TEXT.match(value)
    if found is None:
        raise _refused(name, value, "a UUID")
    a, b, c, d, e = (int(group, 16) for group in found.groups())
    return uuid.UUID(int=(a << 96) | (b << 80) | (c << 64) | (d << 48) | e).bytes


def _binary(value: Any, name: str) -> bytes:
    if not isinstance(value, str):
        raise _refused(name, value, "base64 text", "binary values are base64 text in JSON")
    # (Java's basic decoder, as Iceberg's sink decodes: padding is not required, but a lone last character
    # is refused.)
    padded = value if "=" in value or len(value) % 4 == 1 else value + "=" * (-len(value) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _refused(name, value, "base64 text", str(exc)) from exc


def _fixed(width: int) -> Convert:
    def convert(value: Any, name: str) -> bytes:
        found = _binary(value, name)
        if len(found) != width:
            raise _refused(name, value, f"{width} bytes", f"it is {len(found)}")
        return found

    return convert


# ISO-8601 local time, as java.time.LocalTime.parse reads it: HH:mm, then optionally :ss and up to nine
# digits of a second's fraction.
_LOCAL_TIME = re.compile(r"\A([01][0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9])(?:\.([0-9]{0,9}))?)?\Z")
_DAY_MS = 86_400_000


def _time(arrow_type: pa.DataType) -> Convert:
    unit = arrow_type.unit
    per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[unit]

    def convert(value: Any, name: str) -> int:
        if isinstance(value, bool):
            raise _refused(name, value, "a time")
        if isinstance(value, (int, float)):
            millis = math.trunc(value)
            if not 0 <= millis < _DAY_MS:
                raise _refused(name, value, "a time", "milliseconds since midnight are 0 to 86399999")
            return millis * per_second // 1_000
        if isinstance(value, str) and (found := _LOCAL_TIME.match(value)):
            hours, minutes, seconds, fraction = found.groups()
            nanos = int((fraction or "").ljust(9, "0"))
            whole = (int(hours) * 60 + int(minutes)) * 60 + int(seconds or 0)
            return whole * per_second + nanos * per_second // 1_000_000_000
        raise _refused(name, value, "a time", "ISO-8601 text such as 10:15:30, or milliseconds since midnight")

    return convert


def _map(keys: Convert, item: pa.Field, items: Convert) -> Convert:
    def convert(value: Any, name: str) -> list[tuple[Any, Any]]:
        if isinstance(value, dict):
            entries = list(value.items())
        elif isinstance(value, list) and all(isinstance(e, list) and len(e) == 2 for e in value):
            # (Kafka Connect's JsonConverter writes a map whose keys are not text as [key, value] pairs.)
            entries = [(k, v) for k, v in value]
        else:
            raise _refused(name, value, "an object", "a map is an object")
        converted: dict[Any, Any] = {}
        for k, v in entries:
            if k is None:
                raise _refused(name, value, "a map", "a key is null")
            # (Of keys equal once converted, "1" and "01" into a number, the last wins, as in a Java map.)
            converted[keys(k, f"{name} key")] = _present(v, item, items, f"{name}.{k}")
        return list(converted.items())

    return convert


def _struct(fields: list[tuple[pa.Field, Convert]]) -> Convert:
    def convert(value: Any, name: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _refused(name, value, "an object")
        return {f.name: _present(value.get(f.name), f, inner, f"{name}.{f.name}") for f, inner in fields}

    return convert


def _list(element: pa.Field, inner: Convert) -> Convert:
    def convert(value: Any, name: str) -> list[Any]:
        if not isinstance(value, list):
            raise _refused(name, value, "an array")
        return [_present(v, element, inner, f"{name}[{i}]") for i, v in enumerate(value)]

    return convert


def _boolean(value: Any, name: str) -> bool:
    """A boolean, or text as Java's ``Boolean.parseBoolean`` reads it (``true`` in any case is true, any other
    text false), as the Iceberg sink's ``RecordConverter.convertBoolean`` converts it."""
    if isinstance(value, str):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise _refused(name, value, "a boolean")
    return value


_DIGITS = re.compile(r"\A[+-]?[0-9]+\Z")


def _integer(arrow_type: pa.DataType) -> Convert:
    bits = arrow_type.bit_width
    signed = pa.types.is_signed_integer(arrow_type)
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)

    def convert(value: Any, name: str) -> int:
        if isinstance(value, bool):
            raise _refused(name, value, "an integer")
        if isinstance(value, str) and _DIGITS.match(value):
            found = int(value)
        elif isinstance(value, (int, float)) and math.isfinite(value):
            found = math.trunc(value)
        else:
            raise _refused(name, value, "an integer")
        if not low <= found <= high:
            raise _refused(name, value, f"a {arrow_type}", "out of range")
        return found

    return convert


def _floating(value: Any, name: str) -> float:
    """A number, or text as Java's ``Double.parseDouble`` reads it (spaces around it, ``1e3``, ``NaN``), as the
    Iceberg sink's ``RecordConverter.convertDouble`` converts it."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _refused(name, value, "a number")
    try:
        return java_parse_double(value) if isinstance(value, str) else java_double_of(value)
    except ValueError as exc:
        raise _refused(name, value, "a number") from exc


def _string(value: Any, name: str) -> str:
    return value if type(value) is str else converted_text(value)


def converted_text(value: Any) -> str:
    """What the Iceberg sink's ``RecordConverter.convertString`` writes into a string column for a value of a
    schemaless JSON record, as Kafka Connect's JsonConverter reads it (an integer a long, a number with a
    fraction or an exponent a double, an object a map): text as it is; a boolean, long or double as Java's
    ``toString`` writes it (an integer beyond 64 bits wrapped, as Jackson's ``longValue()`` wraps it); an object
    or an array as compact JSON text, as Jackson writes it (``jackson_text``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return jackson_text(value)
    return _java_scalar(value)


def jackson_text(value: Any) -> str:
    """A parsed JSON value as Jackson writes the Java value JsonConverter makes of it: compact, a long whole, a
    double as ``Double.toString`` (``100.0``, ``1.0E20``), an object's fields in the order Java iterates the
    HashMap JsonConverter reads it into (``java_map_order``)."""
    if isinstance(value, dict):
        order = value if isinstance(value, Struct) else java_map_order(value)
        return "{" + ",".join(f"{_jackson_string(k)}:{jackson_text(value[k])}" for k in order) + "}"
    if isinstance(value, list):
        return "[" + ",".join(jackson_text(v) for v in value) + "]"
    if isinstance(value, str):
        return _jackson_string(value)
    return "null" if value is None else _java_scalar(value)


def _java_scalar(value: bool | int | float | decimal.Decimal) -> str:
    if isinstance(value, decimal.Decimal):
        return str(value)  # (a BigDecimal's toString)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(java_wrap(value, 64))
    # (JsonConverter reads a number with a fraction or an exponent as a BigDecimal, which has no -0.)
    return java_double(value or 0.0)


def _jackson_string(text: str) -> str:
    """A JSON string as Jackson writes it: a quote, a backslash and the control characters JSON has a short
    escape for escaped so, other control characters as a ``u`` escape of four upper-case hexadecimal digits,
    the rest as it is."""
    return '"' + _JACKSON_ESCAPE.sub(_jackson_escaped, text) + '"'


_JACKSON_ESCAPE = re.compile(r'["\\\x00-\x1f]')
_JACKSON_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _jackson_escaped(match: re.Match[str]) -> str:
    char = match.group()
    return _JACKSON_SHORT.get(char) or f"\\u{ord(char):04X}"


_DATE = re.compile(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}\Z")
_DATE_TIME = re.compile(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _date(value: Any, name: str) -> dt.date:
    """A number of days since 1970-01-01, or ISO-8601 text (``LocalDate.parse``)."""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return dt.date(1970, 1, 1) + dt.timedelta(days=math.trunc(value))
        if isinstance(value, str) and _DATE.match(value):
            return dt.date.fromisoformat(value)
    except (ValueError, OverflowError) as exc:
        raise _refused(name, value, "a date", str(exc)) from exc
    raise _refused(name, value, "a date", "ISO-8601 text such as 2024-02-29, or days since 1970-01-01")


def _timestamp(arrow_type: pa.TimestampType) -> Convert:
    """Milliseconds since the epoch, or ISO-8601 text with ``T`` or a space, with or without an offset: one
    without is UTC for a column with a time zone; a column without one keeps the text's own date and time."""
    zoned = arrow_type.tz is not None

    def convert(value: Any, name: str) -> dt.datetime:
        try:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                found = _EPOCH + dt.timedelta(milliseconds=math.trunc(value))
                return found if zoned else found.replace(tzinfo=None)
            if isinstance(value, str) and _DATE_TIME.match(value):
                found = dt.datetime.fromisoformat(value)
                if zoned:
                    return found if found.tzinfo is not None else found.replace(tzinfo=dt.UTC)
                return found.replace(tzinfo=None)
        except (ValueError, OverflowError) as exc:
            raise _refused(name, value, "a timestamp", str(exc)) from exc
        raise _refused(name, value, "a timestamp", "ISO-8601 text, or milliseconds since 1970-01-01T00:00Z")

    return convert


_DECIMAL_TEXT = re.compile(r"\A[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")


def _decimal(arrow_type: pa.Decimal128Type) -> Convert:
    """A number or its text, rounded half up to the column's scale (``BigDecimal.setScale``); one with more
    digits than the column's precision does not fit."""
    quantum = decimal.Decimal(1).scaleb(-arrow_type.scale)

    def convert(value: Any, name: str) -> decimal.Decimal:
        if isinstance(value, bool):
            raise _refused(name, value, "a decimal")
        if isinstance(value, int):
            found = decimal.Decimal(value)
        elif isinstance(value, float) and math.isfinite(value):
            found = decimal.Decimal(int(value)) if value.is_integer() else decimal.Decimal(repr(value))
        elif isinstance(value, str) and _DECIMAL_TEXT.match(value):
            found = decimal.Decimal(value)
        else:
            raise _refused(name, value, "a decimal")
        rounded = found.quantize(quantum, rounding=decimal.ROUND_HALF_UP, context=decimal.Context(prec=100))
        if len(rounded.as_tuple().digits) > arrow_type.precision:
            raise _refused(name, value, f"a {arrow_type}", "too many digits")
        return rounded

    return convert


def _has_uuid(arrow_type: pa.DataType) -> bool:
    if isinstance(arrow_type, pa.UuidType):
        return True
    if pa.types.is_struct(arrow_type):
        return any(_has_uuid(f.type) for f in arrow_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _has_uuid(arrow_type.value_type)
    if pa.types.is_map(arrow_type):
        return _has_uuid(arrow_type.key_type) or _has_uuid(arrow_type.item_type)
    return False


def _storage(arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` with its UUIDs as their storage, 16 bytes."""
    if isinstance(arrow_type, pa.UuidType):
        return arrow_type.storage_type
    if pa.types.is_struct(arrow_type):
        return pa.struct([f.with_type(_storage(f.type)) for f in arrow_type])
    if pa.types.is_large_list(arrow_type):
        return pa.large_list(arrow_type.value_field.with_type(_storage(arrow_type.value_type)))
    if pa.types.is_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(_storage(arrow_type.value_type)))
    if pa.types.is_map(arrow_type):
        return pa.map_(
            arrow_type.key_field.with_type(_storage(arrow_type.key_type)),
            arrow_type.item_field.with_type(_storage(arrow_type.item_type)),
        )
    return arrow_type
