"""Kafka Connect's single message transforms and predicates (connectors.smt), case by case against the
originals' own behaviour for schemaless records.

The cases are the schemaless ones of the upstream tests (Apache Kafka's
``connect/transforms`` tests, Debezium's ``ExtractNewRecordStateTest``, the
Iceberg sink's ``TestDebeziumTransform`` and ``TestCopyValue``), and what their
sources do where the tests say nothing: the same inputs, the same outputs and
the same failures. A JSON object is a dict, an array a list, a Java Long a
Python int and a Double a float; Java types without a JSON form (Date,
BigDecimal, Byte) are left out, except where a comment says how they are
represented here. Configs go through ``parse_chain``, as a connector's do.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from connectors.smt import ConnectRecord, TransformChain, TransformFailed, parse_chain, timestamps
from connectors.smt.kafka import field_path_v2

K = "org.apache.kafka.connect.transforms."
DEBEZIUM = "io.debezium.transforms.ExtractNewRecordState"
ICEBERG = "org.apache.iceberg.connect.transforms."


def config_of(class_name: str, props: dict[str, str] | None = None, alias: str = "t") -> dict[str, str]:
    """A connector's transform keys for one transformation (Kafka's own named by their simple name)."""
    name = class_name if "." in class_name else K + class_name
    return {
        "transforms": alias,
        f"transforms.{alias}.type": name,
        **{f"transforms.{alias}.{key}": value for key, value in (props or {}).items()},
    }


def build(class_name: str, props: dict[str, str] | None = None) -> TransformChain:
    chain, errors = parse_chain(config_of(class_name, props))
    assert errors == {}
    assert chain is not None
    return chain


def errors_of(class_name: str, props: dict[str, str] | None = None) -> dict[str, list[str]]:
    """The config's problems, by the transformation's own key (without ``transforms.t.``)."""
    chain, errors = parse_chain(config_of(class_name, props))
    assert chain is None
    return {key.removeprefix("transforms.t."): messages for key, messages in errors.items()}


def record(
    value: Any = None,
    key: Any = None,
    *,
    topic: str = "test",
    partition: int = 0,
    offset: int = 0,
    timestamp: int | None = None,
    headers: list[tuple[str, Any]] | None = None,
) -> ConnectRecord:
    return ConnectRecord(topic, partition, offset, timestamp, key, value, list(headers or []))


def apply(chain: TransformChain, rec: ConnectRecord) -> ConnectRecord:
    out = chain.apply(rec)
    assert out is not None
    return out


def fails(chain: TransformChain, rec: ConnectRecord, *fragments: str) -> str:
    """The chain's failure on ``rec``: a bad record, its reason holding each of ``fragments``."""
    with pytest.raises(TransformFailed) as failure:
        chain.apply(rec)
    message = str(failure.value)
    for fragment in fragments:
        assert fragment in message
    return message


