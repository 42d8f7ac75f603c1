"""A prepared commit that cannot be applied (DESIGN I9's exception: the table changed under it after the
write): the coordinator fails on it naming the commit, the table and why, and the documented way out,
abandoning it (POST /connectors/{name}/commits/{id}/abandon), writes its records again, each once. A commit
the sink already holds is never abandoned: that would write its records twice."""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from connectors.config import SinkConfig
from connectors.models import Commit, CommitState, Connector, CoordinatorStatus
from sinks.iceberg.tables import catalog_for
from tests.integration.helpers import Processes, caught_up, wait_until
from tests.integration.test_crashes import assert_exactly_once, setup_connector
from workers import runtime
from workers.coordinator import CommitNotApplied

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

API = "/api/connect/connectors"


@pytest.fixture
def api(operator: User, settings: Any) -> APIClient:
    # A killed coordinator's lease is seen as ended after this long (it never says it stopped).
    settings.HEARTBEAT_TIMEOUT_SECONDS = 2
    client = APIClient()
    client.force_authenticate(operator)
    return client


def prepared_commit(name: str) -> Commit:
    wait_until(
        lambda: Commit.objects.filter(connector_name=name, state=CommitState.PREPARED).exists(),
        120,
        "a prepared commit",
    )
    return Commit.objects.get(connector_name=name, state=CommitState.PREPARED)


def lease_ended(name: str) -> bool:
    cutoff = timezone.now() - timedelta(seconds=settings.HEARTBEAT_TIMEOUT_SECONDS)
    return not CoordinatorStatus.objects.filter(connector__name=name, heartbeat_at__gte=cutoff).exists()


def put(api: APIClient, path: str) -> None:
    response = api.put(f"{API}/{path}")
    assert response.status_code in (202, 204), response.content


def test_a_commit_whose_table_was_dropped_fails_naming_it_and_once_abandoned_its_records_land_once(
    procs: Processes, kafka_bootstrap: str, topic_name: str, api: APIClient
) -> None:
    name = "dropped-under-commit"
    ends = setup_connector(kafka_bootstrap, topic_name, name)
    task = procs.task(name)
    frozen = procs.coordinator(name, failpoints="coordinator.after_prepare=stop")
    prepared = prepared_commit(name)
    # Between the write and the apply, someone drops the table.
    with catalog_for(SinkConfig.parse(Connector.objects.get(name=name).config)) as catalog:
        catalog.drop_table("db.events")
    for child in (frozen, task):
        child.send_signal(signal.SIGCONT)
        child.kill()
        child.wait(30)

    # A coordinator as a worker runs it: it finds the prepared commit, cannot apply it, and crashes
    # naming it; the crash is the connector's trace.
    connector = Connector.objects.get(name=name)
    deadline = time.monotonic() + 120
    with pytest.raises(CommitNotApplied) as crashed:
        runtime.run_coordinator_supervised(connector.pk, lambda: time.monotonic() > deadline)
    assert crashed.value.commit_id == prepared.commit_id
    assert crashed.value.destination == "table db.events"
    trace = api.get(f"{API}/{name}/status").json()["connector"]["trace"]
    assert f"prepared commit {prepared.commit_id} cannot be applied to table db.events" in trace
    assert "NoSuchTableError" in trace
    assert f"/connectors/{name}/commits/{prepared.commit_id}/abandon" in trace

    # The way out: stop, abandon, resume.
    put(api, f"{name}/stop")
    response = api.post(f"{API}/{name}/commits/{prepared.commit_id}/abandon")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "ABORTED"
    starts = {(p.topic, p.partition): p.start_offset for p in prepared.partitions.all()}
    offsets = api.get(f"{API}/{name}/offsets").json()["offsets"]
    assert {
        (o["partition"]["kafka_topic"], o["partition"]["kafka_partition"]): o["offset"]["kafka_offset"] for o in offsets
    } == starts
    put(api, f"{name}/resume")
    procs.task(name)
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 180, "the abandoned commit's records written again")
    # The table, created again, holds every record once (read by pyiceberg and Spark).
    assert_exactly_once(name, kafka_bootstrap, ends)


def test_a_commit_the_sink_already_holds_is_not_abandoned_but_finished(
    procs: Processes, kafka_bootstrap: str, topic_name: str, api: APIClient
) -> None:
    name = "held-by-the-table"
    ends = setup_connector(kafka_bootstrap, topic_name, name)
    task = procs.task(name)
    doomed = procs.coordinator(name, failpoints="coordinator.after_table_commit=kill")
    assert doomed.wait(120) == -signal.SIGKILL
    prepared = prepared_commit(name)
    task.kill()
    task.wait(30)

    put(api, f"{name}/stop")
    wait_until(lambda: lease_ended(name), 30, "the killed coordinator's lease to end")
    response = api.post(f"{API}/{name}/commits/{prepared.commit_id}/abandon")
    assert response.status_code == 409
    assert "the sink already holds commit" in response.json()["message"]
    assert "db.events" in response.json()["message"]
    assert Commit.objects.get(pk=prepared.pk).state == CommitState.PREPARED

    put(api, f"{name}/resume")
    procs.task(name)
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 180, "the held commit finished and the rest written")
    assert_exactly_once(name, kafka_bootstrap, ends)
