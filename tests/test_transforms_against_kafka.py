"""connectors.smt against the transformations' own code: random chains of Apache Kafka's transformations and
predicates and the Iceberg sink's DebeziumTransform and CopyValue, on random schemaless JSON records (change
events among them), and Debezium's ExtractNewRecordState with random options on change events in their schema
envelope, applied by their projects' code (connect-transforms 4.4.0, iceberg-kafka-connect-transforms 1.12.0,
debezium-connect-plugins 3.6.1, with the JsonConverter and SimpleHeaderConverter a sink connector's worker
reads records with: tests/integration/java/ApplyTransforms.java) and by the tasks' stage here
(``RecordTransformer.record``, then the chain). Both must refuse the same configs, and give each record the
same outcome: dropped, failed, or the same topic, partition, timestamp, key, value and headers, each value of
the same type (a Java Long an int, a Double or Float a float, bit for bit; a Struct a map). Records in
JsonConverter's schema envelope go through random chains too: what the stage writes of each (the envelope of
the schema the chain gives it) must be what JsonConverter writes of the record Kafka's transformations make.

Where the two differ on purpose (docs/transforms.md), the case is not generated or not compared:
- a Date is its ISO 8601 text here, where Kafka's schemaless TimestampConverter makes a ``java.util.Date``
  (compared as the instant it names). So a Timestamp, Date or Time target is only a chain's last step, records
  under a TimestampConverter hold no ISO text, and a date beyond the years 1-9999 (a bad record here) or a
  timestamp an earlier Cast made narrower than a long (refused by Kafka's) is not compared;
- two fields renamed to one name only in a chain's first step (Kafka's maps rebuilt by a step iterate in an
  order of their own);
- headers consumed, and InsertHeader's literal, in their canonical text; integers within 64 bits.
"""

from __future__ import annotations

import base64
import json
import math
import random
import re
import struct
from decimal import Decimal
from typing import Any

import pytest

from connectors.config import SinkConfig
from connectors.smt import TransformFailed, parse_chain, timestamps
from connectors.smt.kafka import float32, java_double
from tests.conftest import sink_config
from tests.java_oracles import run_oracle
from workers.staging import RecordChunk
from workers.transformed import RecordTransformer, _header, connect_json

K = "org.apache.kafka.connect.transforms."
ICEBERG = "org.apache.iceberg.connect.transforms."
DEBEZIUM = "io.debezium.transforms.ExtractNewRecordState"


FIELDS = ("a", "b", "id", "ts", "n", "s")
TOPICS = ("orders", "db.inv.orders", "logs-2024")


def random_scalar(rng: random.Random) -> Any:
    return rng.choice(
        [
            None,
            True,
            False,
            0,
            rng.randint(-300, 300),
            rng.randint(-(2**63), 2**63 - 1),
            rng.choice([0.5, -0.0, 1.0, 1e20, 2.5e-7, -123.75, 3.4e38, 1e300]),
            rng.choice(["", "abc", "12", "-7", "1.5", "true", "FALSE", " 3", "2024-01-02"]),
            rng.choice(["2024-01-02T03:04:05.678Z", "1700000000000", "x.y"]),
            1_700_000_000_123,
        ]
    )


def random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 2 and roll < 0.2:
        return {name: random_value(rng, depth + 1) for name in rng.sample(FIELDS, rng.randint(0, 3))}
    if depth < 2 and roll < 0.3:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 2))]
    return random_scalar(rng)