def typed(value: Any) -> Any:
    """``value`` with the type of each scalar in it, so that ``True`` is not ``1`` and ``42`` not ``42.0``."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


# --- InsertField ---------------------------------------------------------------------------------------------

INSERT_ALL = {
    "topic.field": "topic_field!",
    "partition.field": "partition_field",
    "timestamp.field": "timestamp_field?",
    "static.field": "instance_id",
    "static.value": "my-instance-id",
}


def test_insert_field_schemaless_adds_topic_partition_timestamp_and_static_value() -> None:
    out = apply(build("InsertField$Value", INSERT_ALL), record({"magic": 42}, timestamp=123))
    # The ! and ? suffixes (required, optional) only shape a schema: the names are without them.
    assert out.value == {
        "magic": 42,
        "topic_field": "test",
        "partition_field": 0,
        "timestamp_field": 123,  # epoch milliseconds: Kafka's schemaless InsertField inserts the Long
        "instance_id": "my-instance-id",
    }


def test_insert_field_adds_the_sink_records_offset() -> None:
    out = apply(build("InsertField$Value", {"offset.field": "off"}), record({"a": 1}, offset=789))
    assert out.value == {"a": 1, "off": 789}


def test_insert_field_leaves_a_tombstone_value_unchanged() -> None:
    out = apply(build("InsertField$Value", INSERT_ALL), record(None))
    assert out.value is None


def test_insert_field_key_fills_the_key_of_a_tombstone_but_no_timestamp_field_without_a_timestamp() -> None:
    out = apply(build("InsertField$Key", INSERT_ALL), record(None, {"magic": 42}, timestamp=None))
    assert out.key == {"magic": 42, "topic_field": "test", "partition_field": 0, "instance_id": "my-instance-id"}
    assert "timestamp_field" not in out.key
    assert out.value is None


def test_insert_field_key_leaves_a_null_key_unchanged() -> None:
    rec = record({"magic": 42}, None)
    out = apply(build("InsertField$Key", INSERT_ALL), rec)
    assert out is rec
    assert (out.key, out.value) == (None, {"magic": 42})


def test_insert_field_copies_the_map_it_inserts_into() -> None:
    original = {"magic": 42}
    out = apply(build("InsertField$Value", {"topic.field": "t"}), record(original))
    assert original == {"magic": 42}
    assert out.value == {"magic": 42, "t": "test"}


def test_insert_field_needs_a_map() -> None:
    fails(
        build("InsertField$Value", {"topic.field": "topic_field"}),
        record(42),
        "transforms.t (InsertField$Value): ",
        "Only Map objects supported in absence of schema for [field insertion], found: java.lang.Long",
    )


def test_insert_field_config_needs_a_field_to_insert() -> None:
    assert "No field insertion configured" in errors_of("InsertField$Value")["topic.field"][0]


def test_insert_field_config_needs_the_static_value_of_a_static_field() -> None:
    errors = errors_of("InsertField$Value", {"static.field": "instance_id"})
    assert errors["static.value"] == ["No value specified for static field: instance_id"]


def test_insert_field_config_replace_null_with_default_is_a_boolean() -> None:
    build("InsertField$Value", {"topic.field": "t", "replace.null.with.default": "false"})
    errors = errors_of("InsertField$Value", {"topic.field": "t", "replace.null.with.default": "sometimes"})
    assert "Expected value to be either true or false" in errors["replace.null.with.default"][0]


# --- ReplaceField --------------------------------------------------------------------------------------------


def test_replace_field_schemaless_excludes_and_renames() -> None:
    chain = build("ReplaceField$Value", {"exclude": "dont", "renames": "abc:xyz,foo:bar"})
    out = apply(chain, record({"dont": "whatever", "abc": 42, "foo": True, "etc": "etc"}))
    assert out.value == {"xyz": 42, "bar": True, "etc": "etc"}


def test_replace_field_include_keeps_only_those_fields() -> None:
    chain = build("ReplaceField$Value", {"include": "abc,foo", "renames": "abc:xyz,foo:bar"})
    out = apply(chain, record({"dont": "whatever", "abc": 42, "foo": True, "etc": "etc"}))
    assert out.value == {"xyz": 42, "bar": True}


def test_replace_field_exclude_takes_precedence_over_include() -> None:
    out = apply(build("ReplaceField$Value", {"include": "a,b", "exclude": "b"}), record({"a": 1, "b": 2, "c": 3}))
    assert out.value == {"a": 1}


def test_replace_field_leaves_a_tombstone_unchanged() -> None:
    chain = build("ReplaceField$Value", {"include": "abc,foo", "renames": "abc:xyz,foo:bar"})
    assert apply(chain, record(None)).value is None


def test_replace_field_key_works_on_the_key() -> None:
    out = apply(build("ReplaceField$Key", {"renames": "id:key_id"}), record({"v": 1}, {"id": 7}))
    assert (out.key, out.value) == ({"key_id": 7}, {"v": 1})


def test_replace_field_needs_a_map() -> None:
    fails(build("ReplaceField$Value", {"exclude": "a"}), record("text"), "[field replacement]", "java.lang.String")


def test_replace_field_takes_the_names_kafka_took_before_4_0() -> None:
    chain = build("ReplaceField$Value", {"whitelist": "a,b", "blacklist": "b"})
    assert apply(chain, record({"a": 1, "b": 2, "c": 3})).value == {"a": 1}


@pytest.mark.parametrize(
    ("props", "refused"),
    [
        ({"include": "a", "whitelist": "b"}, "whitelist"),
        ({"include": "", "whitelist": "b"}, "whitelist"),
        ({"exclude": "a", "blacklist": "b"}, "blacklist"),
    ],
)
def test_replace_field_refuses_a_deprecated_name_beside_its_new_one(props: dict[str, str], refused: str) -> None:
    # (Kafka 3 took the new name and ignored the old: refused here, as one of them would be ignored.)
    errors = errors_of("ReplaceField$Value", props)
    assert list(errors) == [refused]
    assert "set too" in errors[refused][0] and "remove one" in errors[refused][0]


@pytest.mark.parametrize("mapping", ["abc", "a:b:c", "a:", "a::"])
def test_replace_field_config_refuses_a_rename_that_is_not_one_pair(mapping: str) -> None:
    # As Java's String.split(":"), trailing empty parts dropped: "a:" is one part.
    assert errors_of("ReplaceField$Value", {"renames": mapping})["renames"] == [f"Invalid rename mapping: {mapping}"]


@pytest.mark.parametrize("props", [{"topic.field": ""}, {"topic.field": "", "offset.field": "o"}])
def test_insert_field_refuses_a_field_key_that_names_no_field(props: dict[str, str]) -> None:
    # (Kafka's would insert a field named "", beside the others.)
    assert errors_of("InsertField$Value", props) == {
        "topic.field": ["topic.field names no field: Kafka Connect would insert a field named ''; remove the key"]
    }


def test_replace_field_config_takes_a_rename_from_the_empty_name() -> None:
    # Java's ":b".split(":") is ["", "b"]: two parts, a valid mapping.
    out = apply(build("ReplaceField$Value", {"renames": ":b"}), record({"": 1, "c": 2}))
    assert out.value == {"b": 1, "c": 2}


def test_replace_field_keeps_of_two_fields_renamed_to_one_the_later_in_kafkas_map_order() -> None:
    # "n" renamed to "id" beside an "id": Java iterates "n" (bucket 14 of 16) after "id" (bucket 11), so n's
    # value wins, whichever comes first in the value; the field keeps its place in the value.
    chain = build("ReplaceField$Value", {"renames": "n:id"})
    assert apply(chain, record({"n": 1, "id": 2, "x": 0})).value == {"id": 1, "x": 0}
    assert apply(chain, record({"id": 2, "n": 1})).value == {"id": 1}
    # ... and "b" (bucket 2) after "a" (bucket 1): renamed to "b", "a" loses.
    assert apply(build("ReplaceField$Value", {"renames": "a:b"}), record({"b": 1, "a": 2})).value == {"b": 1}


def test_timestamp_converter_saturates_unix_conversions_beyond_a_long_as_timeunit_does() -> None:
    # (Kafka's TimeUnit.SECONDS.toMillis saturates: -8066159124842040147 s is Long.MIN_VALUE ms, written back in
    # seconds; what Kafka's own TimestampConverter gives, tests/test_transforms_against_kafka.py.)
    chain = build("TimestampConverter$Value", {"field": "ts", "target.type": "unix", "unix.precision": "seconds"})
    assert apply(chain, record({"ts": -8066159124842040147})).value == {"ts": -9223372036854775}
    assert apply(chain, record({"ts": 8066159124842040147})).value == {"ts": 9223372036854775}


# --- Cast ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "Must specify at least one field to cast."),
        ("foo:faketype", "Invalid type found in casting spec: faketype"),
        ("foo:array", "does not support casting to ARRAY"),
        ("array", "does not support casting to ARRAY"),
        ("foo:bytes", "does not support casting to BYTES"),
        ("foo:int8:extra", "Invalid rename mapping: foo:int8:extra"),
        ("foo:int8,int32", "may only specify a single cast in their spec"),
    ],
)
def test_cast_config_refuses_an_invalid_spec(spec: str, message: str) -> None:
    assert any(message in m for m in errors_of("Cast$Key", {"spec": spec})["spec"])


def test_cast_config_needs_a_spec() -> None:
    assert errors_of("Cast$Value")["spec"] == ['Missing required configuration "spec" which has no default value.']


def test_cast_leaves_a_null_value_unchanged() -> None:
    assert apply(build("Cast$Value", {"spec": "foo:int64"}), record(None, "key")).value is None


def test_cast_leaves_a_null_key_unchanged() -> None:
    out = apply(build("Cast$Key", {"spec": "foo:int64"}), record("value", None))
    assert (out.key, out.value) == (None, "value")


def test_cast_whole_key() -> None:
    out = apply(build("Cast$Key", {"spec": "int8"}), record("bogus", 42))
    assert typed(out.key) == ("int", 42)


@pytest.mark.parametrize(
    ("target", "value", "expected"),
    [
        ("int8", 42, 42),
        ("int16", 42, 42),
        ("int32", 42, 42),
        ("int64", 42, 42),
        ("float32", 42, 42.0),
        ("float64", 42, 42.0),
        ("boolean", 42, True),
        ("boolean", 0, False),
        ("string", 42, "42"),
    ],
)
def test_cast_whole_value(target: str, value: Any, expected: Any) -> None:
    out = apply(build("Cast$Value", {"spec": target}), record(value))
    assert typed(out.value) == typed(expected)


def test_cast_whole_value_refuses_a_list() -> None:
    fails(build("Cast$Value", {"spec": "int8"}), record(["foo"]), "does not support casting from ARRAY")


def test_cast_fields_schemaless() -> None:
    chain = build(
        "Cast$Value",
        {
            "spec": "int8:int16,int16:int32,int32:int64,int64:boolean,float32:float64,float64:boolean,boolean:int8,string:int32"
        },
    )
    value = {
        "int8": 8,
        "int16": 16,
        "int32": 32,
        "int64": 64,
        "float32": 32.0,
        "float64": -64.0,
        "boolean": True,
        "string": "42",
    }
    out = apply(chain, record(value))
    assert typed(out.value) == typed(
        {
            "int8": 8,
            "int16": 16,
            "int32": 32,
            "int64": True,
            "float32": 32.0,
            "float64": True,
            "boolean": 1,
            "string": 42,
        }
    )


def test_cast_bytes_to_string_is_base64() -> None:
    chain = build("Cast$Value", {"spec": "bytes:string"})
    out = apply(chain, record({"bytes": bytes([0xFE, 0xDC, 0xBA, 0x98, 0x76, 0x54, 0x32, 0x10])}))
    assert out.value == {"bytes": "/ty6mHZUMhA="}


def test_cast_names_a_missing_field_with_null() -> None:
    # Kafka's schemaless Cast puts each cast field, null when the value had none.
    out = apply(build("Cast$Value", {"spec": "missing:int32"}), record({"a": 1}))
    assert out.value == {"a": 1, "missing": None}


def test_cast_leaves_the_fields_it_does_not_cast() -> None:
    out = apply(build("Cast$Value", {"spec": "a:string"}), record({"a": 1, "b": {"c": [1]}}))
    assert out.value == {"a": "1", "b": {"c": [1]}}


def test_cast_refuses_a_map_field() -> None:
    fails(build("Cast$Value", {"spec": "m:string"}), record({"m": {"a": 1}}), "field m", "casting from MAP")


def test_cast_field_failure_names_the_transformation_and_field() -> None:
    message = fails(build("Cast$Value", {"spec": "amount:int32"}), record({"amount": "abc"}))
    assert message.startswith("transforms.t (Cast$Value): field amount")


@pytest.mark.parametrize(
    ("target", "value", "expected"),
    [
        ("int8", 300, 44),  # Number.byteValue(): the low 8 bits
        ("int16", 70000, 4464),
        ("int32", 2**31, -(2**31)),
        ("int64", 2**63, -(2**63)),
        ("int32", 1e10, 2**31 - 1),  # (int) of a double saturates
        ("int64", -1e30, -(2**63)),
        ("int8", 300.7, 44),  # (int) toward zero, then the low 8 bits
        ("int8", -1.9, -1),
        ("int32", math.nan, 0),
        ("int32", True, 1),
    ],
)
def test_cast_to_integers_narrows_as_java_does(target: str, value: Any, expected: int) -> None:
    out = apply(build("Cast$Value", {"spec": target}), record(value))
    assert typed(out.value) == ("int", expected)


@pytest.mark.parametrize(("target", "text", "expected"), [("int8", "42", 42), ("int32", "+7", 7), ("int64", "-9", -9)])
def test_cast_parses_integer_strings(target: str, text: str, expected: int) -> None:
    assert apply(build("Cast$Value", {"spec": target}), record(text)).value == expected


@pytest.mark.parametrize(("target", "text"), [("int8", "300"), ("int32", " 42"), ("int32", "4.2"), ("int64", "1_000")])
def test_cast_refuses_integer_strings_java_refuses(target: str, text: str) -> None:
    fails(build("Cast$Value", {"spec": target}), record(text))


@pytest.mark.parametrize(
    ("text", "expected"),
    [(" 1.5 ", 1.5), ("1e3", 1000.0), ("1.5f", 1.5), ("-.5", -0.5), ("0x1p3", 8.0), ("Infinity", math.inf)],
)
def test_cast_parses_float_strings_as_double_parse_double(text: str, expected: float) -> None:
    assert apply(build("Cast$Value", {"spec": "float64"}), record(text)).value == expected


def test_cast_parses_nan() -> None:
    assert math.isnan(apply(build("Cast$Value", {"spec": "float64"}), record("NaN")).value)


@pytest.mark.parametrize("text", ["abc", "inf", "nan", "1_000", ""])
def test_cast_refuses_float_strings_java_refuses(text: str) -> None:
    fails(build("Cast$Value", {"spec": "float64"}), record(text), "cannot cast")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.1 + 0.2, 0.3), (16777217, 16777216.0), (1.1, 1.1), ("3.4028236e38", math.inf), (1e-50, 0.0)],
)
def test_cast_to_float32_rounds_to_a_java_float(value: Any, expected: float) -> None:
    # The float, as the shortest decimal that reads back as it: what Float.toString (and a JSON writer) shows.
    assert apply(build("Cast$Value", {"spec": "float32"}), record(value)).value == expected


@pytest.mark.parametrize(("text", "expected"), [("true", True), ("TRUE", True), (" true", False), ("yes", False)])
def test_cast_string_to_boolean_is_boolean_parse_boolean(text: str, expected: bool) -> None:
    assert apply(build("Cast$Value", {"spec": "boolean"}), record(text)).value is expected


@pytest.mark.parametrize(
    ("value", "expected"), [(0.5, False), (-0.0, False), (math.nan, False), (2.5, True), (math.inf, True), (-3, True)]
)
def test_cast_number_to_boolean_is_its_long_value_not_zero(value: float, expected: bool) -> None:
    assert apply(build("Cast$Value", {"spec": "boolean"}), record(value)).value is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, "1.0"),
        (100.0, "100.0"),
        (3.14, "3.14"),
        (0.001, "0.001"),
        (1e-4, "1.0E-4"),
        (1.5e-5, "1.5E-5"),
        (9999999.0, "9999999.0"),
        (1e7, "1.0E7"),
        (123456789.0, "1.23456789E8"),
        (-2.5e21, "-2.5E21"),
        (-0.0, "-0.0"),
        (math.nan, "NaN"),
        (-math.inf, "-Infinity"),
        (True, "true"),
        (-12, "-12"),
    ],
)
def test_cast_to_string_writes_as_java_to_string(value: Any, expected: str) -> None:
    assert apply(build("Cast$Value", {"spec": "string"}), record(value)).value == expected


# --- MaskField -----------------------------------------------------------------------------------------------

MASK_VALUES = {
    "magic": 42,
    "bool": True,
    "long": 42,
    "double": 42.0,
    "string": "55.121.20.20",
    "list": [42],
    "map": {"key": "value"},
}


def test_mask_field_schemaless_masks_with_each_types_empty_value() -> None:
    fields = ",".join(name for name in MASK_VALUES if name != "magic")
    out = apply(build("MaskField$Value", {"fields": fields}), record(dict(MASK_VALUES)))
    assert typed(out.value) == typed(
        {"magic": 42, "bool": False, "long": 0, "double": 0.0, "string": "", "list": [], "map": {}}
    )


@pytest.mark.parametrize(
    ("field", "replacement", "expected"),
    [
        ("long", "123", 123),
        ("double", "123", 123.0),
        ("string", "123", "123"),
        ("long", "123.9", 123),  # Values.convertToLong: new BigDecimal(text).longValue(), truncated
        ("long", "1e2", 100),
        ("double", "1.5E1", 15.0),
    ],
)
def test_mask_field_replacement_converted_to_the_fields_type(field: str, replacement: str, expected: Any) -> None:
    out = apply(build("MaskField$Value", {"fields": field, "replacement": replacement}), record(dict(MASK_VALUES)))
    assert typed(out.value[field]) == typed(expected)


@pytest.mark.parametrize("field", ["bool", "list", "map"])
def test_mask_field_replacement_refuses_types_other_than_numbers_and_strings(field: str) -> None:
    chain = build("MaskField$Value", {"fields": f"long,{field}", "replacement": "123"})
    fails(chain, record(dict(MASK_VALUES)), "Cannot mask value of type")


@pytest.mark.parametrize("fields", ["long", "double", "string,long"])
def test_mask_field_replacement_that_is_not_a_number_fails_for_a_number(fields: str) -> None:
    chain = build("MaskField$Value", {"fields": fields, "replacement": "foo"})
    fails(chain, record(dict(MASK_VALUES)), "Unable to convert foo")


def test_mask_field_config_refuses_an_empty_replacement() -> None:
    errors = errors_of("MaskField$Value", {"fields": "short", "replacement": ""})
    assert "String must be non-empty" in errors["replacement"][0]


def test_mask_field_config_needs_fields() -> None:
    assert "Empty list" in errors_of("MaskField$Value", {"fields": ""})["fields"][0]
    assert "Missing required configuration" in errors_of("MaskField$Value")["fields"][0]


def test_mask_field_leaves_null_fields_null_and_names_missing_ones() -> None:
    out = apply(build("MaskField$Value", {"fields": "n,missing"}), record({"n": None, "a": 1}))
    assert out.value == {"n": None, "a": 1, "missing": None}


def test_mask_field_cannot_mask_bytes() -> None:
    fails(build("MaskField$Value", {"fields": "b"}), record({"b": b"\x01"}), "Cannot mask value of type: [B")


def test_mask_field_fails_on_a_tombstone_as_kafkas_does() -> None:
    # Kafka's MaskField has no pass-through for null: requireMap(null) fails (a predicate such as
    # RecordIsTombstone with negate keeps tombstones away from it).
    fails(build("MaskField$Value", {"fields": "a"}), record(None), "[mask fields], found: null")


def test_mask_field_key_masks_the_key() -> None:
    out = apply(build("MaskField$Key", {"fields": "ssn"}), record({"v": 1}, {"ssn": "123-45", "id": 3}))
    assert (out.key, out.value) == ({"ssn": "", "id": 3}, {"v": 1})


# --- Flatten -------------------------------------------------------------------------------------------------


def test_flatten_nested_map_with_delimiter() -> None:
    supported = {"int64": 64, "float64": 64.0, "boolean": True, "string": "stringy", "bytes": b"bytes"}
    out = apply(build("Flatten$Value", {"delimiter": "#"}), record({"A": {"B": supported}}))
    assert out.value == {f"A#B#{name}": value for name, value in supported.items()}


def test_flatten_default_delimiter_is_a_dot() -> None:
    assert apply(build("Flatten$Value"), record({"A": {"B": {"c": 1}}, "d": 2})).value == {"A.B.c": 1, "d": 2}


def test_flatten_keeps_of_two_fields_joined_to_one_name_the_later_in_kafkas_map_order() -> None:
    # Java iterates the HashMap JsonConverter reads a value into by its keys' hashes: "a.b" (bucket 4 of 16)
    # after "a" (bucket 1), whichever comes first in the value.
    for value in ({"a.b": 1, "a": {"b": 2}}, {"a": {"b": 2}, "a.b": 1}):
        assert apply(build("Flatten$Value"), record(value)).value == {"a.b": 1}


def test_flatten_needs_a_map() -> None:
    fails(build("Flatten$Value"), record(42), "[flattening], found: java.lang.Long")


def test_flatten_keeps_null_fields() -> None:
    assert apply(build("Flatten$Value"), record({"B": {"opt_int32": None}})).value == {"B.opt_int32": None}


def test_flatten_key() -> None:
    assert apply(build("Flatten$Key"), record(None, {"A": {"B": 12}})).key == {"A.B": 12}


def test_flatten_leaves_arrays_and_their_contents_alone() -> None:
    value = {"foo": ["bar", {"baz": {"lfg": "lfg"}}]}
    assert apply(build("Flatten$Value"), record(value)).value == {"foo": ["bar", {"baz": {"lfg": "lfg"}}]}


def test_flatten_leaves_a_tombstone() -> None:
    assert apply(build("Flatten$Value"), record(None)).value is None


def test_flatten_keeps_the_order_of_fields_null_or_not() -> None:
    value = {"firstNull": None, "firstNonNull": "nonNull", "secondNull": None, "secondNonNull": "alsoNonNull"}
    out = apply(build("Flatten$Value"), record(dict(value)))
    assert list(out.value.items()) == list(value.items())


def test_flatten_with_an_empty_delimiter_joins_names() -> None:
    # The delimiter is a STRING: an empty one is empty, not the default.
    assert apply(build("Flatten$Value", {"delimiter": ""}), record({"A": {"B": 1}})).value == {"AB": 1}


def test_flatten_drops_an_empty_nested_map() -> None:
    assert apply(build("Flatten$Value"), record({"a": {}, "b": 1})).value == {"b": 1}


# --- ExtractField --------------------------------------------------------------------------------------------


def test_extract_field_schemaless_key() -> None:
    out = apply(build("ExtractField$Key", {"field": "magic"}), record(None, {"magic": 42}))
    assert out.key == 42


def test_extract_field_nested_path_with_syntax_v2() -> None:
    chain = build("ExtractField$Key", {"field": "magic.foo", "field.syntax.version": "V2"})
    assert apply(chain, record(None, {"magic": {"foo": 42}})).key == 42


def test_extract_field_of_a_null_key_is_null() -> None:
    assert apply(build("ExtractField$Key", {"field": "magic"}), record(None, None)).key is None


def test_extract_field_missing_field_is_null() -> None:
    assert apply(build("ExtractField$Key", {"field": "nonexistent"}), record(None, {"magic": 42})).key is None


def test_extract_field_missing_nested_field_is_null() -> None:
    chain = build("ExtractField$Key", {"field": "magic.nonexistent", "field.syntax.version": "V2"})
    assert apply(chain, record(None, {"magic": {"foo": 42}})).key is None


def test_extract_field_nested_path_through_a_null_is_null() -> None:
    chain = build("ExtractField$Value", {"field": "foo.baz.inner", "field.syntax.version": "V2"})
    assert apply(chain, record({"foo": {"bar": 42, "baz": None}})).value is None


def test_extract_field_nested_path_through_a_non_map_fails() -> None:
    chain = build("ExtractField$Value", {"field": "foo.bar.inner", "field.syntax.version": "V2"})
    fails(chain, record({"foo": {"bar": 42}}), "[nested field access], found: java.lang.Long")


def test_extract_field_v1_reads_a_dotted_name_as_one_field() -> None:
    chain = build("ExtractField$Value", {"field": "magic.foo"})
    assert apply(chain, record({"magic.foo": 1, "magic": {"foo": 2}})).value == 1


def test_extract_field_v2_backticks_wrap_a_name_with_dots() -> None:
    chain = build("ExtractField$Value", {"field": "`magic.foo`.bar", "field.syntax.version": "v2"})
    assert apply(chain, record({"magic.foo": {"bar": 3}})).value == 3


def test_extract_field_needs_a_map() -> None:
    fails(build("ExtractField$Value", {"field": "a"}), record([1]), "[field extraction], found: java.util.ArrayList")


def test_extract_field_config() -> None:
    assert "Missing required configuration" in errors_of("ExtractField$Value")["field"][0]
    errors = errors_of("ExtractField$Value", {"field": "a", "field.syntax.version": "V3"})
    assert "field.syntax.version" in errors
    errors = errors_of("ExtractField$Value", {"field": "foo.`bar.baz", "field.syntax.version": "V2"})
    assert errors["field"] == [
        "Incomplete backtick pair in path: [foo.`bar.baz], consider adding a backslash before backtick at "
        "position 4 to escape it"
    ]


@pytest.mark.parametrize(
    ("path", "steps"),
    [
        ("..", ["", "", ""]),
        ("foo..", ["foo", "", ""]),
        (".bar.", ["", "bar", ""]),
        ("..baz", ["", "", "baz"]),
        ("", []),
        ("foobarbaz", ["foobarbaz"]),
        ("foo.bar.baz", ["foo", "bar", "baz"]),
        ("foo`bar`baz", ["foo`bar`baz"]),
        ("`foo.bar.baz`", ["foo.bar.baz"]),
        ("foo.`bar.baz`", ["foo", "bar.baz"]),
        ("`foo.bar`.baz", ["foo.bar", "baz"]),
        ("foo.`bar`.baz", ["foo", "bar", "baz"]),
        ("foo.``bar.baz`", ["foo", "`bar.baz"]),
        ("foo.`bar.baz``", ["foo", "bar.baz`"]),
        ("foo.`ba`r.baz`", ["foo", "ba`r.baz"]),
        ("foo.ba`r.baz", ["foo", "ba`r", "baz"]),
        ("foo.``bar``.baz", ["foo", "`bar`", "baz"]),
        ("``foo.bar.baz``", ["`foo.bar.baz`"]),
        ("foo.`bar\\`.baz`", ["foo", "bar`.baz"]),
        ("foo.`bar.`baz`", ["foo", "bar.`baz"]),
        ("foo.`bar\\`.`baz`", ["foo", "bar`.`baz"]),
        ("foo.`bar\\\\`.\\`baz`", ["foo", "bar\\`.\\`baz"]),
    ],
)
def test_field_path_v2_steps(path: str, steps: list[str]) -> None:
    assert field_path_v2(path) == steps


@pytest.mark.parametrize(("path", "position"), [("`foo.bar.baz", 0), ("foo.bar.`baz", 8), ("foo.bar.`baz\\`", 8)])
def test_field_path_v2_refuses_an_incomplete_backtick_pair(path: str, position: int) -> None:
    with pytest.raises(ValueError, match=f"backtick at position {position} to escape it"):
        field_path_v2(path)


# --- HoistField ----------------------------------------------------------------------------------------------


def test_hoist_field_schemaless_key() -> None:
    assert apply(build("HoistField$Key", {"field": "magic"}), record(None, 42)).key == {"magic": 42}


def test_hoist_field_wraps_null_too() -> None:
    assert apply(build("HoistField$Value", {"field": "row"}), record(None)).value == {"row": None}


def test_hoist_field_result_is_a_map_of_its_own() -> None:
    out = apply(build("HoistField$Key", {"field": "magic"}), record(None, 420))
    out.key["k"] = "v"
    assert out.key == {"magic": 420, "k": "v"}


def test_hoist_field_config_needs_a_field() -> None:
    assert "Missing required configuration" in errors_of("HoistField$Value")["field"][0]


# --- ValueToKey ----------------------------------------------------------------------------------------------


def test_value_to_key_schemaless() -> None:
    out = apply(build("ValueToKey", {"fields": "a,b"}), record({"a": 1, "b": 2, "c": 3}))
    assert (out.key, out.value) == ({"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3})


def test_value_to_key_missing_field_is_null_without_a_schema() -> None:
    assert apply(build("ValueToKey", {"fields": "a,x"}), record({"a": 1})).key == {"a": 1, "x": None}


def test_value_to_key_needs_a_map_value() -> None:
    fails(build("ValueToKey", {"fields": "a"}), record(None), "[copying fields from value to key], found: null")


def test_value_to_key_config_needs_fields() -> None:
    assert "Empty list" in errors_of("ValueToKey", {"fields": " "})["fields"][0]


# --- TimestampConverter --------------------------------------------------------------------------------------
# Kafka's schemaless TimestampConverter returns java.util.Date objects for the Timestamp, Date and Time
# targets; a schemaless JSON record has no date type, so here they are ISO 8601 text in UTC, and that text
# (without a format) is what reads back as one (Kafka's Date input).

DATE_PLUS_TIME_UNIX = 86_401_234  # 1970-01-02T00:00:01.234Z
DATE_PLUS_TIME = "1970-01-02T00:00:01.234Z"
DATE = "1970-01-02"
TIME = "00:00:01.234"
STRING_DATE_FMT = "yyyy MM dd HH mm ss SSS z"
DATE_PLUS_TIME_STRING = "1970 01 02 00 00 01 234 UTC"


def converter(target: str, **props: str) -> TransformChain:
    return build(
        "TimestampConverter$Value", {"target.type": target, **{k.replace("_", "."): v for k, v in props.items()}}
    )


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({}, "target.type"),
        ({"target.type": "invalid"}, "target.type"),
        ({"target.type": "date"}, "target.type"),  # ValidString.in: case-sensitive
        ({"target.type": "unix", "unix.precision": "invalid"}, "unix.precision"),
        ({"target.type": "string"}, "format"),
        ({"target.type": "string", "format": "bad-format"}, "format"),
    ],
)
def test_timestamp_converter_config_refuses(props: dict[str, str], key: str) -> None:
    assert key in errors_of("TimestampConverter$Value", props)


def test_timestamp_converter_config_takes_a_unix_precision() -> None:
    build("TimestampConverter$Value", {"target.type": "unix", "unix.precision": "seconds"})


def test_timestamp_converter_schemaless_identity() -> None:
    assert apply(converter("Timestamp"), record(DATE_PLUS_TIME)).value == DATE_PLUS_TIME


def test_timestamp_converter_schemaless_timestamp_to_date() -> None:
    assert apply(converter("Date"), record(DATE_PLUS_TIME)).value == DATE


def test_timestamp_converter_schemaless_timestamp_to_time() -> None:
    assert apply(converter("Time"), record(DATE_PLUS_TIME)).value == TIME


def test_timestamp_converter_schemaless_timestamp_to_unix() -> None:
    assert apply(converter("unix"), record(DATE_PLUS_TIME)).value == DATE_PLUS_TIME_UNIX


def test_timestamp_converter_schemaless_timestamp_to_string() -> None:
    out = apply(converter("string", format=STRING_DATE_FMT), record(DATE_PLUS_TIME))
    assert out.value == DATE_PLUS_TIME_STRING


def test_timestamp_converter_schemaless_date_to_timestamp() -> None:
    assert apply(converter("Timestamp"), record(DATE)).value == "1970-01-02T00:00:00.000Z"


def test_timestamp_converter_schemaless_time_to_timestamp() -> None:
    assert apply(converter("Timestamp"), record(TIME)).value == "1970-01-01T00:00:01.234Z"


def test_timestamp_converter_schemaless_unix_to_timestamp() -> None:
    assert apply(converter("Timestamp"), record(DATE_PLUS_TIME_UNIX)).value == DATE_PLUS_TIME


def test_timestamp_converter_schemaless_unix_to_date_and_time() -> None:
    assert apply(converter("Date"), record(DATE_PLUS_TIME_UNIX)).value == DATE
    assert apply(converter("Time"), record(DATE_PLUS_TIME_UNIX)).value == TIME


def test_timestamp_converter_schemaless_string_to_timestamp() -> None:
    assert apply(converter("Timestamp", format=STRING_DATE_FMT), record(DATE_PLUS_TIME_STRING)).value == DATE_PLUS_TIME


@pytest.mark.parametrize("target", ["string", "Date", "Timestamp", "unix", "Time"])
def test_timestamp_converter_schemaless_null_value_and_null_field(target: str) -> None:
    assert apply(converter(target, format=STRING_DATE_FMT), record(None)).value is None
    assert apply(converter(target, format=STRING_DATE_FMT, field="ts"), record(None)).value is None
    out = apply(converter(target, format=STRING_DATE_FMT, field="ts"), record({"ts": None, "other": "test"}))
    assert out.value == {"ts": None, "other": "test"}


def test_timestamp_converter_schemaless_field_conversion() -> None:
    out = apply(converter("Date", field="ts"), record({"ts": DATE_PLUS_TIME, "other": "test"}))
    assert out.value == {"ts": DATE, "other": "test"}


@pytest.mark.parametrize(
    ("precision", "expected"),
    [("microseconds", 86_401_234_000), ("nanoseconds", 86_401_234_000_000), ("seconds", 86_401)],
)
def test_timestamp_converter_schemaless_string_to_unix_at_a_precision(precision: str, expected: int) -> None:
    chain = converter("unix", unix_precision=precision, format=STRING_DATE_FMT)
    assert apply(chain, record(DATE_PLUS_TIME_STRING)).value == expected


@pytest.mark.parametrize(
    ("precision", "unix", "expected"),
    [
        ("microseconds", 86_401_234_123, DATE_PLUS_TIME),
        ("nanoseconds", 86_401_234_123_456, DATE_PLUS_TIME),
        ("seconds", 86_401, "1970-01-02T00:00:01.000Z"),
    ],
)
def test_timestamp_converter_unix_field_at_a_precision(precision: str, unix: int, expected: str) -> None:
    chain = converter("Timestamp", field="ts", unix_precision=precision)
    assert apply(chain, record({"ts": unix})).value == {"ts": expected}


def test_timestamp_converter_truncates_toward_zero_as_time_unit_does() -> None:
    # TimeUnit.MICROSECONDS.toMillis(-1500) is -1 (Java's division), not -2.
    assert apply(converter("unix", unix_precision="microseconds"), record(-1500)).value == -1000
    assert apply(converter("unix", unix_precision="seconds"), record("1969-12-31T23:59:58.500Z")).value == -1


def test_timestamp_converter_date_of_a_time_before_the_epoch() -> None:
    assert apply(converter("Date"), record(-1)).value == "1969-12-31"
    assert apply(converter("Time"), record(-1)).value == "23:59:59.999"


def test_timestamp_converter_key() -> None:
    chain = build("TimestampConverter$Key", {"target.type": "Timestamp"})
    out = apply(chain, record(None, DATE_PLUS_TIME_UNIX))
    assert (out.key, out.value) == (DATE_PLUS_TIME, None)


def test_timestamp_converter_refuses_a_double() -> None:
    fails(converter("unix"), record(1.5), "does not support java.lang.Double objects as timestamps")


def test_timestamp_converter_refuses_a_string_that_does_not_match_the_format() -> None:
    fails(converter("unix", format="yyyy-MM-dd"), record("yesterday"), "Could not parse timestamp")


def test_timestamp_converter_without_a_format_reads_only_iso_text() -> None:
    fails(converter("unix"), record("01/02/1970"), "needs the format option")


def test_timestamp_converter_reads_only_extended_iso_text_as_a_date() -> None:
    # Not in the format, and not the ISO text of a Timestamp (basic ISO forms are not read as one).
    fails(converter("unix", format="yyyy-MM-dd"), record("20170103"), "Could not parse timestamp")
    assert apply(converter("unix", format="yyyy-MM-dd"), record("2017-01-03")).value == 1483401600000


def test_timestamp_converter_field_needs_a_map() -> None:
    fails(converter("unix", field="ts"), record(5), "[converting timestamp formats]")


def test_timestamp_converter_parses_as_a_lenient_simple_date_format() -> None:
    # Digits beyond the letters' count, text after the pattern, and a day past the month's end.
    chain = converter("unix", format="yyyy-MM-dd")
    assert apply(chain, record("1970-1-2")).value == 86_400_000
    assert apply(chain, record("1970-01-02T10:00:00Z")).value == 86_400_000
    assert apply(chain, record("1970-01-32")).value == 31 * 86_400_000


# --- RegexRouter ---------------------------------------------------------------------------------------------


def route(regex: str, replacement: str, topic: str) -> str:
    return apply(build("RegexRouter", {"regex": regex, "replacement": replacement}), record(topic=topic)).topic


def test_regex_router_static_replacement() -> None:
    assert route("foo", "bar", "foo") == "bar"


def test_regex_router_leaves_a_topic_it_does_not_match() -> None:
    assert route("foo", "bar", "orig") == "orig"
    assert route("foo", "bar", "foox") == "foox"  # the whole topic must match


def test_regex_router_identity() -> None:
    assert route("(.*)", "$1", "orig") == "orig"


def test_regex_router_adds_a_prefix_and_a_suffix() -> None:
    assert route("(.*)", "prefix-$1", "orig") == "prefix-orig"
    assert route("(.*)", "$1-suffix", "orig") == "orig-suffix"


def test_regex_router_slice() -> None:
    assert route("(.*)-(\\d\\d\\d\\d\\d\\d\\d\\d)", "$1", "index-20160117") == "index"


def test_regex_router_replaces_the_first_match_as_replace_first() -> None:
    # matches() holds for the whole topic, then replaceFirst replaces the first match found: "a".
    assert route("a|ab", "X", "ab") == "Xb"


def test_regex_router_group_number_takes_digits_while_they_name_a_group() -> None:
    assert route("(.*)", "$12", "t") == "t2"
    assert route("(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)(l)", "$12", "abcdefghijkl") == "l"


def test_regex_router_named_group_and_escaped_dollar() -> None:
    assert route("(?<name>[a-z]+)-raw", "${name}-clean", "orders-raw") == "orders-clean"
    assert route("(.*)", "\\$1", "t") == "$1"


@pytest.mark.parametrize(
    ("regex", "replacement", "key"),
    [("[", "x", "regex"), ("(.*)", "$x", "replacement"), ("(.*)", "$2", "replacement"), ("(.*)", "a\\", "replacement")],
)
def test_regex_router_config_refuses(regex: str, replacement: str, key: str) -> None:
    assert key in errors_of("RegexRouter", {"regex": regex, "replacement": replacement})


def test_regex_router_config_needs_regex_and_replacement_but_an_empty_replacement_is_one() -> None:
    errors = errors_of("RegexRouter")
    assert set(errors) == {"regex", "replacement"}
    build("RegexRouter", {"regex": "(.*)-raw", "replacement": ""})


# --- TimestampRouter -----------------------------------------------------------------------------------------


def test_timestamp_router_default_configuration() -> None:
    assert apply(build("TimestampRouter"), record(timestamp=1483425001864)).topic == "test-20170103"


def test_timestamp_router_formats() -> None:
    chain = build(
        "TimestampRouter",
        {"topic.format": "${topic}_${timestamp}_${topic}", "timestamp.format": "yyyy-MM-dd'T'HH"},
    )
    assert apply(chain, record(timestamp=1483425001864)).topic == "test_2017-01-03T06_test"


# SimpleDateFormat("YYYY YY ww W F G LLL LLLL L yyyy-MM-dd E") in UTC, on JDK 17 with -Duser.language=en
# -Duser.country=US (weeks start on Sunday; the week of the 1st of January is the first).
JAVA_WEEKS = {
    1703894400000: "2023 23 52 5 5 AD Dec December 12 2023-12-30 Sat",
    1703980800000: "2024 24 01 6 5 AD Dec December 12 2023-12-31 Sun",
    1704067200000: "2024 24 01 1 1 AD Jan January 1 2024-01-01 Mon",
    1704499200000: "2024 24 01 1 1 AD Jan January 1 2024-01-06 Sat",
    1671321600000: "2022 22 52 4 3 AD Dec December 12 2022-12-18 Sun",
}


@pytest.mark.parametrize(("millis", "java"), JAVA_WEEKS.items())
def test_timestamp_router_writes_the_week_fields_and_era_as_an_english_jvm_does(millis: int, java: str) -> None:
    chain = build("TimestampRouter", {"timestamp.format": "YYYY YY ww W F G LLL LLLL L yyyy-MM-dd E"})
    assert apply(chain, record(timestamp=millis)).topic == f"test-{java}"


def test_timestamp_converter_writes_week_fields_but_refuses_to_read_them() -> None:
    to_text = build("TimestampConverter$Value", {"target.type": "string", "format": "YYYY-'W'ww"})
    assert apply(to_text, record(1703980800000)).value == "2024-W01"
    from_text = build("TimestampConverter$Value", {"target.type": "unix", "format": "YYYY-'W'ww"})
    fails(from_text, record("2024-W01"), "week fields (Y, w)", "written, not read")


def test_timestamp_router_needs_the_records_timestamp() -> None:
    fails(build("TimestampRouter"), record(timestamp=None), "Timestamp missing on record")


def test_timestamp_router_config_refuses_a_pattern_simple_date_format_refuses() -> None:
    # (Kafka's fails on the first record; here the config is refused.)
    assert "timestamp.format" in errors_of("TimestampRouter", {"timestamp.format": "bad-format"})


# --- Filter and the predicates -------------------------------------------------------------------------------


def test_filter_drops_every_record() -> None:
    assert build("Filter").apply(record({"a": 1})) is None


def filtered_by(predicate: str, props: dict[str, str] | None = None, negate: str | None = None) -> TransformChain:
    config = {
        **config_of("Filter", {"predicate": "p"}),
        "predicates": "p",
        "predicates.p.type": f"{K}predicates.{predicate}",
        **{f"predicates.p.{k}": v for k, v in (props or {}).items()},
    }
    if negate is not None:
        config["transforms.t.negate"] = negate
    chain, errors = parse_chain(config)
    assert errors == {}
    assert chain is not None
    return chain


def predicate_errors(predicate: str, props: dict[str, str] | None = None) -> dict[str, list[str]]:
    config = {
        **config_of("Filter", {"predicate": "p"}),
        "predicates": "p",
        "predicates.p.type": f"{K}predicates.{predicate}",
        **{f"predicates.p.{k}": v for k, v in (props or {}).items()},
    }
    chain, errors = parse_chain(config)
    assert chain is None
    return {key.removeprefix("predicates.p."): messages for key, messages in errors.items()}


def headers_named(*names: str) -> list[tuple[str, Any]]:
    return [(name, None) for name in names]


@pytest.mark.parametrize(
    ("names", "matches"),
    [
        (["foo"], True),
        (["foo", "bar"], True),
        (["bar", "foo", "bar", "foo"], True),
        (["bar"], False),
        (["bar", "bar"], False),
        ([], False),
    ],
)
def test_has_header_key(names: list[str], matches: bool) -> None:
    chain = filtered_by("HasHeaderKey", {"name": "foo"})
    assert (chain.apply(record(headers=headers_named(*names))) is None) is matches


def test_has_header_key_config_needs_a_name_that_is_not_empty() -> None:
    assert 'Missing required configuration "name"' in predicate_errors("HasHeaderKey")["name"][0]
    assert "String must be non-empty" in predicate_errors("HasHeaderKey", {"name": ""})["name"][0]


@pytest.mark.parametrize(
    ("topic", "matches"),
    [
        ("my-prefix-", True),
        ("my-prefix-foo", True),
        ("x-my-prefix-", False),
        ("x-my-prefix-foo", False),
        ("your-prefix-", False),
        ("your-prefix-foo", False),
    ],
)
def test_topic_name_matches(topic: str, matches: bool) -> None:
    chain = filtered_by("TopicNameMatches", {"pattern": "my-prefix-.*"})
    assert (chain.apply(record(topic=topic)) is None) is matches


def test_topic_name_matches_config_needs_a_valid_non_empty_pattern() -> None:
    assert 'Missing required configuration "pattern"' in predicate_errors("TopicNameMatches")["pattern"][0]
    assert "String must be non-empty" in predicate_errors("TopicNameMatches", {"pattern": ""})["pattern"][0]
    assert "Invalid regex" in predicate_errors("TopicNameMatches", {"pattern": "["})["pattern"][0]
    assert "Invalid regex" in predicate_errors("TopicNameMatches", {"pattern": "*"})["pattern"][0]


def test_record_is_tombstone() -> None:
    chain = filtered_by("RecordIsTombstone")
    assert chain.apply(record(None)) is None
    assert chain.apply(record({})) is not None


def test_negate_applies_the_transformation_where_the_predicate_does_not_hold() -> None:
    chain = filtered_by("RecordIsTombstone", negate="true")
    assert chain.apply(record(None)) is not None
    assert chain.apply(record({"a": 1})) is None


def test_a_predicate_leaves_the_records_it_does_not_match_to_the_next_step() -> None:
    config = {
        "transforms": "mask,hoist",
        "transforms.mask.type": f"{K}MaskField$Value",
        "transforms.mask.fields": "secret",
        "transforms.mask.predicate": "live",
        "transforms.mask.negate": "true",
        "transforms.hoist.type": f"{K}HoistField$Value",
        "transforms.hoist.field": "row",
        "predicates": "live",
        "predicates.live.type": f"{K}predicates.RecordIsTombstone",
    }
    chain, errors = parse_chain(config)
    assert errors == {} and chain is not None
    assert apply(chain, record({"secret": "x"})).value == {"row": {"secret": ""}}
    assert apply(chain, record(None)).value == {"row": None}


# --- HeaderFrom ----------------------------------------------------------------------------------------------

HEADER_FROM_CASES = [
    pytest.param(
        {"field1": "field1-value", "field2": "field2-value"},
        [("header1", "existing-value")],
        "field1",
        "inserted1",
        "copy",
        {"field1": "field1-value", "field2": "field2-value"},
        [("header1", "existing-value"), ("inserted1", "field1-value")],
        id="basic copy",
    ),
    pytest.param(
        {"field1": "field1-value", "field2": "field2-value"},
        [("header1", "existing-value")],
        "field1",
        "inserted1",
        "move",
        {"field2": "field2-value"},
        [("header1", "existing-value"), ("inserted1", "field1-value")],
        id="basic move",
    ),
    pytest.param(
        {"field1": "field1-value", "field2": "field2-value"},
        [("inserted1", "existing-value")],
        "field1",
        "inserted1",
        "copy",
        {"field1": "field1-value", "field2": "field2-value"},
        [("inserted1", "existing-value"), ("inserted1", "field1-value")],
        id="copy with preexisting header",
    ),
    pytest.param(
        {"field1": "field1-value", "field2": "field2-value"},
        [("inserted1", "existing-value")],
        "field1",
        "inserted1",
        "move",
        {"field2": "field2-value"},
        [("inserted1", "existing-value"), ("inserted1", "field1-value")],
        id="move with preexisting header",
    ),
    pytest.param(
        {"field1": {"foo": "foo-value"}, "field2": "field2-value"},
        [("header1", "existing-value")],
        "field1",
        "inserted1",
        "move",
        {"field2": "field2-value"},
        [("header1", "existing-value"), ("inserted1", {"foo": "foo-value"})],
        id="move with map value",
    ),
    pytest.param(
        {"field1": "field1-value", "field2": "field2-value"},
        [("header1", "existing-value")],
        "field1,field1",
        "inserted1,inserted2",
        "move",
        {"field2": "field2-value"},
        [("header1", "existing-value"), ("inserted1", "field1-value"), ("inserted2", "field1-value")],
        id="two headers from same field",
    ),
    pytest.param(
        {"field1": "field1-value", "field2": "field2-value"},
        [("header1", "existing-value")],
        "field1,field2",
        "inserted1,inserted1",
        "move",
        {},
        [("header1", "existing-value"), ("inserted1", "field1-value"), ("inserted1", "field2-value")],
        id="two fields to same header",
    ),
    pytest.param(
        {"field1": "field1-value", "field2": None},
        [("header1", "existing-value")],
        "field1,field2",
        "inserted1,inserted2",
        "copy",
        {"field1": "field1-value", "field2": None},
        [("header1", "existing-value"), ("inserted1", "field1-value"), ("inserted2", None)],
        id="copy null field",
    ),
]


@pytest.mark.parametrize("on_key", [True, False], ids=["key", "value"])
@pytest.mark.parametrize(
    ("original", "headers", "fields", "header_names", "operation", "expected", "expected_headers"), HEADER_FROM_CASES
)
def test_header_from_schemaless(
    on_key: bool,
    original: dict[str, Any],
    headers: list[tuple[str, Any]],
    fields: str,
    header_names: str,
    operation: str,
    expected: dict[str, Any],
    expected_headers: list[tuple[str, Any]],
) -> None:
    chain = build(
        f"HeaderFrom${'Key' if on_key else 'Value'}",
        {"fields": fields, "headers": header_names, "operation": operation},
    )
    rec = record("value", original, headers=headers) if on_key else record(original, "key", headers=headers)
    out = apply(chain, rec)
    assert (out.key, out.value) == ((expected, "value") if on_key else ("key", expected))
    assert out.headers == expected_headers


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"fields": "foo,bar", "headers": "foo", "operation": "copy"}, "headers"),
        ({"fields": "foo", "headers": "foo,bar", "operation": "copy"}, "headers"),
        ({"fields": "", "headers": "", "operation": "copy"}, "fields"),
        ({"fields": "a", "headers": "h", "operation": "Move"}, "operation"),  # ValidString.in: case-sensitive
        ({"fields": "a", "headers": "h"}, "operation"),
    ],
)
def test_header_from_config_refuses(props: dict[str, str], key: str) -> None:
    assert key in errors_of("HeaderFrom$Value", props)


def test_header_from_needs_a_map() -> None:
    chain = build("HeaderFrom$Value", {"fields": "a", "headers": "h", "operation": "move"})
    fails(chain, record("text"), "[header move], found: java.lang.String")


# --- InsertHeader and DropHeaders ----------------------------------------------------------------------------


def test_insert_header_with_an_existing_other_header() -> None:
    chain = build("InsertHeader", {"header": "inserted", "value.literal": "inserted-value"})
    out = apply(chain, record("value", "key", headers=[("existing", "existing-value")]))
    assert out.headers == [("existing", "existing-value"), ("inserted", "inserted-value")]
    assert (out.key, out.value, out.topic) == ("key", "value", "test")


def test_insert_header_with_an_existing_same_header_keeps_both() -> None:
    chain = build("InsertHeader", {"header": "existing", "value.literal": "inserted-value"})
    out = apply(chain, record("value", headers=[("existing", "preexisting-value")]))
    assert out.headers == [("existing", "preexisting-value"), ("existing", "inserted-value")]


def test_insert_header_keeps_the_literal_as_text() -> None:
    # Kafka's parses "1" into a Byte header (Values.parseString); a header converter writes that as "1",
    # the text kept here.
    out = apply(build("InsertHeader", {"header": "inserted", "value.literal": "1"}), record("value"))
    assert out.headers == [("inserted", "1")]


def test_insert_header_config_needs_header_and_value() -> None:
    assert set(errors_of("InsertHeader")) == {"header", "value.literal"}
    assert set(errors_of("InsertHeader", {"header": "h"})) == {"value.literal"}


def test_drop_headers_drops_every_header_of_the_name() -> None:
    chain = build("DropHeaders", {"headers": "to-drop"})
    headers = [("existing", "existing-value"), ("to-drop", "existing-value"), ("to-drop", "existing-other-value")]
    out = apply(chain, record("value", "key", headers=headers))
    assert out.headers == [("existing", "existing-value")]
    assert (out.key, out.value) == ("key", "value")


def test_drop_headers_without_the_header() -> None:
    out = apply(build("DropHeaders", {"headers": "to-drop"}), record(headers=[("existing", "existing-value")]))
    assert out.headers == [("existing", "existing-value")]


def test_drop_headers_config_needs_a_list() -> None:
    assert "Empty list" in errors_of("DropHeaders", {"headers": ""})["headers"][0]


# --- the chain's config --------------------------------------------------------------------------------------


def test_no_transforms_is_no_chain_and_no_errors() -> None:
    assert parse_chain({"topics": "a"}) == (None, {})


def test_chain_type_is_required() -> None:
    _, errors = parse_chain({"transforms": "x"})
    assert errors == {
        "transforms.x.type": ['Missing required configuration "transforms.x.type" which has no default value.']
    }


def test_chain_refuses_an_unknown_class_by_name() -> None:
    _, errors = parse_chain({"transforms": "x", "transforms.x.type": "com.example.Mystery"})
    assert "Class com.example.Mystery could not be found" in errors["transforms.x.type"][0]


def test_chain_refuses_each_unknown_key_by_key() -> None:
    config = {**config_of("Cast$Value", {"spec": "a:int32", "typo": "1", "other": "2"})}
    _, errors = parse_chain(config)
    assert set(errors) == {"transforms.t.typo", "transforms.t.other"}
    assert errors["transforms.t.typo"] == ["typo is not a key of Cast$Value"]


def test_chain_refuses_keys_of_an_alias_not_listed() -> None:
    config = {**config_of("Filter"), "transforms.y.type": f"{K}Filter", "predicates.q.type": "x"}
    _, errors = parse_chain(config)
    assert set(errors) == {"transforms.y.type", "predicates.q.type"}
    assert "'y' is not an alias in transforms" in errors["transforms.y.type"][0]


def test_chain_refuses_a_duplicate_alias() -> None:
    _, errors = parse_chain({"transforms": "t,t", "transforms.t.type": f"{K}Filter"})
    assert errors["transforms"] == ["Duplicate alias provided."]


def test_chain_refuses_a_duplicate_predicate_alias() -> None:
    config = {
        **config_of("Filter", {"predicate": "p"}),
        "predicates": "p, p",
        "predicates.p.type": f"{K}predicates.RecordIsTombstone",
    }
    chain, errors = parse_chain(config)
    assert chain is None and errors == {"predicates": ["Duplicate alias provided."]}


def test_chain_refuses_a_predicate_not_listed() -> None:
    _, errors = parse_chain(config_of("Filter", {"predicate": "p"}))
    assert "predicate 'p' is not one of predicates" in errors["transforms.t.predicate"][0]


def test_chain_refuses_negate_without_a_predicate_and_negate_that_is_not_a_boolean() -> None:
    _, errors = parse_chain(config_of("Filter", {"negate": "true"}))
    assert (
        "there is no config 'transforms.t.predicate' defining a predicate to be negated"
        in errors["transforms.t.negate"][0]
    )
    config = {**config_of("Filter", {"predicate": "p", "negate": "maybe"}), "predicates": "p"}
    config["predicates.p.type"] = f"{K}predicates.RecordIsTombstone"
    _, errors = parse_chain(config)
    assert "Expected value to be either true or false" in errors["transforms.t.negate"][0]


def test_chain_refuses_a_predicates_unknown_key_and_class() -> None:
    assert "typo" in predicate_errors("RecordIsTombstone", {"typo": "x"})
    assert "could not be found" in predicate_errors("NoSuchPredicate")["type"][0]


def test_chain_takes_simple_class_names_as_kafka_connects_plugin_aliases() -> None:
    for name in ("InsertField$Value", "DebeziumTransform", "ExtractNewRecordState", "CopyValue"):
        _, errors = parse_chain({"transforms": "x", "transforms.x.type": name, "transforms.x.topic.field": "t"})
        assert "transforms.x.type" not in errors
    build("io.tabular.iceberg.connect.transforms.DebeziumTransform")


def test_chain_applies_in_order_and_stops_at_a_drop() -> None:
    config = {
        "transforms": "hoist,insert,drop,fail",
        "transforms.hoist.type": f"{K}HoistField$Value",
        "transforms.hoist.field": "row",
        "transforms.insert.type": f"{K}InsertField$Value",
        "transforms.insert.topic.field": "topic",
        "transforms.drop.type": f"{K}Filter",
        "transforms.drop.predicate": "big",
        "transforms.fail.type": f"{K}Cast$Value",
        "transforms.fail.spec": "int8",  # fails on any map
        "predicates": "big",
        "predicates.big.type": f"{K}predicates.TopicNameMatches",
        "predicates.big.pattern": "big-.*",
    }
    chain, errors = parse_chain(config)
    assert errors == {} and chain is not None
    assert chain.apply(record(1, topic="big-one")) is None
    message = fails(chain, record(1, topic="small"))
    assert message.startswith("transforms.fail (Cast$Value): ")


def test_config_string_values_are_trimmed_as_kafkas_config_def_trims_them() -> None:
    assert apply(build("ExtractField$Value", {"field": " magic "}), record({"magic": 1})).value == 1


def test_config_lists_keep_empty_items_as_kafkas_config_def_does() -> None:
    # "a," is ["a", ""] for Kafka: the key gets a field named "" (null).
    assert apply(build("ValueToKey", {"fields": "a,"}), record({"a": 1})).key == {"a": 1, "": None}


# --- Debezium's ExtractNewRecordState --------------------------------------------------------------------------
# Debezium's transformation reads an event by its schema (an Envelope); here the schemaless value is read as
# one when it has an op and a before or after.

SOURCE = {"lsn": 1234, "ts_ms": None, "db": "test_db", "table": "test_table"}
TRANSACTION = {"id": "571", "total_order": 42, "data_collection_order": 42}


def create_event() -> dict[str, Any]:
    return {
        "before": None,
        "after": {"id": 1, "name": "myRecord"},
        "source": dict(SOURCE),
        "op": "c",
        "ts_ms": 1710032523000,
        "transaction": None,
    }


def update_event() -> dict[str, Any]:
    return {
        "before": {"id": 1, "name": "myRecord"},
        "after": {"id": 1, "name": "updatedRecord"},
        "source": dict(SOURCE),
        "op": "u",
        "ts_ms": 1710032523000,
        "transaction": dict(TRANSACTION),
    }


def delete_event() -> dict[str, Any]:
    return {
        "before": {"id": 1, "name": "myRecord"},
        "after": None,
        "source": {"lsn": 1234, "version": "version!", "db": "test_db", "table": "test_table"},
        "op": "d",
        "ts_ms": 1710032523000,
        "transaction": None,
    }


def truncate_event() -> dict[str, Any]:
    return {"before": None, "after": None, "source": dict(SOURCE), "op": "t", "ts_ms": 1710032523000}


def unwrap(**props: str) -> TransformChain:
    return build(DEBEZIUM, {k.replace("_", "."): v for k, v in props.items()})


def unwrap_mode(mode: str, props: dict[str, str] | None = None) -> TransformChain:
    return build(DEBEZIUM, {"delete.tombstone.handling.mode": mode, **(props or {})})


@pytest.mark.parametrize(
    ("mode", "kept"),
    [
        ("drop", False),
        ("tombstone", False),
        ("rewrite", False),
        ("rewrite-with-tombstone", True),
        ("delete-to-tombstone", False),
    ],
)
def test_unwrap_tombstone_by_mode(mode: str, kept: bool) -> None:
    tombstone = record(None, {"id": 1})
    assert (unwrap_mode(mode).apply(tombstone) is not None) is kept


def test_unwrap_truncate_is_dropped() -> None:
    assert unwrap_mode("tombstone").apply(record(truncate_event())) is None


def test_unwrap_delete_dropped_with_drop() -> None:
    assert unwrap_mode("drop").apply(record(delete_event())) is None


@pytest.mark.parametrize("mode", ["tombstone", "delete-to-tombstone"])
def test_unwrap_delete_becomes_a_tombstone(mode: str) -> None:
    out = apply(unwrap_mode(mode), record(delete_event(), {"id": 1}))
    assert (out.key, out.value) == ({"id": 1}, None)


def test_unwrap_by_default_turns_a_delete_into_a_tombstone_and_drops_the_tombstone() -> None:
    # Debezium 3.2's default mode, ``tombstone``.
    assert apply(unwrap(), record(delete_event())).value is None
    assert unwrap().apply(record(None)) is None


def test_unwrap_delete_rewrite() -> None:
    out = apply(unwrap_mode("rewrite"), record(delete_event()))
    assert out.value == {"id": 1, "name": "myRecord", "__deleted": "true"}


def test_unwrap_create_rewrite_with_the_op_header() -> None:
    out = apply(unwrap_mode("rewrite", {"add.headers": "op"}), record(create_event()))
    assert out.value == {"id": 1, "name": "myRecord", "__deleted": "false"}
    assert out.headers == [("__op", "c")]


def test_unwrap_create() -> None:
    assert apply(unwrap_mode("tombstone"), record(create_event())).value == {"id": 1, "name": "myRecord"}


def test_unwrap_keeps_a_null_column() -> None:
    event = create_event()
    event["after"] = {"id": 1, "name": None}
    assert apply(unwrap_mode("tombstone"), record(event)).value == {"id": 1, "name": None}


@pytest.mark.parametrize(
    "value",
    [{"id": 1, "name": "a"}, {"ts_ms": 1, "databaseName": "db", "ddl": "CREATE TABLE t"}, "text", 42],
    ids=["row", "schema-change", "string", "number"],
)
def test_unwrap_leaves_what_is_not_a_change_event_unchanged_without_headers(value: Any) -> None:
    out = apply(unwrap_mode("tombstone", {"add.headers": "op,source.lsn"}), record(value))
    assert (out.value, out.headers) == (value, [])


def test_unwrap_propagates_the_records_headers() -> None:
    headers = [("application/debezium-test-header", "shouldPropagatePreviousRecordHeaders")]
    out = apply(unwrap_mode("tombstone"), record(create_event(), headers=headers))
    assert out.headers == headers


def test_unwrap_add_field_op() -> None:
    out = apply(unwrap_mode("tombstone", {"add.fields": "op"}), record(create_event()))
    assert out.value == {"id": 1, "name": "myRecord", "__op": "c"}


def test_unwrap_add_timestamps_of_the_event_and_of_its_source() -> None:
    event = create_event()
    event["source"]["ts_ms"] = 1588252618953
    assert apply(unwrap(add_fields="ts_ms"), record(event)).value["__ts_ms"] == 1710032523000
    assert apply(unwrap(add_fields="source.ts_ms"), record(event)).value["__source_ts_ms"] == 1588252618953


def test_unwrap_add_fields_with_a_prefix_finds_id_in_the_transaction() -> None:
    out = apply(
        unwrap_mode("tombstone", {"add.fields": "op , lsn,id", "add.fields.prefix": "prefix."}), record(update_event())
    )
    assert out.value == {"id": 1, "name": "updatedRecord", "prefix.op": "u", "prefix.lsn": 1234, "prefix.id": "571"}


def test_unwrap_new_field_and_header_names_take_the_prefix_too() -> None:
    chain = unwrap_mode(
        "tombstone",
        {
            "add.fields": "op:OP, lsn:LSN, id:ID, source.lsn:source_lsn, transaction.total_order:TOTAL_ORDER",
            "add.fields.prefix": "",
            "add.headers": "op, source.lsn:source_lsn, transaction.id:TXN_ID, transaction.total_order:TOTAL_ORDER",
            "add.headers.prefix": "prefix.",
        },
    )
    out = apply(chain, record(update_event()))
    assert out.value == {
        "id": 1,
        "name": "updatedRecord",
        "OP": "u",
        "LSN": 1234,
        "ID": "571",
        "source_lsn": 1234,
        "TOTAL_ORDER": 42,
    }
    assert out.headers == [
        ("prefix.op", "u"),
        ("prefix.source_lsn", 1234),
        ("prefix.TXN_ID", "571"),
        ("prefix.TOTAL_ORDER", 42),
    ]


def test_unwrap_add_fields_of_a_null_transaction_are_null() -> None:
    out = apply(unwrap_mode("tombstone", {"add.fields": "op,lsn,id"}), record(create_event()))
    assert out.value == {"id": 1, "name": "myRecord", "__op": "c", "__lsn": 1234, "__id": None}


def test_unwrap_add_fields_naming_their_struct() -> None:
    chain = unwrap_mode("tombstone", {"add.fields": "op,source.lsn,transaction.id,transaction.total_order"})
    out = apply(chain, record(update_event()))
    assert {k: v for k, v in out.value.items() if k.startswith("__")} == {
        "__op": "u",
        "__source_lsn": 1234,
        "__transaction_id": "571",
        "__transaction_total_order": 42,
    }


def test_unwrap_add_headers() -> None:
    out = apply(unwrap_mode("tombstone", {"add.headers": "op , lsn,id"}), record(update_event()))
    assert out.headers == [("__op", "u"), ("__lsn", 1234), ("__id", "571")]


def test_unwrap_add_headers_of_a_null_transaction_are_null() -> None:
    out = apply(unwrap_mode("tombstone", {"add.headers": "op,lsn,id"}), record(create_event()))
    assert out.headers == [("__op", "c"), ("__lsn", 1234), ("__id", None)]


def test_unwrap_add_headers_naming_their_struct_with_a_prefix() -> None:
    chain = unwrap_mode(
        "tombstone",
        {"add.headers": "op,source.lsn,transaction.id,transaction.total_order", "add.headers.prefix": "prefix."},
    )
    out = apply(chain, record(update_event()))
    assert out.headers == [
        ("prefix.op", "u"),
        ("prefix.source_lsn", 1234),
        ("prefix.transaction_id", "571"),
        ("prefix.transaction_total_order", 42),
    ]


def test_unwrap_add_headers_to_a_rewritten_delete_and_the_op_to_its_tombstone() -> None:
    chain = unwrap_mode("rewrite-with-tombstone", {"add.headers": "op,source.lsn"})
    out = apply(chain, record(delete_event()))
    assert out.value == {"id": 1, "name": "myRecord", "__deleted": "true"}
    assert out.headers == [("__op", "d"), ("__source_lsn", 1234)]
    tombstone = apply(chain, record(None))
    assert (tombstone.value, tombstone.headers) == (None, [("__op", "d")])


@pytest.mark.parametrize("mode", ["rewrite", "rewrite-with-tombstone"])
def test_unwrap_add_fields_to_a_rewritten_delete(mode: str) -> None:
    out = apply(unwrap_mode(mode, {"add.fields": "op,lsn,source.lsn"}), record(delete_event()))
    assert out.value == {
        "id": 1,
        "name": "myRecord",
        "__deleted": "true",
        "__op": "d",
        "__lsn": 1234,
        "__source_lsn": 1234,
    }


def test_unwrap_add_fields_skips_a_field_the_event_does_not_have() -> None:
    out = apply(
        unwrap_mode("tombstone", {"add.fields": "notExisting,op:OP", "add.fields.prefix": ""}), record(update_event())
    )
    assert out.value == {"id": 1, "name": "updatedRecord", "OP": "u"}


def test_unwrap_add_fields_finds_a_field_of_the_event_itself() -> None:
    # A field another transformation added to the event (not in source): Debezium reads it from the event.
    event = update_event()
    event["changes"] = ["name"]
    out = apply(
        unwrap_mode("tombstone", {"add.fields": "changes:META_SRC_CHANGED", "add.fields.prefix": ""}), record(event)
    )
    assert out.value["META_SRC_CHANGED"] == ["name"]


def test_unwrap_envelope_and_source_timestamps() -> None:
    event = create_event()
    event.update(ts_us=1710032523000123, ts_ns=1710032523000123456)
    event["source"].update(ts_ms=1588252618953, ts_us=1588252618953000, ts_ns=1588252618953000000)
    fields = (
        "source.table:META_SRC_TABLENAME,source.ts_ms:META_SRC_TS_MS,source.ts_us:META_SRC_TS_US,"
        "source.ts_ns:META_SRC_TS_NS,ts_ms:META_TS_MS,ts_us:META_TS_US,ts_ns:META_TS_NS,op:META_SRC_OP,"
        "source.scn:META_SRC_SCN"
    )
    out = apply(unwrap_mode("rewrite", {"add.fields": fields}), record(event))
    assert out.value == {
        "id": 1,
        "name": "myRecord",
        "__deleted": "false",
        "__META_SRC_TABLENAME": "test_table",
        "__META_SRC_TS_MS": 1588252618953,
        "__META_SRC_TS_US": 1588252618953000,
        "__META_SRC_TS_NS": 1588252618953000000,
        "__META_TS_MS": 1710032523000,
        "__META_TS_US": 1710032523000123,
        "__META_TS_NS": 1710032523000123456,
        "__META_SRC_OP": "c",
    }


def test_unwrap_add_fields_needs_a_map_row() -> None:
    event = create_event()
    event["after"] = '{"id": 1}'  # (as MongoDB's events carry it)
    assert apply(unwrap_mode("tombstone"), record(event)).value == '{"id": 1}'
    fails(unwrap_mode("tombstone", {"add.fields": "op"}), record(event), "[source field insertion]")


def test_unwrap_older_keys_delete_handling_mode_and_drop_tombstones() -> None:
    # Debezium before 3.2: delete.handling.mode (drop, rewrite, none) and drop.tombstones (default true).
    rewrite = unwrap(delete_handling_mode="rewrite")
    assert apply(rewrite, record(delete_event())).value == {"id": 1, "name": "myRecord", "__deleted": "true"}
    assert apply(rewrite, record(create_event())).value == {"id": 1, "name": "myRecord", "__deleted": "false"}
    assert rewrite.apply(record(None)) is None
    none = unwrap(delete_handling_mode="none", drop_tombstones="false")
    assert apply(none, record(delete_event())).value is None
    assert apply(none, record(None)).value is None
    keep_tombstones = unwrap(drop_tombstones="false")
    assert keep_tombstones.apply(record(delete_event())) is None  # (delete.handling.mode's default: drop)
    assert keep_tombstones.apply(record(None)) is not None


def test_unwrap_delete_tombstone_handling_mode_wins_over_the_older_keys() -> None:
    chain = unwrap(delete_tombstone_handling_mode="drop", delete_handling_mode="rewrite", drop_tombstones="false")
    assert chain.apply(record(delete_event())) is None
    assert chain.apply(record(None)) is None


def test_unwrap_config_modes() -> None:
    assert "delete.tombstone.handling.mode" in errors_of(DEBEZIUM, {"delete.tombstone.handling.mode": "jbsdfkjsd"})
    assert "delete.handling.mode" in errors_of(DEBEZIUM, {"delete.handling.mode": "keep"})
    assert "drop.tombstones" in errors_of(DEBEZIUM, {"drop.tombstones": "maybe"})
    # Debezium's enumerations ignore case.
    assert apply(unwrap_mode("REWRITE"), record(create_event())).value["__deleted"] == "false"


def test_unwrap_config_refuses_routing_by_a_field_and_dropping_fields_a_header_lists() -> None:
    # route.by.field renames topics, and the sinks here write records by the topic they were consumed from;
    # drop.fields.header.name drops the optional fields of a schema.
    assert "not supported" in errors_of(DEBEZIUM, {"route.by.field": "name"})["route.by.field"][0]
    errors = errors_of(DEBEZIUM, {"drop.fields.header.name": "drop-fields"})
    assert "not supported" in errors["drop.fields.header.name"][0]
    unwrap(drop_fields_from_key="false", drop_fields_keep_schema_compatible="true")


# --- the Iceberg sink's DebeziumTransform and CopyValue ------------------------------------------------------


def iceberg_event(op: str) -> dict[str, Any]:
    data = {"account_id": 1, "balance": 100, "last_updated": "2024-01-01T00:00:00Z"}
    return {
        "op": op,
        "ts_ms": 1700000000000,
        "source": {"db": "db", "schema": "schema", "table": "tbl"},
        "before": dict(data),
        "after": dict(data),
    }


def test_debezium_transform_leaves_a_tombstone() -> None:
    rec = record(None, {"account_id": 1})
    assert build(f"{ICEBERG}DebeziumTransform").apply(rec) is rec


def test_debezium_transform_schemaless() -> None:
    chain = build(f"{ICEBERG}DebeziumTransform", {"cdc.target.pattern": "{db}_x.{table}_x"})
    out = apply(chain, record(iceberg_event("u"), {"account_id": 1}, offset=17))
    assert out.value == {
        "account_id": 1,
        "balance": 100,
        "last_updated": "2024-01-01T00:00:00Z",
        "_cdc": {
            "op": "U",
            "ts": 1700000000000,
            "offset": 17,
            "source": "schema.tbl",  # the source's schema, where it has one (Postgres), else its db
            "target": "schema_x.tbl_x",
            "key": {"account_id": 1},
        },
    }


@pytest.mark.parametrize(("op", "expected"), [("c", "I"), ("r", "I"), ("u", "U"), ("d", "D"), ("x", "I")])
def test_debezium_transform_operation(op: str, expected: str) -> None:
    assert apply(build(f"{ICEBERG}DebeziumTransform"), record(iceberg_event(op))).value["_cdc"]["op"] == expected


def test_debezium_transform_delete_is_its_before_state() -> None:
    event = iceberg_event("d")
    event["after"] = None
    event["before"]["balance"] = 5
    assert apply(build(f"{ICEBERG}DebeziumTransform"), record(event)).value["balance"] == 5


def test_debezium_transform_target_defaults_to_db_and_table() -> None:
    event = iceberg_event("c")
    del event["source"]["schema"]
    cdc = apply(build(f"{ICEBERG}DebeziumTransform"), record(event, "not-a-map")).value["_cdc"]
    assert (cdc["source"], cdc["target"]) == ("db.tbl", "db.tbl")
    assert "key" not in cdc  # (only a map key)


def test_debezium_transform_drops_an_event_without_a_map_payload() -> None:
    event = iceberg_event("c")
    event["after"] = None
    assert build(f"{ICEBERG}DebeziumTransform").apply(record(event)) is None


def test_debezium_transform_needs_a_map_with_a_source() -> None:
    chain = build(f"{ICEBERG}DebeziumTransform")
    fails(chain, record("text"), "[Debezium transform]")
    event = iceberg_event("c")
    del event["source"]
    fails(chain, record(event), "[Debezium transform], found: null")
    event = iceberg_event("c")
    event["source"] = {"db": "db"}
    fails(chain, record(event), "no table")


def test_copy_value_leaves_a_tombstone() -> None:
    chain = build(f"{ICEBERG}CopyValue", {"source.field": "data", "target.field": "data_copy"})
    assert apply(chain, record(None)).value is None


def test_copy_value_schemaless() -> None:
    chain = build(f"{ICEBERG}CopyValue", {"source.field": "data", "target.field": "data_copy"})
    out = apply(chain, record({"id": 123, "data": "foobar"}))
    assert out.value == {"id": 123, "data": "foobar", "data_copy": "foobar"}


def test_copy_value_of_a_missing_field_is_null() -> None:
    chain = build(f"{ICEBERG}CopyValue", {"source.field": "data", "target.field": "data_copy"})
    assert apply(chain, record({"id": 1})).value == {"id": 1, "data_copy": None}


def test_copy_value_config_needs_both_fields() -> None:
    assert set(errors_of(f"{ICEBERG}CopyValue")) == {"source.field", "target.field"}


def test_copy_value_needs_a_map() -> None:
    fails(build(f"{ICEBERG}CopyValue", {"source.field": "a", "target.field": "b"}), record(1), "[copy value]")


# --- SimpleDateFormat patterns -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("yyyy-MM-dd'T'HH:mm:ss.SSSZ", "2017-01-03T06:30:01.864+0000"),
        ("yy MMM MMMM EEE EEEE D u", "17 Jan January Tue Tuesday 3 2"),
        ("h:mm a k K", "6:30 AM 6 6"),
        ("z zzzz X", "UTC Coordinated Universal Time Z"),
        ("'o''clock' ''", "o'clock '"),
        ("S SSSSS", "864 00864"),
    ],
)
def test_simple_date_format_formats_in_utc(pattern: str, expected: str) -> None:
    assert timestamps.format_millis(1483425001864, pattern) == expected


def test_simple_date_format_parses_a_zone_and_am_pm() -> None:
    assert timestamps.parse_millis("2017-01-03 07:30:01 +0100", "yyyy-MM-dd HH:mm:ss Z") == 1483425001000
    assert timestamps.parse_millis("03 Jan 2017 6:30 PM", "dd MMM yyyy h:mm a") == 1483468200000


def test_simple_date_format_two_digit_year_is_within_80_years_before_and_20_after() -> None:
    assert timestamps.parse_millis("99-01-01", "yy-MM-dd", now_year=2025) == 915148800000  # 1999
    assert timestamps.parse_millis("30-01-01", "yy-MM-dd", now_year=2025) == 1893456000000  # 2030


@pytest.mark.parametrize("pattern", ["yyyy-bb", "yyyy-q", "yyyy-T", "yyyy-e"])
def test_simple_date_format_refuses_letters_it_does_not_have(pattern: str) -> None:
    # (As Java's: "Illegal pattern character".)
    with pytest.raises(ValueError, match="Illegal pattern character"):
        timestamps.tokens(pattern)
