"""Create and edit: the form from the plugin definitions, live validation, text modes, diff, secrets."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse

from connectors import actions
from connectors.config import PLUGINS
from connectors.config.definitions import Importance
from connectors.forms import field_id
from connectors.models import Connector, DesiredState

pytestmark = pytest.mark.django_db

VALID = {
    "name": "orders-sink",
    "initial_state": "RUNNING",
    "cfg:connector.class": "iceberg",
    "cfg:topics": "orders",
    "cfg:iceberg.tables": "db.orders",
}


def error_box(html: str, key: str) -> str:
    match = re.search(rf'<div id="errors-{field_id(key)}"[^>]*>(.*?)</div>', html, re.S)
    assert match, f"no error box for {key}"
    return match.group(1)


def test_the_form_has_a_field_per_plugin_key_with_its_documentation(alice: Client) -> None:
    html = alice.get(reverse("connector-create") + "?plugin=iceberg").content.decode()
    plugin = PLUGINS[0]
    for key in plugin.keys:
        assert f'name="cfg:{key.name}"' in html, key.name
        assert f'<label for="{field_id(key.name)}">' in html, key.name
    for group in plugin.groups:
        assert group in html
    commit_interval = plugin.key("iceberg.control.commit.interval-ms")
    assert commit_interval is not None and commit_interval.documentation in html
    assert 'placeholder="300000"' in html  # the default, shown where the value goes
    # Low-importance keys are folded away under "Advanced options" or a closed group.
    low = next(k for k in plugin.keys if k.importance is Importance.LOW and k.group == "Tables")
    tables_group = html[html.index("<legend>Tables</legend>") :]
    assert tables_group.index("Advanced options") < tables_group.index(f'name="cfg:{low.name}"')
    assert "iceberg.catalog.*" in html and "+ Add property" in html


def test_a_valid_form_creates_the_connector(alice: Client) -> None:
    response = alice.post(
        reverse("connector-create"),
        {
            **VALID,
            "initial_state": "PAUSED",
            "extra-key": ["iceberg.catalog.uri", ""],
            "extra-value": ["sqlite://", ""],
        },
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("connector-detail", args=["orders-sink"])
    connector = Connector.objects.get(name="orders-sink")
    assert connector.config == {
        "connector.class": "iceberg",
        "topics": "orders",
        "iceberg.tables": "db.orders",
        "iceberg.catalog.uri": "sqlite://",
    }
    assert connector.desired_state == DesiredState.PAUSED


def test_an_invalid_config_is_rejected_with_the_error_at_its_field(alice: Client) -> None:
    response = alice.post(reverse("connector-create"), {**VALID, "cfg:iceberg.tables": "orders", "cfg:tasks.max": "x"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "must be namespace.table" in error_box(html, "iceberg.tables")
    assert "Invalid value x for configuration tasks.max" in error_box(html, "tasks.max")
    assert re.search(rf'id="{field_id("tasks.max")}"[^>]*aria-invalid="true"', html)
    # What the user typed is kept.
    assert 'value="orders"' in html and 'value="x"' in html
    assert not Connector.objects.exists()


def test_a_taken_name_is_reported_at_the_name(alice: Client, make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink")
    response = alice.post(reverse("connector-create"), VALID)
    assert response.status_code == 200
    box = re.search(r'<div id="errors-name"[^>]*>(.*?)</div>', response.content.decode(), re.S)
    assert box and "Connector orders-sink already exists" in box.group(1)


def test_live_validation_returns_every_field_error_box(alice: Client) -> None:
    response = alice.post(reverse("config-validate"), {**VALID, "cfg:iceberg.tables": "orders", "name": "a/b"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "must be namespace.table" in error_box(html, "iceberg.tables")
    # Boxes of fields without errors come back empty, so old errors are cleared.
    assert error_box(html, "topics") == ""
    for key in PLUGINS[0].keys:
        assert (
            f'id="errors-{field_id(key.name)}" class="field-errors" data-errors-for="{field_id(key.name)}" hx-swap-oob="true"'
            in html
        )
    assert re.search(
        r'<div id="errors-name"[^>]*hx-swap-oob="true"><ul><li>Connector name &#x27;a/b&#x27; may not', html
    )
    assert "2 to fix before saving" in html


def test_live_validation_of_a_valid_form_says_so(alice: Client) -> None:
    html = alice.post(reverse("config-validate"), VALID).content.decode()
    assert "No problems found" in html


def test_the_json_mode_accepts_a_connect_request_body(alice: Client) -> None:
    body = {
        "name": "orders-sink",
        "config": {"connector.class": "iceberg", "topics": "orders", "iceberg.tables": "db.o", "tasks.max": 3},
    }
    response = alice.post(
        reverse("connector-create"),
        {"name": "orders-sink", "initial_state": "RUNNING", "mode": "raw", "raw": json.dumps(body)},
    )
    assert response.status_code == 302
    assert Connector.objects.get().config["tasks.max"] == "3"


def test_the_properties_mode_reports_errors_by_key(alice: Client) -> None:
    text = "connector.class=iceberg\ntopics=orders\niceberg.tables=orders\n"
    response = alice.post(
        reverse("connector-create"), {"name": "orders-sink", "initial_state": "RUNNING", "mode": "raw", "raw": text}
    )
    assert response.status_code == 200
    box = re.search(r'<div id="errors-raw"[^>]*>(.*?)</div>', response.content.decode(), re.S)
    assert box and "<code>iceberg.tables</code>: &#x27;orders&#x27; must be namespace.table" in box.group(1)


def test_broken_json_is_reported_with_its_position(alice: Client) -> None:
    response = alice.post(reverse("config-validate"), {"mode": "raw", "raw": '{"topics": "a",}'})
    assert "not valid JSON" in response.content.decode() and "line 1 column" in response.content.decode()


def test_switching_modes_keeps_the_config(alice: Client) -> None:
    form_to_raw = alice.post(reverse("connector-create"), {**VALID, "switch": "raw"})
    assert form_to_raw.status_code == 200
    text = re.search(r'<textarea id="raw-config"[^>]*>(.*?)</textarea>', form_to_raw.content.decode(), re.S)
    assert text and json.loads(text.group(1).replace("&quot;", '"')) == {
        "connector.class": "iceberg",
        "iceberg.tables": "db.orders",
        "topics": "orders",
    }
    raw_to_properties = alice.post(
        reverse("connector-create"),
        {
            "name": "orders-sink",
            "mode": "raw",
            "raw": text.group(1).replace("&quot;", '"'),
            "raw_format": "properties",
            "switch": "raw",
        },
    )
    assert "connector.class=iceberg\niceberg.tables=db.orders\ntopics=orders\n" in raw_to_properties.content.decode()
    back_to_form = alice.post(
        reverse("connector-create"),
        {"name": "orders-sink", "mode": "raw", "raw": "topics=orders\nconnector.class=iceberg", "switch": "form"},
    )
    assert re.search(r'name="cfg:topics" value="orders"', back_to_form.content.decode())
    assert 'value="orders-sink"' in back_to_form.content.decode()
    assert not Connector.objects.exists()


def test_an_edit_shows_the_diff_before_it_applies(alice: Client, make_connector: Callable[..., Connector]) -> None:
    connector = make_connector("orders-sink", **{"tasks.max": "1"})
    response = alice.post(
        reverse("connector-edit", args=["orders-sink"]),
        {**VALID, "cfg:tasks.max": "4", "cfg:topics": "", "cfg:topics.regex": "orders-.*", "step": "review"},
    )
    assert response.status_code == 200
    html = response.content.decode()
    changes = {key: change for change, key in re.findall(r'<tr class="(\w+)" data-key="([^"]+)">', html)}
    assert changes == {"tasks.max": "changed", "topics": "removed", "topics.regex": "added"}
    assert "<del>1</del>" in html and "<ins>4</ins>" in html
    # Nothing is applied until the user confirms.
    connector.refresh_from_db()
    assert connector.config["tasks.max"] == "1"

    proposed = re.search(r'name="raw" value="([^"]*)"', html).group(1).replace("&quot;", '"')  # type: ignore[union-attr]
    fingerprint = re.search(r'name="fingerprint" value="(\w+)"', html).group(1)  # type: ignore[union-attr]
    applied = alice.post(
        reverse("connector-edit", args=["orders-sink"]),
        {"mode": "raw", "raw": proposed, "fingerprint": fingerprint, "step": "apply"},
    )
    assert applied.status_code == 302
    connector.refresh_from_db()
    assert connector.config["tasks.max"] == "4" and connector.config["topics.regex"] == "orders-.*"
    assert "topics" not in connector.config


def test_an_apply_against_a_config_that_moved_shows_the_new_diff(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    make_connector("orders-sink")
    review = alice.post(
        reverse("connector-edit", args=["orders-sink"]), {**VALID, "cfg:tasks.max": "4", "step": "review"}
    )
    fingerprint = re.search(r'name="fingerprint" value="(\w+)"', review.content.decode()).group(1)  # type: ignore[union-attr]
    actions.patch_config("orders-sink", {"tasks.max": "2"})  # someone else, meanwhile
    proposed = {"connector.class": "iceberg", "topics": "orders", "iceberg.tables": "db.orders", "tasks.max": "4"}
    response = alice.post(
        reverse("connector-edit", args=["orders-sink"]),
        {"mode": "raw", "raw": json.dumps(proposed), "fingerprint": fingerprint, "step": "apply"},
    )
    assert response.status_code == 200
    assert "The running config changed while you were reviewing" in response.content.decode()
    assert "<del>2</del>" in response.content.decode()
    assert Connector.objects.get().config["tasks.max"] == "2"


def test_secrets_are_never_sent_and_kept_unless_retyped(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    make_connector("orders-sink", **{"sasl.password": "old-secret", "iceberg.catalog.s3.secret-access-key": "old-key"})
    form = alice.get(reverse("connector-edit", args=["orders-sink"])).content.decode()
    assert "old-secret" not in form and "old-key" not in form
    assert "stored secret kept" in form

    # Empty secret fields mean "keep": the diff lists no secret change, and applying keeps both.
    posted = {
        **VALID,
        "cfg:sasl.password": "",
        "extra-key": ["iceberg.catalog.s3.secret-access-key"],
        "extra-value": [""],
        "cfg:tasks.max": "2",
        "step": "review",
    }
    review = alice.post(reverse("connector-edit", args=["orders-sink"]), posted).content.decode()
    assert re.findall(r'data-key="([^"]+)"', review) == ["tasks.max"]
    assert "old-secret" not in review
    proposed = re.search(r'name="raw" value="([^"]*)"', review).group(1).replace("&quot;", '"')  # type: ignore[union-attr]
    fingerprint = re.search(r'name="fingerprint" value="(\w+)"', review).group(1)  # type: ignore[union-attr]
    alice.post(
        reverse("connector-edit", args=["orders-sink"]),
        {"mode": "raw", "raw": proposed, "fingerprint": fingerprint, "step": "apply"},
    )
    config = Connector.objects.get().config
    assert (config["sasl.password"], config["iceberg.catalog.s3.secret-access-key"], config["tasks.max"]) == (
        "old-secret",
        "old-key",
        "2",
    )

    # A retyped secret replaces it, and the diff says so without showing either value.
    review = alice.post(
        reverse("connector-edit", args=["orders-sink"]),
        {**posted, "cfg:sasl.password": "new-secret", "cfg:tasks.max": "2"},
    ).content.decode()
    row = re.search(r'<tr class="changed" data-key="sasl.password">(.*?)</tr>', review, re.S)
    assert row and "[hidden]" in row.group(1) and "(new value)" in row.group(1)
    assert "old-secret" not in review


def test_a_stored_secret_can_be_cleared(alice: Client, make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink", **{"sasl.password": "old-secret"})
    review = alice.post(
        reverse("connector-edit", args=["orders-sink"]),
        {**VALID, "cfg:sasl.password": "", "clear:sasl.password": "on", "step": "review"},
    ).content.decode()
    assert re.search(r'<tr class="removed" data-key="sasl.password">', review)


def test_an_unchanged_review_says_nothing_changes(alice: Client, make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink")
    review = alice.post(reverse("connector-edit", args=["orders-sink"]), {**VALID, "step": "review"}).content.decode()
    assert "No changes:" in review
    assert 'value="apply"' not in review


def test_an_invalid_edit_stays_in_the_form_with_errors(alice: Client, make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink")
    response = alice.post(
        reverse("connector-edit", args=["orders-sink"]),
        {**VALID, "cfg:errors.tolerance": "sometimes", "step": "review"},
    )
    assert response.status_code == 200
    assert "must be one of none, all" in error_box(response.content.decode(), "errors.tolerance")


def test_a_new_connector_starts_with_the_choice_of_sink(alice: Client) -> None:
    html = alice.get(reverse("connector-create")).content.decode()
    for plugin in PLUGINS:
        assert f'href="{reverse("connector-create")}?plugin={plugin.short_name}"' in html
        assert plugin.title in html and plugin.class_name in html
    assert "cfg:connector.class" not in html  # no form until a sink is chosen


def test_the_files_sink_form_is_built_from_its_own_keys(alice: Client) -> None:
    html = alice.get(reverse("connector-create") + "?plugin=files").content.decode()
    for key in ("store.url", "topics.dir", "format.class", "flush.size", "partitioner.class", "path.format"):
        assert f'name="cfg:{key}"' in html, key
    assert 'name="cfg:iceberg.tables"' not in html
    for group in ("Storage", "Format", "Layout"):
        assert f"<legend>{group}</legend>" in html

    def create(flush_size: str) -> HttpResponse:
        form = {
            "name": "files-sink",
            "initial_state": "PAUSED",
            "cfg:connector.class": "files",
            "cfg:topics": "orders",
            "cfg:store.url": "/data/lake",
            "cfg:format.class": "json",
            "cfg:flush.size": flush_size,
        }
        return alice.post(reverse("connector-create"), form)

    assert "Value must be at least 1" in error_box(create("0").content.decode(), "flush.size")
    created = create("1000")
    assert created.status_code == 302
    assert Connector.objects.get(name="files-sink").config["format.class"] == "json"


def test_the_hudi_sink_form_is_built_from_its_own_keys(alice: Client) -> None:
    html = alice.get(reverse("connector-create") + "?plugin=hudi").content.decode()
    for key in ("target.base.path", "target.table.name", "hoodie.datasource.write.operation", "hoodie.table.type"):
        assert f'name="cfg:{key}"' in html, key
    assert 'name="cfg:iceberg.tables"' not in html and 'name="cfg:flush.size"' not in html

    def create(base_path: str) -> HttpResponse:
        form = {
            "name": "hudi-sink",
            "initial_state": "PAUSED",
            "cfg:connector.class": "hudi",
            "cfg:topics": "orders",
            "cfg:target.base.path": base_path,
            "cfg:target.table.name": "orders",
            "cfg:hoodie.datasource.write.recordkey.field": "id",
            "cfg:hoodie.table.type": "MERGE_ON_READ",
        }
        return alice.post(reverse("connector-create"), form)

    assert "must be an absolute path" in error_box(create("lake/orders").content.decode(), "target.base.path")
    assert create("/data/lake/orders").status_code == 302
    stored = Connector.objects.get(name="hudi-sink").config
    assert (stored["target.base.path"], stored["hoodie.table.type"]) == ("/data/lake/orders", "MERGE_ON_READ")


def test_the_mirror_form_is_built_from_its_own_keys_and_its_page_has_no_coordinator(alice: Client) -> None:
    html = alice.get(reverse("connector-create") + "?plugin=mirror").content.decode()
    for key in ("source.cluster.bootstrap.servers", "target.cluster.bootstrap.servers", "transaction.producer"):
        assert f'name="cfg:{key}"' in html, key
    assert 'name="cfg:value.converter"' not in html and 'name="cfg:iceberg.control.topic"' not in html

    def create(policy: str) -> HttpResponse:
        form = {
            "name": "east-to-west",
            "initial_state": "PAUSED",
            "cfg:connector.class": "mirror",
            "cfg:topics": "orders",
            "cfg:source.cluster.bootstrap.servers": "east:9092",
            "cfg:target.cluster.bootstrap.servers": "east:9092",
            "cfg:replication.policy.class": policy,
        }
        return alice.post(reverse("connector-create"), form)

    refused = error_box(create("IdentityReplicationPolicy").content.decode(), "replication.policy.class")
    assert "would write each topic into itself" in refused
    assert create("DefaultReplicationPolicy").status_code == 302
    page = alice.get(reverse("connector-detail", args=["east-to-west"])).content.decode()
    assert "Transactions" in page and "sinkadmin-mirror-east-to-west" in page and "No coordinator" in page
    assert "target (east:9092)" in page  # where it writes


def test_live_validation_asks_for_the_name_and_shows_keys_accepted_and_ignored(alice: Client) -> None:
    nameless = alice.post(reverse("config-validate"), {**VALID, "name": ""}).content.decode()
    assert "No problems found" not in nameless and "A name is required" in nameless
    hdfs = {
        "name": "hdfs-sink",
        "initial_state": "RUNNING",
        "cfg:connector.class": "io.confluent.connect.hdfs3.Hdfs3SinkConnector",
        "cfg:topics": "orders",
        "cfg:hdfs.url": "file:///data",
        "cfg:format.class": "io.confluent.connect.hdfs3.parquet.ParquetFormat",
        "cfg:flush.size": "3",
        "extra-key": "logs.dir",
        "extra-value": "logs",
    }
    html = alice.post(reverse("config-validate"), hdfs).content.decode()
    assert "No problems found" in html
    assert "<code>logs.dir</code>: ignored: the commit ledger" in html


def test_a_form_sent_without_name_topics_or_table_lists_all_three(alice: Client) -> None:
    empty = {"name": "", "initial_state": "RUNNING", "cfg:connector.class": "iceberg", "cfg:topics": ""}
    html = alice.post(reverse("connector-create"), {**empty, "cfg:iceberg.tables": ""}).content.decode()
    summary = re.search(r'<div class="panel-body" id="validation-summary"[^>]*>(.*?)</div>', html, re.S)
    assert summary is not None
    assert "3 to fix before saving" in summary.group(1) and "No problems found" not in summary.group(1)
    listed = re.findall(r"<li><a href=\"#[\w-]+\"><code>([\w.]+)</code></a>", summary.group(1))
    assert sorted(listed) == ["iceberg.tables", "name", "topics"]
    assert "Must configure one of topics or topics.regex" in error_box(html, "topics")
    assert not Connector.objects.exists()


def test_a_new_form_does_not_say_no_problems_before_anything_is_checked(alice: Client) -> None:
    html = alice.get(reverse("connector-create"), {"plugin": "iceberg"}).content.decode()
    summary = re.search(r'<div class="panel-body" id="validation-summary"[^>]*>(.*?)</div>', html, re.S)
    assert summary is not None
    assert "No problems found" not in summary.group(1)


def test_an_edit_of_a_failed_connector_restarts_it_with_the_new_config(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    connector = make_connector("orders-sink")
    actions.fail_connector(connector.pk, "record orders/0@3 cannot be converted (errors.tolerance=none)")
    review = alice.post(
        reverse("connector-edit", args=["orders-sink"]), {**VALID, "cfg:errors.tolerance": "all", "step": "review"}
    ).content.decode()
    proposed = re.search(r'name="raw" value="([^"]*)"', review).group(1).replace("&quot;", '"')  # type: ignore[union-attr]
    fingerprint = re.search(r'name="fingerprint" value="(\w+)"', review).group(1)  # type: ignore[union-attr]
    applied = alice.post(
        reverse("connector-edit", args=["orders-sink"]),
        {"mode": "raw", "raw": proposed, "fingerprint": fingerprint, "step": "apply"},
    )
    assert applied.status_code == 302
    restarted = Connector.objects.get(pk=connector.pk)
    # The same write path as the API's PUT: the new config runs, the old config's failure is gone.
    assert restarted.config["errors.tolerance"] == "all"
    assert (restarted.failed_at, restarted.failure_message) == (None, "")
    assert restarted.desired_state == DesiredState.RUNNING
