"""Kafka Connect value schemas through a chain: what each transformation makes of a record's schema.

Kafka Connect's converters give a record with a schema (JsonConverter with ``schemas.enable=true``: the
envelope's ``schema``) to its transformations with that schema, and each transformation gives the record it
makes a schema of its own (``applyWithSchema``): InsertField adds an optional ``int64`` field named
``org.apache.kafka.connect.data.Timestamp`` for a timestamp, Cast changes a field's type, Debezium's
ExtractNewRecordState makes the row's schema of the event's. A sink connector creates its tables from that
schema, so a Decimal stays a decimal, a Date a date, an ``int32`` an int.

Here the records are transformed schemaless (``connectors.smt``), and each transformation says what schema its
record has after it (``Transformation.value_schema``), as Kafka's ``applyWithSchema`` builds it: the tasks'
stage then writes the transformed record in JsonConverter's envelope, its payload in that schema's form
(``envelope_payload``), and the sinks read it as they read a record that came so. Schemas are dicts in the
JSON form JsonConverter writes (``asJsonSchema``): ``type``, ``optional``, ``name``, ``version``, ``doc``,
``parameters``, ``default``, and a struct's ``fields`` (each with its name as ``field``), an array's ``items``,
a map's ``keys`` and ``values``. ``tests/test_transforms_against_kafka.py`` compares them with the schemas
Kafka's, Debezium's and the Iceberg sink's own transformations make.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from connectors.smt import timestamps
from connectors.smt.record import DataException

Schema = dict[str, Any]

DECIMAL = "org.apache.kafka.connect.data.Decimal"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
_DAY_MS = 86_400_000

# The keys of a schema that ``SchemaUtil.copySchemaBasics`` copies to the schema a transformation builds.
_BASICS = ("name", "version", "doc", "parameters")


def json_type(kind: str) -> str:
    """A Connect type (``Schema.Type``, as a Cast spec names it) as JsonConverter's schema names it: ``float32``
    and ``float64`` are ``float`` and ``double``."""
    return {"float32": "float", "float64": "double"}.get(kind, kind)


def primitive(kind: str, optional: bool = False) -> Schema:
    """``Schema.STRING_SCHEMA`` and its kind (``OPTIONAL_STRING_SCHEMA`` with ``optional``)."""
    return {"type": kind, "optional": optional}


def logical(name: str, optional: bool = False) -> Schema:
    """Connect's Timestamp, Date or Time schema (``Timestamp.SCHEMA``, or its optional builder's)."""
    kind = "int64" if name == TIMESTAMP else "int32"
    return {"type": kind, "optional": optional, "name": name, "version": 1}


def is_optional(schema: dict[str, Any]) -> bool:
    return bool(schema.get("optional", False))


def basics(source: dict[str, Any], kind: str) -> Schema:
    """``SchemaUtil.copySchemaBasics(source, new SchemaBuilder(kind))``: ``source``'s name, version, doc and
    parameters on a new, required schema of ``kind`` (neither its optionality nor its default)."""
    built: Schema = {"type": kind, "optional": False}
    built.update((key, source[key]) for key in _BASICS if source.get(key) is not None)
    return built


def fields(schema: dict[str, Any]) -> list[tuple[str, Schema]]:
    """A struct schema's fields: each name, and its schema (without its name)."""
    return [(f["field"], {k: v for k, v in f.items() if k != "field"}) for f in schema.get("fields") or ()]


def field(schema: dict[str, Any], name: str) -> Schema | None:
    """The schema of the struct's field ``name``; None when it has none."""
    for f in schema.get("fields") or ():
        if f["field"] == name:
            return {k: v for k, v in f.items() if k != "field"}
    return None


def struct(source: dict[str, Any] | None, members: Iterable[tuple[str, dict[str, Any]]]) -> Schema:
    """A struct schema of ``members`` (name, schema), ``source``'s basics copied (``copySchemaBasics``). A name
    twice is Kafka's ``SchemaBuilderException``: the record cannot be transformed."""
    built = basics(source, "struct") if source is not None else {"type": "struct", "optional": False}
    out: list[Schema] = []
    seen: set[str] = set()
    for name, schema in members:
        if name in seen:
            raise DataException(f"Cannot create field because of field name duplication {name}")
        seen.add(name)
        out.append({**schema, "field": name})
    built["fields"] = out
    return built


