"""GET /connector-plugins, GET .../{plugin}/config, PUT .../{plugin}/config/validate."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from connectors.config import validate_config
from tests.api.conftest import BASE, CONFIG

pytestmark = pytest.mark.django_db

PLUGINS = f"{BASE}/connector-plugins"
ICEBERG = "org.apache.iceberg.connect.IcebergSinkConnector"
FILES = "io.confluent.connect.hdfs.HdfsSinkConnector"


def _errors(body: dict[str, Any]) -> dict[str, list[str]]:
    return {c["value"]["name"]: c["value"]["errors"] for c in body["configs"] if c["value"]["errors"]}


def test_it_lists_the_sink_plugins(api: APIClient) -> None:
    response = api.get(PLUGINS)
    assert response.status_code == 200
    assert response.json() == [
        {"class": ICEBERG, "type": "sink", "version": "0.1.0"},
        {"class": FILES, "type": "sink", "version": "0.1.0"},
        {"class": "org.apache.hudi.connect.HoodieSinkConnector", "type": "sink", "version": "0.1.0"},
        {"class": "org.apache.kafka.connect.mirror.MirrorSinkConnector", "type": "sink", "version": "0.1.0"},
    ]


@pytest.mark.parametrize("plugin", [FILES, "io.confluent.connect.s3.S3SinkConnector", "Hdfs3SinkConnector", "files"])
def test_the_files_sink_validates_with_its_own_keys(api: APIClient, plugin: str) -> None:
    config = {"connector.class": plugin, "topics": "orders", "format.class": "avro", "avro.codec": "lzma"}
    body = api.put(f"{PLUGINS}/{plugin}/config/validate", config, format="json").json()
    errors = _errors(body)
    assert body["name"] == FILES
    assert "flush.size" in errors and "avro.codec" in errors
    assert "iceberg.tables" not in {c["definition"]["name"] for c in body["configs"]}
    assert ("s3.bucket.name" in errors) == plugin.endswith("S3SinkConnector")


def test_connectors_only_false_adds_the_converters(api: APIClient) -> None:
    body = api.get(f"{PLUGINS}?connectorsOnly=false").json()
    assert body[0]["class"] == ICEBERG
    converters = {p["class"] for p in body if p["type"] == "converter"}
    assert "org.apache.kafka.connect.json.JsonConverter" in converters
    assert "io.confluent.connect.avro.AvroConverter" in converters
    assert "json" not in converters


@pytest.mark.parametrize("plugin", [ICEBERG, "IcebergSinkConnector", "IcebergSink", "iceberg"])
def test_it_gives_a_plugins_config_keys_by_any_of_its_names(api: APIClient, plugin: str) -> None:
    response = api.get(f"{PLUGINS}/{plugin}/config")
    assert response.status_code == 200
    keys = {key["name"]: key for key in response.json()}
    assert keys["iceberg.tables"] == {
        "name": "iceberg.tables",
        "type": "LIST",
        # (Not with dynamic routing, which names each record's table: required by the validation otherwise.)
        "required": False,
        "default_value": None,
        "importance": "HIGH",
        "documentation": "Comma-separated target tables, as namespace.table. Required unless "
        "iceberg.tables.dynamic-enabled.",
        "group": "Tables",
        "width": "MEDIUM",
        "display_name": "iceberg.tables",
        "dependents": [],
        "order": 1,
    }
    assert keys["sasl.password"]["type"] == "PASSWORD"


def test_config_of_an_unknown_plugin_is_a_404(api: APIClient) -> None:
    response = api.get(f"{PLUGINS}/FileStreamSinkConnector/config")
    assert response.json() == {"error_code": 404, "message": "Unknown plugin FileStreamSinkConnector."}


def test_validate_accepts_a_good_config(api: APIClient) -> None:
    response = api.put(f"{PLUGINS}/IcebergSinkConnector/config/validate", CONFIG, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["name"] == ICEBERG
    assert body["error_count"] == 0
    assert "Tables" in body["groups"]
    assert {c["definition"]["name"] for c in body["configs"]} >= {"topics", "iceberg.tables", "tasks.max"}


def test_validate_reports_errors_per_key_like_the_form_validator(api: APIClient) -> None:
    config = {**CONFIG, "tasks.max": "0", "topics": "", "errors.deadletterqueue.topic.name": "dlq"}
    response = api.put(f"{PLUGINS}/{ICEBERG}/config/validate", config, format="json")
    assert response.status_code == 200
    body = response.json()
    assert _errors(body) == validate_config(config).errors
    assert body["error_count"] == 3
    assert _errors(body)["tasks.max"] == ["Invalid value 0 for configuration tasks.max: Value must be at least 1"]


def test_validate_hides_secret_values(api: APIClient) -> None:
    config = {**CONFIG, "sasl.password": "pw-value", "sinkadmin.bogus.secret": "other-value"}
    text = api.put(f"{PLUGINS}/iceberg/config/validate", config, format="json").content.decode()
    assert "pw-value" not in text and "other-value" not in text and "s3-secret-value" not in text
    assert "[hidden]" in text


def test_validate_uses_the_path_plugin_when_the_body_names_none(api: APIClient) -> None:
    config = {k: v for k, v in CONFIG.items() if k != "connector.class"}
    body = api.put(f"{PLUGINS}/IcebergSinkConnector/config/validate", config, format="json").json()
    assert body["error_count"] == 0


def test_validate_refuses_a_body_for_another_plugin(api: APIClient) -> None:
    config = {**CONFIG, "connector.class": "org.apache.hudi.connect.HoodieSinkConnector"}
    response = api.put(f"{PLUGINS}/IcebergSinkConnector/config/validate", config, format="json")
    assert response.json() == {
        "error_code": 400,
        "message": "Included connector type org.apache.hudi.connect.HoodieSinkConnector does not match "
        "request type IcebergSinkConnector",
    }


def test_validate_a_mirror_config_per_key(api: APIClient) -> None:
    config = {
        "connector.class": "org.apache.kafka.connect.mirror.MirrorSinkConnector",
        "topics": "orders",
        "source.cluster.bootstrap.servers": "east:9092",
        "offset-syncs.topic.location": "source",
        "transaction.producer": "maybe",
    }
    response = api.put(f"{PLUGINS}/MirrorSinkConnector/config/validate", config, format="json")
    assert response.status_code == 200
    assert _errors(response.json()) == {
        "target.cluster.bootstrap.servers": [
            'Missing required configuration "target.cluster.bootstrap.servers" which has no default value.'
        ],
        "offset-syncs.topic.location": [
            "the offset syncs are written on the target cluster, in the transaction of the records they describe "
            "(a sync on the source could not be), and survive the source cluster's loss: set target"
        ],
        "transaction.producer": [
            "Invalid value maybe for configuration transaction.producer: Expected value to be either true or false"
        ],
    }


def test_validate_needs_a_json_object(api: APIClient) -> None:
    response = api.put(f"{PLUGINS}/iceberg/config/validate", "topics=orders", content_type="text/plain")
    assert response.status_code == 415
    assert response.json()["error_code"] == 415
