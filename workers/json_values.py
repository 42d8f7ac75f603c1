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
- structs and lists of these, with booleans, integers, floating-point numbers and strings as the readers take
  them (a number with a fraction into an integer truncated toward zero, a string of digits into a number).

A value that does not convert raises ValueError naming the field and the value: the decoder isolates its
record as bad, with that reason. Dates, timestamps and decimals inside such a column are refused when the
decoder is made: their rules are the readers', not repeated here.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

Convert = Callable[[Any, str], Any]


def python_decoded(arrow_type: pa.DataType) -> bool:
    """Whether a column of this type is converted here: a UUID, binary, fixed, time or map within it."""
    if pa.types.is_struct(arrow_type):
        return any(python_decoded(f.type) for f in arrow_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return python_decoded(arrow_type.value_type)
    return (
        isinstance(arrow_type, pa.UuidType)
        or pa.types.is_binary(arrow_type)
        or pa.types.is_large_binary(arrow_type)
        or pa.types.is_fixed_size_binary(arrow_type)
        or pa.types.is_time(arrow_type)
        or pa.types.is_map(arrow_type)
    )


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
    return array_of([None if v is None else convert(v, field.name) for v in text.to_pylist()], field.type)


def column_of(records: Sequence[Any], field: pa.Field, convert: Convert) -> pa.Array:
    """The column ``field`` of the parsed ``records`` (objects, or None for a record without a payload), each
    value converted by ``convert`` (``converter(field.type)``)."""
    values = []
    for record in records:
        value = record.get(field.name) if isinstance(record, dict) else None
        values.append(None if value is None else convert(value, field.name))
    return array_of(values, field.type)


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
        return _map(converter(arrow_type.key_type), converter(arrow_type.item_type))
    if pa.types.is_struct(arrow_type):
        return _struct([(f.name, converter(f.type)) for f in arrow_type])
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _list(converter(arrow_type.value_type))
    if pa.types.is_boolean(arrow_type):
        return _boolean
    if pa.types.is_integer(arrow_type):
        return _integer(arrow_type)
    if pa.types.is_floating(arrow_type):
        return _floating
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return _string
    raise ValueError(
        f"a column of type {arrow_type} cannot be decoded from JSON inside a UUID, binary, fixed, time or map "
        "column: give the table a column of that type outside it"
    )


def _refused(name: str, value: Any, kind: str, why: str = "") -> ValueError:
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    return ValueError(f"field {name}: {shown} is not {kind}{f' ({why})' if why else ''}")


def _uuid(value: Any, name: str) -> bytes:
    if not isinstance(value, str):
        raise _refused(name, value, "a UUID", "a UUID is its text")
    try:
        return uuid.UUID(value).bytes
    except ValueError as exc:
        raise _refused(name, value, "a UUID") from exc


def _binary(value: Any, name: str) -> bytes:
    if not isinstance(value, str):
        raise _refused(name, value, "base64 text", "binary values are base64 text in JSON")
    try:
        return base64.b64decode(value, validate=True)
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
_LOCAL_TIME = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)(?::([0-5]\d)(?:\.(\d{1,9}))?)?$")
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


def _map(keys: Convert, items: Convert) -> Convert:
    def convert(value: Any, name: str) -> list[tuple[Any, Any]]:
        if not isinstance(value, dict):
            raise _refused(name, value, "an object", "a map is an object")
        return [(keys(k, f"{name} key"), None if v is None else items(v, f"{name}.{k}")) for k, v in value.items()]

    return convert


def _struct(fields: list[tuple[str, Convert]]) -> Convert:
    def convert(value: Any, name: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _refused(name, value, "an object")
        return {
            field: None if (v := value.get(field)) is None else inner(v, f"{name}.{field}") for field, inner in fields
        }

    return convert


def _list(inner: Convert) -> Convert:
    def convert(value: Any, name: str) -> list[Any]:
        if not isinstance(value, list):
            raise _refused(name, value, "an array")
        return [None if v is None else inner(v, f"{name}[{i}]") for i, v in enumerate(value)]

    return convert


def _boolean(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise _refused(name, value, "a boolean")
    return value


_DIGITS = re.compile(r"^[+-]?\d+$")


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
    if isinstance(value, bool):
        raise _refused(name, value, "a number")
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise _refused(name, value, "a number") from exc


def _string(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _refused(name, value, "text")
    return value


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