def with_optional(schema: dict[str, Any], optional: bool) -> Schema:
    return {**schema, "optional": optional}


_JAVA_CLASSES = {
    "int8": "java.lang.Byte",
    "int16": "java.lang.Short",
    "int32": "java.lang.Integer",
    "int64": "java.lang.Long",
    "float": "java.lang.Float",
    "double": "java.lang.Double",
    "boolean": "java.lang.Boolean",
    "string": "java.lang.String",
    "bytes": "[B",
    "struct": "org.apache.kafka.connect.data.Struct",
    "array": "java.util.ArrayList",
    "map": "java.util.HashMap",
}


def java_class(schema: Schema) -> str:
    """The Java class of a value of ``schema`` in Kafka Connect (a Decimal a BigDecimal, a Date, Time or Timestamp
    a ``java.util.Date``)."""
    name = schema.get("name")
    if name == DECIMAL:
        return "java.math.BigDecimal"
    if name in (DATE, TIME, TIMESTAMP):
        return "java.util.Date"
    return _JAVA_CLASSES.get(str(schema.get("type")), "?")


def require_fits(target: Schema, source: Schema, name: str) -> None:
    """Kafka's ``ConnectSchema.validateValue``: a value of ``source`` put in the field ``name`` of ``target``'s
    schema must be of its Java class (DataException, naming the field, otherwise)."""
    found = java_class(source)
    if found != java_class(target):
        kind = str(target.get("type")).upper().replace("FLOAT", "FLOAT32").replace("DOUBLE", "FLOAT64")
        raise DataException(f'Invalid Java object for schema with type {kind}: class {found} for field: "{name}"')


def require_struct(schema: Schema | None, purpose: str) -> Schema:
    """Kafka's ``Requirements.requireSchema`` and a struct's: the schema a transformation of a struct needs."""
    if schema is None:
        raise DataException(f"Schema required for [{purpose}]")
    if schema.get("type") != "struct":
        raise DataException(f"Only Struct objects supported for [{purpose}], found: {schema.get('type')}")
    return schema


class Struct(dict[str, Any]):
    """A struct's value whose fields are in its schema's order: written in that order (a schemaless map is
    written in the order Java iterates it: ``workers.json_values.jackson_text``)."""


def header_value(schema: Schema, value: Any) -> Any:
    """A field's value of ``schema`` as Kafka Connect's header converter writes it: a Date, Time or Timestamp as
    the date's text (``Values.dateFormatFor``), a Decimal (its text here) as the number it is, a struct's fields
    in its schema's order. (A date inside a struct stays its number: Kafka's converter writes its text bare
    there, which is no JSON.)"""
    if value is None:
        return None
    name = schema.get("name")
    if name in (DATE, TIME, TIMESTAMP) and isinstance(value, int) and not isinstance(value, bool):
        return timestamps.connect_date_text(value * _DAY_MS if name == DATE else value)
    return _header_value(schema, value)


def _header_value(schema: Schema, value: Any) -> Any:
    if value is None:
        return None
    if schema.get("name") == DECIMAL and isinstance(value, str):
        try:
            return Decimal(value)
        except InvalidOperation:
            return value
    if schema.get("type") == "struct" and isinstance(value, dict):
        return Struct((name, _header_value(member, value.get(name))) for name, member in fields(schema))
    if schema.get("type") == "array" and isinstance(value, list) and schema.get("items"):
        return [_header_value(schema["items"], item) for item in value]
    return value


# --- A payload in its schema's form ------------------------------------------------


def envelope_payload(schema: dict[str, Any] | None, value: Any) -> Any:
    """A transformed value as JsonConverter writes the payload of ``schema``: a Decimal (its text here, as the
    chain holds it) as the base64 of its unscaled integer at the schema's scale; a Date, Time or Timestamp that
    a TimestampConverter made ISO 8601 text as its days or milliseconds; a struct's fields those of its schema
    (a field the schema lacks is not written, as a Struct has none, and one it has is, null if absent).
    ValueError, naming the field, for a Decimal or a date it cannot be. Structs are changed in place. (What the
    stage writes is read by the sink's decoder, which judges each value against its column.)"""
    if schema is None or value is None:
        return value  # (a null value: a tombstone, whatever its schema)
    try:
        return _payload(_plan(schema), value)
    except _Unfit as exc:
        where = ".".join(reversed(exc.path)) or "value"
        raise ValueError(f"field {where}: {exc.reason}") from None


