"""The records' schema from the converter, or inferred from the values, as every sink types its columns.

Schemas are Arrow schemas, the form both data planes decode and write with,
and every column is optional. Each field carries an id in its
``PARQUET:field_id`` metadata, numbered as Iceberg numbers a new table's
fields, so a sink whose format has field ids (Iceberg) takes them as they
are: ``pyiceberg.io.pyarrow.pyarrow_to_schema`` reads them. Arrow's writers
leave field metadata out of data files unless asked (``plain`` strips it
for those that would write it).

The sources, as the connectors we replace read them:
- Kafka Connect's schema envelope (``schemas.enable=true``);
- an Avro record schema (the config's, or a Schema Registry's);
- a JSON Schema of objects (a Schema Registry's, Confluent's JsonSchemaConverter);
- plain JSON values: types widened to fit every sample (a long and a double
  make a double; anything else mixed makes text).
"""

from __future__ import annotations

import binascii
import contextlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from workers.json_text import json_text, parse_json

log = logging.getLogger(__name__)

FIELD_ID = b"PARQUET:field_id"


class _Ids:
    """Field ids in the order they are handed out (Iceberg's numbering of a new schema)."""

    def __init__(self) -> None:
        self.next = 0

    def __call__(self) -> int:
        self.next += 1
        return self.next


def field(name: str, arrow_type: pa.DataType, field_id: int, nullable: bool = True) -> pa.Field:
    """An optional (``nullable``) field with its id."""
    return pa.field(name, arrow_type, nullable, metadata={FIELD_ID: str(field_id).encode()})


def list_of(element: pa.DataType, element_id: int) -> pa.DataType:
    return pa.list_(field("element", element, element_id))


def map_of(key: pa.DataType, key_id: int, value: pa.DataType, value_id: int) -> pa.DataType:
    return pa.map_(field("key", key, key_id, nullable=False), field("value", value, value_id))


def plain(schema: pa.Schema) -> pa.Schema:
    """``schema`` without field metadata (the ids), at every depth."""
    return pa.schema([_plain_field(f) for f in schema])


def _plain_field(f: pa.Field) -> pa.Field:
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct([_plain_field(c) for c in t])
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        element = _plain_field(t.value_field)
        t = pa.list_(element) if pa.types.is_list(t) else pa.large_list(element)
    elif pa.types.is_map(t):
        t = pa.map_(_plain_field(t.key_field), _plain_field(t.item_field))
    return f.with_type(t).remove_metadata()


# --- plain JSON ----------------------------------------------------------------


def _json_type(values: list[Any], ids: _Ids) -> pa.DataType | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if all(isinstance(v, bool) for v in present):
        return pa.bool_()
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.int64()
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pa.float64()
    if all(isinstance(v, dict) for v in present):
        return pa.struct(_fields_from_samples(present, ids))
    if all(isinstance(v, list) for v in present):
        element = _json_type([e for v in present for e in v], ids) or pa.string()
        return list_of(element, ids())
    return pa.string()


def _fields_from_samples(samples: list[dict[str, Any]], ids: _Ids) -> list[pa.Field]:
    names: list[str] = []
    for sample in samples:
        names.extend(k for k in sample if k not in names)
    fields = []
    for name in names:
        field_id = ids()
        fields.append(field(name, _json_type([s.get(name) for s in samples], ids) or pa.string(), field_id))
    return fields


def infer_schema_from_json(samples: Iterable[Any]) -> pa.Schema:
    """Column types from sample JSON values: all columns optional, types widened to fit every sample."""
    objects = [s for s in samples if isinstance(s, dict)]
    if not objects:
        raise ValueError("cannot infer a table schema: no JSON object among the first records")
    return pa.schema(_fields_from_samples(objects, _Ids()))