def random_record_value(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.08:
        return None  # a tombstone
    if roll < 0.16:
        return random_value(rng, 1)  # a value that is no object
    return {name: random_value(rng) for name in rng.sample(FIELDS, rng.randint(0, len(FIELDS)))}


def side(rng: random.Random) -> str:
    return rng.choice(["Key", "Value", "Value"])


def fields(rng: random.Random, most: int = 3) -> str:
    return ",".join(rng.sample(FIELDS, rng.randint(1, most)))


def random_step(rng: random.Random, first: bool) -> tuple[str, dict[str, str]]:
    """One of Kafka's transformations with random props (valid most of the time); ``first`` in its chain."""
    kind = rng.choice(
        [
            "InsertField",
            "ReplaceField",
            "MaskField",
            "Cast",
            "Flatten",
            "ExtractField",
            "HoistField",
            "ValueToKey",
            "TimestampConverter",
            "TimestampRouter",
            "RegexRouter",
            "Filter",
            "HeaderFrom",
            "InsertHeader",
            "DropHeaders",
            "DebeziumTransform",
            "CopyValue",
        ]
    )
    props: dict[str, str] = {}
    if kind == "InsertField":
        for key in rng.sample(["topic.field", "partition.field", "offset.field", "timestamp.field"], 2):
            props[key] = rng.choice(FIELDS) + rng.choice(["", "!", "?"])
        if rng.random() < 0.5:
            props["static.field"], props["static.value"] = rng.choice(FIELDS), rng.choice(["v", "42", ""])
        return f"{K}InsertField${side(rng)}", props
    if kind == "ReplaceField":
        roll = rng.random()
        if roll < 0.4:
            props["include"] = fields(rng)
        elif roll < 0.7:
            props["exclude"] = fields(rng)
        if rng.random() < 0.6:
            old, new = rng.sample(FIELDS, 2)
            # (Which of two fields renamed to one name wins follows the order of the map JsonConverter reads; a
            # map an earlier step rebuilt may iterate otherwise in Kafka: docs/transforms.md.)
            props["renames"] = f"{old}:{new if first else new + '_renamed'}"
        return f"{K}ReplaceField${side(rng)}", props
    if kind == "MaskField":
        props["fields"] = fields(rng)
        if rng.random() < 0.5:
            props["replacement"] = rng.choice(["****", "0", "12", "1.5", "x"])
        return f"{K}MaskField${side(rng)}", props
    if kind == "Cast":
        types = ["int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string"]
        if rng.random() < 0.2:
            props["spec"] = rng.choice(types)
        else:
            props["spec"] = ",".join(f"{name}:{rng.choice(types)}" for name in rng.sample(FIELDS, rng.randint(1, 3)))
        return f"{K}Cast${side(rng)}", props
    if kind == "Flatten":
        if rng.random() < 0.5:
            props["delimiter"] = rng.choice(["_", ".", "::"])
        return f"{K}Flatten${side(rng)}", props
    if kind == "ExtractField":
        props["field"] = rng.choice(FIELDS)
        if rng.random() < 0.3:
            props["field"] = f"{rng.choice(FIELDS)}.{rng.choice(FIELDS)}"
            props["field.syntax.version"] = "V2"
        return f"{K}ExtractField${side(rng)}", props
    if kind == "HoistField":
        props["field"] = rng.choice(FIELDS)
        return f"{K}HoistField${side(rng)}", props
    if kind == "ValueToKey":
        props["fields"] = fields(rng, 2)
        return f"{K}ValueToKey", props
    if kind == "TimestampConverter":
        target = rng.choice(["unix", "string", "Timestamp"])
        props["target.type"] = target
        if rng.random() < 0.8:
            props["field"] = rng.choice(["ts", "n", "s"])
        if target == "string" or rng.random() < 0.3:
            props["format"] = rng.choice(["yyyy-MM-dd", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'", "yyyyMMddHHmm"])
        if rng.random() < 0.4:
            props["unix.precision"] = rng.choice(["seconds", "milliseconds", "microseconds", "nanoseconds"])
        return f"{K}TimestampConverter${side(rng)}", props
    if kind == "TimestampRouter":
        props["topic.format"] = rng.choice(["${topic}-${timestamp}", "t_${timestamp}", "${topic}"])
        props["timestamp.format"] = rng.choice(["yyyyMMdd", "yyyy-MM-dd'T'HH"])
        return f"{K}TimestampRouter", props
    if kind == "RegexRouter":
        props["regex"], props["replacement"] = rng.choice(
            [(r"(.*)\.(.*)\.(.*)", "$3"), (r"orders", "o"), (r"(?<p>[a-z]+)-.*", "${p}_x"), (r"(.*)", "pre_$1")]
        )
        return f"{K}RegexRouter", props
    if kind == "Filter":
        return f"{K}Filter", props
    if kind == "HeaderFrom":
        chosen = rng.sample(FIELDS, rng.randint(1, 2))
        props["fields"] = ",".join(chosen)
        props["headers"] = ",".join(f"h_{name}" for name in chosen)
        props["operation"] = rng.choice(["copy", "move"])
        return f"{K}HeaderFrom${side(rng)}", props
    if kind == "InsertHeader":
        props["header"] = rng.choice(["h1", "source"])
        props["value.literal"] = rng.choice(["abc", "1", "true", "x y"])
        return f"{K}InsertHeader", props
    if kind == "DebeziumTransform":
        if rng.random() < 0.4:
            props["cdc.target.pattern"] = rng.choice(["{db}_x.{table}", "lake.{table}", "fixed"])
        return f"{ICEBERG}DebeziumTransform", props
    if kind == "CopyValue":
        props["source.field"], props["target.field"] = rng.choice((*FIELDS, "after")), rng.choice(FIELDS)
        return f"{ICEBERG}CopyValue", props
    props["headers"] = rng.choice(["h1", "h1,source", "h_a"])
    return f"{K}DropHeaders", props


def random_config(rng: random.Random) -> dict[str, str]:
    """A connector's transform keys: one to three steps, some under a predicate."""
    config: dict[str, str] = {}
    aliases = [f"t{i}" for i in range(rng.randint(1, 3))]
    config["transforms"] = ",".join(aliases)
    predicates: list[str] = []
    for alias in aliases:
        class_name, props = random_step(rng, first=alias == aliases[0])
        config[f"transforms.{alias}.type"] = class_name
        config.update({f"transforms.{alias}.{key}": value for key, value in props.items()})
        if rng.random() < 0.25 or class_name.endswith("Filter"):
            predicate = f"p{len(predicates)}"
            predicates.append(predicate)
            config[f"transforms.{alias}.predicate"] = predicate
            if rng.random() < 0.4:
                config[f"transforms.{alias}.negate"] = "true"
            kind = rng.choice(["TopicNameMatches", "HasHeaderKey", "RecordIsTombstone"])
            config[f"predicates.{predicate}.type"] = f"{K}predicates.{kind}"
            if kind == "TopicNameMatches":
                config[f"predicates.{predicate}.pattern"] = rng.choice([r"db\..*", "orders", ".*-\\d+"])
            elif kind == "HasHeaderKey":
                config[f"predicates.{predicate}.name"] = rng.choice(["h1", "source"])
    if predicates:
        config["predicates"] = ",".join(predicates)
    for alias in aliases[:-1]:
        # A Date is its ISO 8601 text here (docs/transforms.md): what later steps do with it is not Kafka's.
        if "TimestampConverter" in config[f"transforms.{alias}.type"]:
            config[f"transforms.{alias}.target.type"] = "unix"
    return config


def random_row(rng: random.Random) -> dict[str, Any]:
    return {"id": rng.randint(0, 9), "name": rng.choice(["a", "", None]), "price": rng.choice([1.5, 0.0, None])}


def random_change_event(rng: random.Random) -> dict[str, Any]:
    """A Debezium change event without its schema (a truncate or an event missing a part now and then)."""
    op = rng.choice(["c", "r", "u", "u", "d", "d", "t", "x"])
    source = {"db": "inv", "schema": "public", "table": "orders", "ts_ms": 1_700_000_000_000, "lsn": 77}
    if rng.random() < 0.15:
        del source[rng.choice(["schema", "table", "lsn"])]
    event: dict[str, Any] = {
        "before": random_row(rng) if op in ("u", "d") else None,
        "after": random_row(rng) if op in ("c", "r", "u", "x") else None,
        "source": source,
        "op": op,
        "ts_ms": rng.choice([1_700_000_000_123, None]),
    }
    if rng.random() < 0.1:
        del event[rng.choice(["op", "before", "after", "source"])]
    return event


def random_record(rng: random.Random, offset: int, change_events: bool = False) -> dict[str, Any]:
    key = rng.choice([None, {"id": rng.randint(0, 9)}, rng.randint(0, 9), "k", random_record_value(rng)])
    value = random_change_event(rng) if change_events and rng.random() < 0.85 else random_record_value(rng)
    return {
        "topic": rng.choice(TOPICS),
        "partition": rng.randint(0, 3),
        "offset": offset,
        "timestamp": rng.choice([None, 1_700_000_000_123, 0, 86_399_999]),
        "key": None if key is None else json.dumps(key),
        "value": None if value is None else json.dumps(value),
        "headers": [[name, text] for name, text in rng.sample([("h1", "x"), ("source", "1"), ("h2", "true")], 2)],
    }


ISO_TEXTS = ("2024-01-02T03:04:05.678Z", "2024-01-02")


def without_iso_text(record: dict[str, Any]) -> dict[str, Any]:
    """The record with no ISO 8601 text in its key or value: for TimestampConverter, which reads such text as the
    date it names here, where Kafka's record would have a date object (docs/transforms.md)."""
    for side in ("key", "value"):
        if record[side] is not None:
            for text in ISO_TEXTS:
                record[side] = record[side].replace(json.dumps(text), '"x.y"')
    return record


def tagged(value: Any) -> Any:
    """A value as the harness tags Java's (``ApplyTransforms.tagged``)."""
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int):
        return ["i", value]
    if isinstance(value, float):
        return ["d", struct.unpack("<q", struct.pack("<d", value))[0]]
    if isinstance(value, Decimal):
        return ["n", str(value)]
    if isinstance(value, bytes | bytearray):
        return ["b", base64.b64encode(value).decode()]
    if isinstance(value, list):
        return [tagged(item) for item in value]
    if isinstance(value, dict):
        return {str(name): tagged(item) for name, item in value.items()}
    raise AssertionError(f"no tag for {value!r}")


def same(java: Any, python: Any) -> bool:
    """Whether a tagged Java value is the Python one's: a java.util.Date is the instant its ISO text names."""
    if isinstance(java, list) and len(java) == 2 and java[0] == "t" and isinstance(python, str):
        try:
            return timestamps.parse_iso(python) == java[1]
        except ValueError:
            return False
    if isinstance(java, list) and len(java) == 2 and java[0] == "f" and isinstance(python, list) and python[0] == "d":
        # (A Float: here the double of its shortest text, which is what JSON carries of it: connectors.smt.float32.
        # JDK 17's Float.toString is not always the shortest: the two are compared as floats.)
        here = struct.unpack("<d", struct.pack("<q", python[1]))[0]
        return bool(float32(float(java[1])) == float32(here) or (math.isnan(here) and java[1] == "NaN"))
    if isinstance(java, dict) and isinstance(python, dict):
        return java.keys() == python.keys() and all(same(java[k], python[k]) for k in java)
    if isinstance(java, list) and isinstance(python, list):
        if len(java) == 2 and isinstance(java[0], str) and java[0] in "idnbtf":
            return java == python
        return len(java) == len(python) and all(same(j, p) for j, p in zip(java, python, strict=True))
    return bool(java == python)


# How the reason starts for a TimestampConverter's date beyond the years 1-9999 (Python's datetime).
OUT_OF_RANGE = "TimestampConverter cannot represent"
# What Kafka refuses and this does not, for want of Java's types in a schemaless record here: a timestamp an
# earlier Cast made an int, short or byte.
KAFKA_REFUSES_DATES = (
    *(f"does not support class java.lang.{kind} objects as timestamps" for kind in ("Integer", "Short", "Byte")),
)

CONVERTERS = {
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "false",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false",
}


def python_outcome(transformer: RecordTransformer, given: dict[str, Any]) -> dict[str, Any]:
    """The record through the tasks' stage, in the harness's form."""
    chunk = RecordChunk(
        given["topic"],
        given["partition"],
        [given["offset"]],
        [given["timestamp"]],
        [None if given["key"] is None else given["key"].encode()],
        [None if given["value"] is None else given["value"].encode()],
        [[(name, text.encode()) for name, text in given["headers"]]],
        [None],
    )
    try:
        if transformer.envelope:
            done = transformer.chain.apply_with_schema(*transformer.record_with_schema(chunk, 0))
            record = None if done is None else done[0]
        else:
            record = transformer.chain.apply(transformer.record(chunk, 0))
    except (TransformFailed, ValueError) as exc:
        return {"failed": str(exc)}
    if record is None:
        return {"dropped": True}
    if transformer.envelope:
        # With a schema: the record as the stage writes it, in the envelope of the schema the chain gives it.
        staged, _ = transformer.apply(chunk)
        if staged.errors[0] is not None:
            return {"failed": staged.errors[0]}
        raw = staged.values[0]
        # (Its doubles as Python writes them, as the harness's are read.)
        record.value = None if raw is None else json.loads(raw, parse_float=lambda text: repr(float(text)))
    # (A key or value the chain does not read is staged as consumed: the text Kafka's converter reads.)
    key = record.key if transformer.keys_used else None if given["key"] is None else connect_json(given["key"].encode())
    if transformer.envelope:
        value = record.value
    else:
        value = (
            record.value if transformer.values_used else None if record.value is None else connect_json(record.value)
        )
    return {
        "topic": record.topic,
        "partition": record.partition,
        "timestamp": record.timestamp,
        "key": tagged(key),
        **({"staged": value} if transformer.envelope else {"value": tagged(value)}),
        "headers": [
            [name, None if (raw := _header(value)) is None else raw.decode()] for name, value in record.headers
        ],
    }


def same_header(java: str | None, python: str | None) -> bool:
    """Whether a header's text is Kafka's: a map's or a list's as the JSON it is (a Java map's fields are in its
    hash order), a Float's as the float it is (JDK 17's Float.toString is not always the shortest)."""
    if java == python or java is None or python is None:
        return java == python
    if java[:1] in "{[" and re.search(r"[:,\[]\d{2,4}[-:]\d\d", java):
        # (A struct holding a Date, Time or Timestamp: Kafka's header converter writes the date's text bare in
        # it, which is no JSON; here it is JSON, the date its number.)
        return True
    try:
        if java[:1] in "{[":
            return same_text_numbers(json.loads(java, parse_float=str), json.loads(python, parse_float=str))
        return same_text_numbers(java, python)
    except ValueError:
        return False


def same_text_numbers(java: Any, python: Any) -> bool:
    """JSON read with its doubles as text: the same, but a double's text may be the float's of the same value
    in Java's form (``1.7E12`` for JDK 17's ``1.70000004E12``)."""
    if isinstance(java, dict) and isinstance(python, dict):
        return java.keys() == python.keys() and all(same_text_numbers(java[k], python[k]) for k in java)
    if isinstance(java, list) and isinstance(python, list):
        return len(java) == len(python) and all(same_text_numbers(j, p) for j, p in zip(java, python, strict=True))
    if isinstance(java, str) and isinstance(python, str) and java != python:
        try:
            here = float(python)
        except ValueError:
            return False
        # (JDK 17's Float.toString may be longer than the float's shortest text, never shorter.)
        return len(python) < len(java) and java_double(here) == python and float32(float(java)) == float32(here)
    return bool(java == python)


def same_staged(java: Any, python: Any) -> bool:
    """Whether the stage's envelope is JsonConverter's: the same schema, and the same payload, a ``float`` (32
    bits) the same float whatever the digits it is written with (its doubles read as text)."""
    if not (isinstance(java, dict) and isinstance(python, dict)):
        return bool(java == python)
    return java.get("schema") == python.get("schema") and same_payload(
        java.get("schema"), java.get("payload"), python.get("payload")
    )


def same_payload(schema: Any, java: Any, python: Any) -> bool:
    if isinstance(schema, dict) and schema.get("type") == "float" and isinstance(java, str) and isinstance(python, str):
        return float32(float(java)) == float32(float(python))
    if (
        isinstance(schema, dict)
        and schema.get("type") == "struct"
        and isinstance(java, dict)
        and isinstance(python, dict)
    ):
        fields = {f["field"]: f for f in schema["fields"]}
        return java.keys() == python.keys() and all(same_payload(fields.get(k), java[k], python[k]) for k in java)
    if (
        isinstance(schema, dict)
        and schema.get("type") == "array"
        and isinstance(java, list)
        and isinstance(python, list)
    ):
        return len(java) == len(python) and all(
            same_payload(schema.get("items"), j, p) for j, p in zip(java, python, strict=True)
        )
    return bool(java == python)


def differences(config: dict[str, str], job: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """How the tasks' stage differs from the harness's ``result`` of ``job`` (whose chain ``config`` keys)."""
    chain, errors = parse_chain(config)
    if "config_error" in result or errors:
        if ("config_error" in result) != bool(errors):
            return [f"config: Kafka {result.get('config_error')!r}, here {errors!r}"]
        return []
    assert chain is not None
    converters = {**CONVERTERS, "value.converter.schemas.enable": str(job.get("schemas", False)).lower()}
    transformer = RecordTransformer(SinkConfig.parse(sink_config("orders", "db.t", **converters)), chain)
    found = []
    for given, outcome in zip(job["records"], result["results"], strict=True):
        python = python_outcome(transformer, given)
        java = dict(outcome)
        if transformer.envelope and "staged_error" in java:
            # (JsonConverter cannot write what Kafka's transformation made: a MaskField's zero of another scale
            # than its Decimal's, say. A sink is handed the record still; not compared.)
            continue
        if transformer.envelope and "value" in java:
            del java["value"]
            if not transformer.values_used:
                # (The value staged as consumed: JsonConverter writes the same value again, its Decimals' base64
                # and floats perhaps otherwise.)
                java.pop("staged", None)
                python.pop("staged", None)
            elif "staged" in java:
                java["staged"] = json.loads(json.dumps(java["staged"]), parse_float=str)
                if isinstance(java["staged"], dict) and java["staged"].get("payload") is None:
                    # (A null value keeps its schema in Kafka's record; the stage writes it as a tombstone.)
                    java["staged"] = None
            if "ValueToKey" in str(config):
                # (A key is staged schemaless: ValueToKey's Struct of a Date, say, is its JSON number here.)
                java.pop("key", None)
                python.pop("key", None)
        if "failed" in java or "failed" in python:
            if OUT_OF_RANGE in python.get("failed", "") or any(
                reason in java.get("failed", "") for reason in KAFKA_REFUSES_DATES
            ):
                continue  # (docs/transforms.md)
            if ("failed" in java) != ("failed" in python):
                found.append(f"{given}: Kafka {java}, here {python}")
        elif "dropped" in java or "dropped" in python:
            if java != python:
                found.append(f"{given}: Kafka {java}, here {python}")
        elif not (
            java.keys() == python.keys()
            and all(
                same_staged(java[k], python[k]) if k == "staged" else same(java[k], python[k])
                for k in java
                if k != "headers"
            )
            and len(java["headers"]) == len(python["headers"])
            and all(
                j_name == p_name and same_header(j_text, p_text)
                for (j_name, j_text), (p_name, p_text) in zip(java["headers"], python["headers"], strict=True)
            )
        ):
            found.append(f"{given}: Kafka {java}, here {python}")
    return found


ROW_SCHEMA = {
    "type": "struct",
    "optional": True,
    "name": "inv.public.orders.Value",
    "fields": [
        {"field": "id", "type": "int64", "optional": False},
        {"field": "name", "type": "string", "optional": True},
        {"field": "price", "type": "double", "optional": True},
    ],
}
# A change event's schema, as Debezium's PostgreSQL connector writes it (JsonConverter's envelope).
ENVELOPE_SCHEMA = {
    "type": "struct",
    "optional": False,
    "name": "inv.public.orders.Envelope",
    "fields": [
        {**ROW_SCHEMA, "field": "before"},
        {**ROW_SCHEMA, "field": "after"},
        {
            "field": "source",
            "type": "struct",
            "optional": False,
            "name": "io.debezium.connector.postgresql.Source",
            "fields": [
                {"field": "version", "type": "string", "optional": False},
                {"field": "connector", "type": "string", "optional": False},
                {"field": "name", "type": "string", "optional": False},
                {"field": "ts_ms", "type": "int64", "optional": False},
                {"field": "snapshot", "type": "string", "optional": True},
                {"field": "db", "type": "string", "optional": False},
                {"field": "schema", "type": "string", "optional": False},
                {"field": "table", "type": "string", "optional": False},
                {"field": "lsn", "type": "int64", "optional": True},
            ],
        },
        {"field": "op", "type": "string", "optional": False},
        {"field": "ts_ms", "type": "int64", "optional": True},
        {
            "field": "transaction",
            "type": "struct",
            "optional": True,
            "name": "event.block",
            "fields": [
                {"field": "id", "type": "string", "optional": False},
                {"field": "total_order", "type": "int64", "optional": False},
                {"field": "data_collection_order", "type": "int64", "optional": False},
            ],
        },
    ],
}


def random_enveloped_event(rng: random.Random, offset: int) -> str | None:
    """A change event in JsonConverter's schema envelope (a tombstone now and then)."""
    if rng.random() < 0.12:
        return None
    op = rng.choice(["c", "r", "u", "u", "d", "d", "t"])
    payload = {
        "before": random_row(rng) | {"id": offset} if op in ("u", "d") else None,
        "after": random_row(rng) | {"id": offset} if op in ("c", "r", "u") else None,
        "source": {
            "version": "3.6.1.Final",
            "connector": "postgresql",
            "name": "inv",
            "ts_ms": 1_700_000_000_000 + offset,
            "snapshot": "true" if op == "r" else "false",
            "db": "inv",
            "schema": "public",
            "table": "orders",
            "lsn": rng.choice([None, 33_000 + offset]),
        },
        "op": op,
        "ts_ms": rng.choice([None, 1_700_000_000_500]),
        "transaction": rng.choice([None, {"id": "tx1", "total_order": 3, "data_collection_order": 1}]),
    }
    return json.dumps({"schema": ENVELOPE_SCHEMA, "payload": payload})


def random_unwrap_config(rng: random.Random) -> dict[str, str]:
    """Debezium's ExtractNewRecordState with random props (its keys of Debezium 3)."""
    config = {"transforms": "unwrap", "transforms.unwrap.type": DEBEZIUM}
    if rng.random() < 0.8:
        config["transforms.unwrap.delete.tombstone.handling.mode"] = rng.choice(
            ["drop", "tombstone", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone"]
        )
    for key, names in (
        ("add.fields", ["op", "table", "lsn", "source.ts_ms", "ts_ms", "db", "transaction.id", "op:operation"]),
        ("add.headers", ["op", "source.ts_ms", "db", "lsn"]),
    ):
        if rng.random() < 0.5:
            config[f"transforms.unwrap.{key}"] = ",".join(rng.sample(names, rng.randint(1, 3)))
            if rng.random() < 0.3:
                config[f"transforms.unwrap.{key}.prefix"] = "_"
    return config


@pytest.mark.parametrize("seed", range(3))
def test_the_unwrap_does_what_debeziums_own_extract_new_record_state_does(seed: int) -> None:
    """On change events with their schema (value.converter.schemas.enable=true), as Debezium's connectors write
    them; the stage transforms their payload."""
    rng = random.Random(seed)
    configs = [random_unwrap_config(rng) for _ in range(60)]
    jobs = []
    for config in configs:
        records = []
        for offset in range(12):
            record = random_record(rng, offset)
            record["key"] = json.dumps({"id": offset})
            record["value"] = random_enveloped_event(rng, offset)
            records.append(record)
        jobs.append({"config": config, "schemas": True, "records": records})
    results = run_oracle("ApplyTransforms.java", jobs)
    found = [
        f"{config}\n  {difference}"
        for config, job, result in zip(configs, jobs, results, strict=True)
        for difference in differences(config, job, result)
    ]
    assert not found, f"{len(found)} difference(s):\n" + "\n".join(found[:15])


@pytest.mark.parametrize("seed", range(6))
def test_random_chains_do_what_kafkas_own_transformations_do(seed: int) -> None:
    rng = random.Random(seed)
    configs = [random_config(rng) for _ in range(150)]
    jobs = [
        {"config": config, "records": [random_record(rng, i, "DebeziumTransform" in str(config)) for i in range(12)]}
        for config in configs
    ]
    for config, job in zip(configs, jobs, strict=True):
        if any("TimestampConverter" in value for value in config.values()):
            job["records"] = [without_iso_text(record) for record in job["records"]]
    results = run_oracle("ApplyTransforms.java", jobs)
    assert len(results) == len(jobs)
    found = [
        f"{config}\n  {difference}"
        for config, job, result in zip(configs, jobs, results, strict=True)
        for difference in differences(config, job, result)
    ]
    assert not found, f"{len(found)} difference(s):\n" + "\n".join(found[:15])


# Kafka Connect's types a field of a random schema takes, and the logical ones.
SCALAR_TYPES = ("int8", "int16", "int32", "int64", "float", "double", "boolean", "string", "bytes")
LOGICAL_TYPES = {
    "decimal": ("bytes", "org.apache.kafka.connect.data.Decimal"),
    "date": ("int32", "org.apache.kafka.connect.data.Date"),
    "time": ("int32", "org.apache.kafka.connect.data.Time"),
    "timestamp": ("int64", "org.apache.kafka.connect.data.Timestamp"),
}


def random_field_schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    roll = rng.random()
    optional = rng.random() < 0.5
    if depth == 0 and roll < 0.12:
        names = rng.sample(FIELDS, rng.randint(1, 3))
        return {
            "type": "struct",
            "optional": optional,
            "fields": [{**random_field_schema(rng, depth + 1), "field": name} for name in names],
        }
    if roll < 0.2:
        return {"type": "array", "optional": optional, "items": {"type": "string", "optional": False}}
    if roll < 0.5:
        kind, name = LOGICAL_TYPES[rng.choice(list(LOGICAL_TYPES))]
        schema: dict[str, Any] = {"type": kind, "optional": optional, "name": name, "version": 1}
        if name.endswith("Decimal"):
            schema["parameters"] = {"scale": str(rng.randint(0, 3))}
        return schema
    return {"type": rng.choice(SCALAR_TYPES), "optional": optional}


def random_payload(rng: random.Random, schema: dict[str, Any]) -> Any:
    """A value of ``schema`` as JsonConverter writes it."""
    if schema["optional"] and rng.random() < 0.2:
        return None
    kind, name = schema["type"], schema.get("name")
    if kind == "struct":
        return {f["field"]: random_payload(rng, f) for f in schema["fields"]}
    if kind == "array":
        return [rng.choice(["x", "1", "2024-01-02"]) for _ in range(rng.randint(0, 2))]
    if name and name.endswith("Decimal"):
        unscaled = rng.choice([0, 1, -1, 1250, -99999, 2**40])
        return base64.b64encode(unscaled.to_bytes(8, "big", signed=True).lstrip(b"\0") or b"\0").decode()
    if name and name.endswith("Date"):
        return rng.choice([0, 19_700, -3])
    if name and name.endswith("Time"):
        return rng.choice([0, 45_000_123, 86_399_999])
    if name and name.endswith("Timestamp"):
        return rng.choice([0, 1_700_000_000_123, -86_400_001])
    if kind.startswith("int"):
        bits = int(kind[3:])
        return rng.choice([0, 1, -7, 2 ** (bits - 1) - 1, -(2 ** (bits - 1))])
    if kind in ("float", "double"):
        # (A float's values are exact in 32 bits, and as short as Java writes them.)
        return rng.choice([0.0, 1.5, -123.75, 1e20 if kind == "double" else 1048576.0])
    if kind == "boolean":
        return rng.choice([True, False])
    if kind == "bytes":
        return rng.choice(["", "AQID", "aGk="])
    return rng.choice(["", "abc", "12", "1.5", "true", "2024-01-02"])


def random_schema_record(rng: random.Random, offset: int) -> dict[str, Any]:
    """A record whose value is in JsonConverter's schema envelope: mostly a struct of random fields, now and then
    a value of another type, a tombstone, or an envelope without a schema."""
    record = random_record(rng, offset)
    roll = rng.random()
    if roll < 0.08:
        record["value"] = None
        return record
    if roll < 0.2:
        schema = random_field_schema(rng, 1)
    else:
        names = rng.sample(FIELDS, rng.randint(1, len(FIELDS)))
        schema = {
            "type": "struct",
            "optional": rng.random() < 0.3,
            "name": "inv.public.orders.Value",
            "fields": [{**random_field_schema(rng), "field": name} for name in names],
        }
    if roll > 0.97:
        record["value"] = json.dumps({"schema": None, "payload": random_record_value(rng)})
    else:
        record["value"] = json.dumps({"schema": schema, "payload": random_payload(rng, schema)})
    return record


@pytest.mark.parametrize("seed", range(4))
def test_random_chains_on_records_with_schemas_give_the_schemas_kafkas_own_transformations_give(seed: int) -> None:
    """Records in JsonConverter's schema envelope (value.converter.schemas.enable=true) through random chains of
    Kafka's transformations and the Iceberg sink's: the stage writes each in the envelope of the schema the
    chain gives it, as JsonConverter writes what Kafka's transformations make of it (schema and payload)."""
    rng = random.Random(1000 + seed)
    configs = [random_config(rng) for _ in range(150)]
    jobs = [
        {"config": config, "schemas": True, "records": [random_schema_record(rng, i) for i in range(12)]}
        for config in configs
    ]
    for config, job in zip(configs, jobs, strict=True):
        if any("TimestampConverter" in value for value in config.values()):
            job["records"] = [without_iso_text(record) for record in job["records"]]
    results = run_oracle("ApplyTransforms.java", jobs)
    found = [
        f"{config}\n  {difference}"
        for config, job, result in zip(configs, jobs, results, strict=True)
        if not key_with_schema(config)
        for difference in differences(config, job, result)
    ]
    assert not found, f"{len(found)} difference(s):\n" + "\n".join(found[:15])


def key_with_schema(config: dict[str, str]) -> bool:
    """Whether a $Key transformation comes after a ValueToKey: Kafka's key then has a schema (its Struct's), and
    its transformations of keys with a schema differ; keys here are schemaless (docs/transforms.md)."""
    types = [config[f"transforms.{alias}.type"] for alias in config["transforms"].split(",")]
    first = next((i for i, kind in enumerate(types) if kind.endswith("ValueToKey")), len(types))
    return any(kind.endswith("$Key") for kind in types[first:])