class _Unfit(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []


# What writing a payload of a schema takes (``_compile``): None, nothing; else a struct's field names and the
# plans of those of its fields that take something, an array's items' or a map's values' plan, or a Decimal's
# or a date's schema.
_Plan = tuple[Any, ...] | None
_PLANS: dict[int, tuple[Schema, _Plan]] = {}


def _plan(schema: Schema) -> _Plan:
    """``schema``'s plan, compiled once per schema object (the chain gives the same object for the same schema:
    ``TransformChain.apply_with_schema``)."""
    found = _PLANS.get(id(schema))
    if found is None or found[0] is not schema:
        if len(_PLANS) >= 1024:
            _PLANS.clear()
        found = _PLANS[id(schema)] = (schema, _compile(schema))
    return found[1]


def _compile(schema: Schema) -> _Plan:
    kind, name = schema.get("type"), schema.get("name")
    if kind == "struct":
        members = [(f["field"], _compile(f)) for f in schema.get("fields") or ()]
        names = tuple(n for n, _ in members)
        return ("struct", names, frozenset(names), tuple((n, p) for n, p in members if p is not None))
    if kind == "array" and schema.get("items"):
        items = _compile(schema["items"])
        return None if items is None else ("array", items)
    if kind == "map" and schema.get("values"):
        values = _compile(schema["values"])
        return None if values is None else ("map", values)
    if name == DECIMAL:
        return ("decimal", schema)
    if name in (DATE, TIME, TIMESTAMP):
        return ("date", name)
    return None


def _payload(plan: _Plan, value: Any) -> Any:
    if plan is None or value is None:
        return value
    kind = plan[0]
    if kind == "struct":
        if not isinstance(value, dict):
            raise _Unfit(f"{str(value)[:40]!r} is not a struct")
        _, names, name_set, inner = plan
        if value.keys() != name_set:
            value = {name: value.get(name) for name in names}
        for name, member in inner:
            try:
                value[name] = _payload(member, value[name])
            except _Unfit as exc:
                exc.path.append(name)
                raise
        return value
    if kind == "array":
        return [_payload(plan[1], item) for item in value] if isinstance(value, list) else value
    if kind == "map":
        return {k: _payload(plan[1], v) for k, v in value.items()} if isinstance(value, dict) else value
    if kind == "decimal":
        if isinstance(value, str | int | float | Decimal) and not isinstance(value, bool):
            return _decimal_base64(plan[1], value)
        return value
    return _iso_as_number(plan[1], value) if isinstance(value, str) else value


def _decimal_base64(schema: dict[str, Any], value: str | int | float | Decimal) -> str:
    """JsonConverter's BASE64 form of a Decimal (``Decimal.fromLogical``): the unscaled integer at the schema's
    scale, big-endian two's complement."""
    parameters = schema.get("parameters") or {}
    try:
        scale = int(parameters["scale"])
        number = Decimal(str(value)) if not isinstance(value, Decimal) else value
        unscaled = number.scaleb(scale)
        if unscaled != unscaled.to_integral_value():
            raise _Unfit(f"{value!r} has more digits after its point than the Decimal's scale {scale}")
    except (KeyError, ValueError, InvalidOperation):
        raise _Unfit(f"{str(value)[:40]!r} is no Decimal of scale {parameters.get('scale')!r}") from None
    return unscaled_base64(int(unscaled))


def unscaled_base64(unscaled: int) -> str:
    """A Decimal's unscaled integer as JsonConverter writes it: big-endian two's complement, in as few bytes as
    Java's ``BigInteger.toByteArray``, in base64."""
    size = (unscaled + (unscaled < 0)).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def _iso_as_number(name: str, text: str) -> int:
    """A Date's days, a Time's or a Timestamp's milliseconds, from the ISO 8601 text a TimestampConverter made."""
    try:
        millis = timestamps.parse_iso(text)
    except ValueError:
        raise _Unfit(f"{text[:40]!r} is not the ISO 8601 text of a {name.rsplit('.', 1)[-1]}") from None
    if name == DATE:
        return millis // _DAY_MS
    return millis % _DAY_MS if name == TIME else millis