def new_fields_of(values: Sequence[Any], struct_type: pa.StructType) -> list[pa.Field]:
    """The fields the JSON objects among ``values`` have and ``struct_type`` lacks, at every depth of its
    structs (a new field inside a struct field, in a struct of only the new ones), typed as
    ``infer_schema_from_json`` types them; a field null in every value is left out, as in
    ``inferred_from_parsed``."""
    objects = [v for v in values if isinstance(v, dict)]
    known = {f.name: f.type for f in struct_type}
    names = list(dict.fromkeys(k for o in objects for k in o))
    ids = _Ids()
    found = []
    for name in names:
        column = [o.get(name) for o in objects]
        have = known.get(name)
        if have is None:
            typed = _json_type(column, ids)
            if typed is not None:
                found.append(field(name, typed, ids()))
        elif pa.types.is_struct(have) and (inner := new_fields_of(column, have)):
            found.append(field(name, pa.struct(inner), ids()))
    return found


def widened(schema: pa.Schema, additions: pa.Schema, *, promote: bool = False) -> pa.Schema:
    """``schema`` with the fields of ``additions`` it lacks appended (into structs for nested ones). A field
    both have keeps ``schema``'s type; with ``promote``, the type Arrow's JSON reader gives the values of both
    read at once, where there is one: a field null in one takes the other's type, and an integer and a double
    make a double (a number and text keep ``schema``'s)."""
    fields = list(schema)
    names = {f.name: i for i, f in enumerate(fields)}
    for extra in additions:
        at = names.get(extra.name)
        if at is None:
            fields.append(extra)
        elif pa.types.is_struct(fields[at].type) and pa.types.is_struct(extra.type):
            inner = widened(pa.schema(list(fields[at].type)), pa.schema(list(extra.type)), promote=promote)
            fields[at] = fields[at].with_type(pa.struct(list(inner)))
        elif promote:
            with contextlib.suppress(pa.ArrowInvalid, pa.ArrowTypeError):
                both = pa.schema([fields[at]]), pa.schema([extra])
                fields[at] = pa.unify_schemas(list(both), promote_options="permissive").field(0)
    return pa.schema(fields)


def inferred_from_parsed(parsed: pa.Schema) -> pa.Schema:
    """What Arrow's JSON reader typed (inferring the fields it was not given), as
    ``infer_schema_from_json`` would type those values; fields null in every record
    so far are left out."""
    return pa.schema(_parsed_fields(list(parsed), _Ids()))


def _parsed_type(arrow_type: pa.DataType, ids: _Ids) -> pa.DataType | None:
    if pa.types.is_boolean(arrow_type):
        return pa.bool_()
    if pa.types.is_integer(arrow_type):
        return pa.int64()
    if pa.types.is_floating(arrow_type):
        return pa.float64()
    if pa.types.is_string(arrow_type) or pa.types.is_timestamp(arrow_type):
        # (Arrow infers timestamps from ISO 8601 text; the column gets text.)
        return pa.string()
    if pa.types.is_struct(arrow_type):
        fields = _parsed_fields(list(arrow_type), ids)
        return pa.struct(fields) if fields else None
    if pa.types.is_list(arrow_type):
        element = _parsed_type(arrow_type.value_type, ids)
        return list_of(element, ids()) if element is not None else None
    return None


def _parsed_fields(fields: list[pa.Field], ids: _Ids) -> list[pa.Field]:
    typed = []
    for f in fields:
        field_type = _parsed_type(f.type, ids)
        if field_type is not None:
            typed.append(field(f.name, field_type, ids()))
    return typed


# --- Kafka Connect's schema envelope ------------------------------------------------

_CONNECT_TYPES: dict[str, pa.DataType] = {
    # (Iceberg and Spark have no 8- or 16-bit integers: Kafka Connect's int8 and int16 widen to 32 bits.)
    "int8": pa.int32(),
    "int16": pa.int32(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float": pa.float32(),
    "float32": pa.float32(),
    "double": pa.float64(),
    "float64": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "bytes": pa.binary(),
}


# Kafka Connect's logical types (org.apache.kafka.connect.data.*), as its schema names them: the column types the
# Iceberg sink's SchemaUtils gives them (a decimal of precision 38 and the schema's scale, a time, a timestamp with
# a zone), and the values JsonConverter writes for them (a Decimal's unscaled integer in base64, a Date's days, a
# Time's and a Timestamp's milliseconds).
CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_CONNECT_LOGICAL: dict[tuple[str, str], pa.DataType] = {
    ("int32", "org.apache.kafka.connect.data.Date"): pa.date32(),
    ("int32", "org.apache.kafka.connect.data.Time"): pa.time64("us"),
    ("int64", "org.apache.kafka.connect.data.Timestamp"): pa.timestamp("us", tz="UTC"),
}


def _decimal_scale(schema: Mapping[str, Any]) -> int | None:
    """A Decimal's scale, its schema's ``scale`` parameter (text: JsonConverter refuses parameters that are not);
    None without one, where JsonConverter fails each record that has a value of it."""
    parameters = schema.get("parameters")
    scale = parameters.get("scale") if isinstance(parameters, Mapping) else None
    try:
        return int(scale) if isinstance(scale, str) else None
    except ValueError:
        return None


def _connect_type(schema: Mapping[str, Any], ids: _Ids, times: bool = True) -> pa.DataType:
    kind = schema.get("type")
    name = schema.get("name")
    if kind == "bytes" and name == CONNECT_DECIMAL:
        scale = _decimal_scale(schema)
        if scale is None:
            return pa.binary()  # (no scale: each of its values is a bad record, connect_decimals)
        # (A decimal column's scale is 0 to 38: the decimal's text beyond them, connect_decimals.)
        return pa.decimal128(38, scale) if 0 <= scale <= 38 else pa.string()
    if times and (str(kind), str(name)) in _CONNECT_LOGICAL:
        return _CONNECT_LOGICAL[(str(kind), str(name))]
    if kind == "struct":
        fields = []
        for f in schema.get("fields", []):
            field_id = ids()
            fields.append(field(f["field"], _connect_type(f, ids, times), field_id))
        return pa.struct(fields)
    if kind == "array":
        element_id = ids()
        return list_of(_connect_type(schema["items"], ids, times), element_id)
    if kind == "map":
        key_id, value_id = ids(), ids()
        return map_of(
            _connect_type(schema["keys"], ids, times), key_id, _connect_type(schema["values"], ids, times), value_id
        )
    if kind in _CONNECT_TYPES:
        return _CONNECT_TYPES[str(kind)]
    raise ValueError(f"Kafka Connect schema type {kind!r} is not supported")


# Where a Connect schema has Decimals: a Decimal's scale (("unscaled",) for one whose schema gives none); a struct's
# fields that lead to one, by name; an array's items ("items", plan), or a map's keys and values ("map", plan,
# plan), that are or hold one.
_Plan = int | dict[str, "_Plan"] | tuple[Any, ...]


def _decimals_plan(schema: Any) -> _Plan | None:
    """Where ``schema`` has Decimals (``_Plan``); None where it has none."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind == "struct":
        fields: dict[str, _Plan] = {}
        for f in schema.get("fields") or ():
            name = f.get("field") if isinstance(f, dict) else None
            if isinstance(name, str) and (plan := _decimals_plan(f)) is not None:
                fields[name] = plan
        return fields or None
    if kind == "array":
        items = _decimals_plan(schema.get("items"))
        return ("items", items) if items is not None else None
    if kind == "map":
        keys, values = _decimals_plan(schema.get("keys")), _decimals_plan(schema.get("values"))
        return ("map", keys, values) if keys is not None or values is not None else None
    if kind == "bytes" and schema.get("name") == CONNECT_DECIMAL:
        scale = _decimal_scale(schema)
        return scale if scale is not None else ("unscaled",)
    return None


# The plans of the schemas met last (a topic's records repeat theirs): told apart by equality, in C.
_PLANS: list[tuple[dict[str, Any], _Plan | None]] = []


def _plan_for(schema: dict[str, Any]) -> _Plan | None:
    for known, plan in _PLANS:
        if known is schema or known == schema:  # (the stage gives the same object for the same schema)
            return plan
    plan = _decimals_plan(schema)
    _PLANS.insert(0, (schema, plan))
    del _PLANS[8:]
    return plan


def _without(plan: _Plan, kept: frozenset[tuple[str, ...]], at: tuple[str, ...] = ()) -> _Plan | None:
    """``plan`` without the Decimals at the struct paths ``kept`` (one whose schema has no scale stays: its values
    are bad records wherever they go, as JsonConverter fails them)."""
    if at in kept and isinstance(plan, int):
        return None
    if not isinstance(plan, dict):
        return plan
    fields: dict[str, _Plan] = {}
    for name, inner in plan.items():
        pruned = _without(inner, kept, (*at, name))
        if pruned is not None:
            fields[name] = pruned
    return fields or None


def connect_decimals(schema: Any, value: Any, kept: frozenset[tuple[str, ...]] = frozenset()) -> tuple[Any, bool]:
    """``value``, of the Kafka Connect ``schema``, with each Decimal in it (JsonConverter's default
    ``decimal.format=BASE64``: the unscaled two's-complement integer, big-endian, in base64, its scale in the
    schema) as the decimal's text, as Avro's decimals are handed on (``workers.converters``): JsonConverter reads
    it as the BigDecimal it is, where read as plain JSON it would be its base64. A Decimal that is a JSON number
    already (``decimal.format=NUMERIC``) stays one. ValueError, naming the field, for one that is neither. Also
    whether any was changed; structs are changed in place. ``kept``: the struct paths of Decimals left as they are
    (those of binary columns, which tables created before Decimals were read so have: their bytes, in base64)."""
    plan = _plan_for(schema) if isinstance(schema, dict) else None
    if plan is not None and kept:
        plan = _without(plan, kept)
    if plan is None or value is None:
        return value, False
    changed = [False]

    def apply(plan: _Plan, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(plan, int):
            if not isinstance(value, str):
                return value
            try:
                unscaled = binascii.a2b_base64(value, strict_mode=True)
            except ValueError:
                unscaled = b""
            if not unscaled:
                raise _NotDecimal(value, f"is no {CONNECT_DECIMAL}, the base64 of an unscaled integer")
            changed[0] = True
            return _decimal_text(int.from_bytes(unscaled, "big", signed=True), plan)
        if isinstance(plan, dict):
            if isinstance(value, dict):
                for name, inner in plan.items():
                    if name in value:
                        try:
                            value[name] = apply(inner, value[name])
                        except _NotDecimal as exc:
                            exc.path.insert(0, f".{name}")
                            raise
            return value
        if plan[0] == "unscaled":
            raise _NotDecimal(value, "is of a Decimal whose schema has no scale parameter")
        if plan[0] == "items":
            return [apply(plan[1], item) for item in value] if isinstance(value, list) else value
        keys, values = plan[1], plan[2]
        if isinstance(value, dict):
            return value if values is None else {k: apply(values, v) for k, v in value.items()}
        if isinstance(value, list):
            # (A map whose keys are not text: JsonConverter writes it as [key, value] pairs.)
            return [
                [
                    pair[0] if keys is None else apply(keys, pair[0]),
                    pair[1] if values is None else apply(values, pair[1]),
                ]
                if isinstance(pair, list) and len(pair) == 2
                else pair
                for pair in value
            ]
        return value

    try:
        return apply(plan, value), changed[0]
    except _NotDecimal as exc:
        where = "".join(exc.path).lstrip(".") or "value"
        raise ValueError(f"field {where}: {str(exc.value)[:40]!r} {exc.why}") from None


def _decimal_text(unscaled: int, scale: int) -> str:
    """The plain text of ``unscaled`` * 10^-``scale``: its digits, the point before the last ``scale`` of them
    (or, for a negative scale, as many zeros after them)."""
    digits = str(abs(unscaled))
    sign = "-" if unscaled < 0 else ""
    if scale <= 0:
        return sign + digits + ("0" * -scale if unscaled else "")
    digits = digits.rjust(scale + 1, "0")
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"


class _NotDecimal(Exception):
    """A Decimal's text that is no base64 of an integer, with the path of struct fields to it (filled on the way
    out, so that the walk builds no path where all is well)."""

    def __init__(self, value: Any, why: str) -> None:
        super().__init__(value)
        self.value = value
        self.why = why
        self.path: list[str] = []


_DECIMAL_NAME = CONNECT_DECIMAL.encode()


def binary_paths(schema: pa.Schema) -> frozenset[tuple[str, ...]]:
    """The paths, through structs, of ``schema``'s binary columns (``connect_decimals``'s ``kept``)."""
    found: set[tuple[str, ...]] = set()

    def walk(fields: Iterable[pa.Field], at: tuple[str, ...]) -> None:
        for f in fields:
            if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type):
                found.add((*at, f.name))
            elif pa.types.is_struct(f.type):
                walk(list(f.type), (*at, f.name))

    walk(schema, ())
    return frozenset(found)


def is_connect_envelope(value: Any) -> bool:
    """Whether a parsed JSON value is Kafka Connect's envelope (JsonConverter's with ``schemas.enable=true``): an
    object with a ``schema`` (null for a schemaless value) and a ``payload``."""
    return isinstance(value, dict) and "schema" in value and "payload" in value


def envelope_decimals_as_text(value: bytes, kept: frozenset[tuple[str, ...]] = frozenset()) -> bytes:
    """A value in Kafka Connect's JSON envelope with its payload's Decimals as their text (``connect_decimals``,
    those at the paths ``kept`` left as they are); as it is when it has none in base64 (its text untouched: a
    ``decimal.format=NUMERIC`` number keeps all its digits), or is no envelope, which the decoder refuses with
    why."""
    if _DECIMAL_NAME not in value:
        return value
    try:
        parsed = parse_json(value)
    except ValueError:
        return value
    if not (is_connect_envelope(parsed) and isinstance(parsed["schema"], Mapping)):
        return value
    parsed["payload"], changed = connect_decimals(parsed["schema"], parsed["payload"], kept)
    return json_text(parsed) if changed else value


def schema_from_connect(connect_schema: Mapping[str, Any], times: bool = True) -> pa.Schema:
    """The columns of Kafka Connect's JSON envelope schema of a struct. ``times``: Connect's Date, Time and Timestamp
    are date, time and timestamp columns (else the int and longs JsonConverter writes, as the Hudi sink keeps them:
    ``sinks.hudi.writer``)."""
    if connect_schema.get("type") != "struct":
        raise ValueError("the record schema in the JSON envelope must be a struct")
    return pa.schema(list(_connect_type(connect_schema, _Ids(), times)))


# --- Avro ------------------------------------------------------------------------

_AVRO_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
    "enum": pa.string(),
    "fixed": pa.binary(),
}
_AVRO_LOGICAL: dict[str, pa.DataType] = {
    "timestamp-millis": pa.timestamp("us", tz="UTC"),
    "timestamp-micros": pa.timestamp("us", tz="UTC"),
    "local-timestamp-millis": pa.timestamp("us"),
    "local-timestamp-micros": pa.timestamp("us"),
    "date": pa.date32(),
    "uuid": pa.string(),
}


def _avro_type(schema: Any, ids: _Ids) -> pa.DataType:
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise ValueError(f"Avro union {schema} is not supported; only [null, T]")
        return _avro_type(branches[0], ids)
    if isinstance(schema, str):
        if schema not in _AVRO_PRIMITIVES:
            raise ValueError(f"Avro type {schema!r} is not supported")
        return _AVRO_PRIMITIVES[schema]
    logical = schema.get("logicalType")
    if logical == "decimal":
        return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0)))
    if logical in _AVRO_LOGICAL:
        return _AVRO_LOGICAL[logical]
    kind = schema.get("type")
    if kind == "record":
        fields = []
        for f in schema["fields"]:
            field_id = ids()
            fields.append(field(f["name"], _avro_type(f["type"], ids), field_id))
        return pa.struct(fields)
    if kind == "array":
        element_id = ids()
        return list_of(_avro_type(schema["items"], ids), element_id)
    if kind == "map":
        key_id, value_id = ids(), ids()
        return map_of(pa.string(), key_id, _avro_type(schema["values"], ids), value_id)
    return _avro_type(kind, ids)


def schema_from_avro(avro_schema: Mapping[str, Any]) -> pa.Schema:
    """The columns of an Avro record schema."""
    struct = _avro_type(dict(avro_schema), _Ids())
    if not pa.types.is_struct(struct):
        raise ValueError("the value schema must be an Avro record")
    return pa.schema(list(struct))


# --- JSON Schema -------------------------------------------------------------------

# JSON Schema's numbers with the Kafka Connect type Confluent's JsonSchemaConverter annotates them with.
_JSON_INTEGERS: dict[str | None, pa.DataType] = {"int8": pa.int32(), "int16": pa.int32(), "int32": pa.int32()}
_JSON_NUMBERS: dict[str | None, pa.DataType] = {"float32": pa.float32()}


def _json_schema_type(node: Any, ids: _Ids, where: str) -> pa.DataType:
    if not isinstance(node, Mapping):
        raise ValueError(f"{where}: not a JSON Schema")
    for keyword in ("oneOf", "anyOf"):
        if keyword in node:
            # A nullable field ([null, T]): every column is optional anyway.
            branches = [b for b in node[keyword] if not (isinstance(b, Mapping) and b.get("type") == "null")]
            if len(branches) != 1:
                raise ValueError(f"{where}: {keyword} of several types is not supported; only null and one type")
            return _json_schema_type(branches[0], ids, where)
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            raise ValueError(f"{where}: a type of {kind} is not supported; only null and one type")
        kind = kinds[0]
    connect = node.get("connect.type")
    if kind == "object":
        properties = node.get("properties")
        if isinstance(properties, Mapping) and properties:
            fields = []
            for name, sub in properties.items():
                field_id = ids()
                fields.append(field(name, _json_schema_type(sub, ids, f"{where}.{name}"), field_id))
            return pa.struct(fields)
        values = node.get("additionalProperties")
        if isinstance(values, Mapping):
            key_id, value_id = ids(), ids()
            return map_of(pa.string(), key_id, _json_schema_type(values, ids, f"{where}.*"), value_id)
        raise ValueError(f"{where}: an object without properties has no columns")
    if kind == "array":
        element_id = ids()
        return list_of(_json_schema_type(node.get("items", {}), ids, f"{where}[]"), element_id)
    if kind == "integer":
        return _JSON_INTEGERS.get(connect, pa.int64())
    if kind == "number":
        return _JSON_NUMBERS.get(connect, pa.float64())
    if kind == "boolean":
        return pa.bool_()
    if kind == "string":
        # Formats (date-time...) stay text: values are not parsed as times here.
        return pa.string()
    raise ValueError(f"{where}: JSON Schema type {kind!r} is not supported")


def schema_from_json_schema(json_schema: Mapping[str, Any]) -> pa.Schema | None:
    """The columns of a JSON Schema of objects; None when it names no properties
    (``{"type": "object"}``): the values' own fields then type the columns, as for plain JSON."""
    if json_schema.get("type") == "object" and not json_schema.get("properties"):
        return None
    struct = _json_schema_type(json_schema, _Ids(), "$")
    if not pa.types.is_struct(struct):
        raise ValueError("the value schema must be a JSON Schema of objects")
    return pa.schema(list(struct))


# Registered JSON Schemas with no column types (warned about once a process).
_UNTYPED_JSON_SCHEMAS: set[str] = set()


def schemas_from_registered(texts: Iterable[str], schema_type: str) -> list[pa.Schema]:
    """The columns of the schemas (AVRO or JSON) a Schema Registry holds. An Avro schema
    that has no columns is an error; a JSON Schema without properties, or with what has
    no column type, is left out (its values type the columns, as plain JSON's do)."""
    schemas = []
    for text in texts:
        document = json.loads(text)
        if schema_type == "AVRO":
            schemas.append(schema_from_avro(document))
            continue
        try:
            schema = schema_from_json_schema(document)
        except ValueError as exc:
            if text not in _UNTYPED_JSON_SCHEMAS:  # (once: callers ask at every commit)
                _UNTYPED_JSON_SCHEMAS.add(text)
                log.warning("a registered JSON Schema is not used, its values type the columns: %s", exc)
            continue
        if schema is not None:
            schemas.append(schema)
    return schemas
