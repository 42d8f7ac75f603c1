"""Worker capacity: workers advertise their slots, the supervisor starts a runner only where there
is room, and a runner that found none says so (its status, the health rollup). Against real
PostgreSQL; the broker's metadata is built here (what topics exist is not the point)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from confluent_kafka.admin import AdminClient, ClusterMetadata, PartitionMetadata, TopicMetadata
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from connectors import actions
from connectors.actions import runtime as runtime_state
from connectors.api.status import State, connector_status
from connectors.models import Connector, ConnectorTask, CoordinatorStatus, Worker
from connectors.ui.health import Health, HealthRollup, rollup
from workers.supervisor import Supervisor, SupervisorReport

pytestmark = pytest.mark.django_db


def metadata(*topics: str) -> ClusterMetadata:
    cluster = ClusterMetadata()
    for name in topics:
        topic = TopicMetadata()
        topic.topic = name
        partition = PartitionMetadata()
        partition.id = 0
        topic.partitions = {0: partition}
        cluster.topics[name] = topic
    return cluster


class Workers:
    """What a Celery worker does with a runner it is sent: claim it and heartbeat."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def coordinator(self, connector_id: int) -> None:
        actions.take_coordinator_lease(connector_id, "connectors@test:1")
        self.started.append(f"coordinator {connector_id}")

    def task(self, task_id: int, epoch: int) -> None:
        assert runtime_state.claim_task(task_id, epoch, "connectors@test:2", "test") is not None
        self.started.append(f"task {task_id}")


def step(workers: Workers) -> SupervisorReport:
    """One supervisor step over every connector (one topic a connector, one partition)."""
    supervisor = Supervisor(start_coordinator=workers.coordinator, start_task=workers.task)
    report = SupervisorReport()
    room = runtime_state.room()
    for connector in Connector.objects.all():
        listed = metadata(*connector.config["topics"].split(","))
        supervisor._reconcile(connector, lambda listed=listed: listed, room, report)
    return report


def connector(name: str) -> Connector:
    return actions.create_connector(
        name, {"connector.class": "iceberg", "topics": name, "iceberg.tables": f"db.{name}", "tasks.max": "1"}
    )


def advertise(slots: int, name: str = "connectors@test") -> None:
    runtime_state.worker_heartbeat(name, "test", slots, timezone.now())


def test_runners_start_only_while_a_slot_is_free_and_the_rest_say_why() -> None:
    advertise(4)
    for name in ("a", "b", "c"):
        connector(name)
    workers = Workers()
    report = step(workers)
    # A coordinator and a task each: two connectors fit in four slots.
    assert report.coordinators_started == ["a", "b"] and report.tasks_started == ["a-0", "b-0"]

    waiting = Connector.objects.get(name="c")
    status = connector_status(waiting)
    reason = "no worker has a free slot (this connector needs 2, 0 free): 4/4 used on connectors@test"
    assert status.connector.state is State.UNASSIGNED and status.connector.trace == reason
    assert [(t.state, t.trace) for t in status.tasks] == [(State.UNASSIGNED, reason)]
    assert rollup(waiting, status) == HealthRollup(Health.UNASSIGNED, reason)
    assert [w.used for w in runtime_state.workers()] == [4]

    # A slot pair frees (connector a is deleted): c starts at the next step, its reason gone.
    actions.delete_connector("a")
    report = step(workers)
    assert report.coordinators_started == ["c"] and report.tasks_started == ["c-0"]
    assert CoordinatorStatus.objects.get(connector=waiting).unassigned_reason == ""
    assert ConnectorTask.objects.get(connector=waiting).unassigned_reason == ""


def test_a_reason_written_while_a_slow_runner_started_is_cleared_by_its_heartbeats() -> None:
    # Sixty runners starting on two cores: a runner asked to start did not
    # beat within the timeout, the supervisor found it silent with no room
    # and wrote why, and then it ran, still saying it had no slot.
    advertise(2)
    name = connector("slow")
    step(Workers())
    task = ConnectorTask.objects.get(connector=name)
    coordinator = CoordinatorStatus.objects.get(connector=name)
    late = "no worker has a free slot (this connector needs 2, 0 free): 2/2 used on connectors@test"
    runtime_state.waiting_for_room(name.pk, True, [task], late)
    assert runtime_state.task_alive(task.pk, task.epoch, partition_status={}) is not None
    assert runtime_state.coordinator_alive(name.pk, coordinator.epoch) is not None
    assert ConnectorTask.objects.get(pk=task.pk).unassigned_reason == ""
    assert CoordinatorStatus.objects.get(pk=coordinator.pk).unassigned_reason == ""


def test_runners_started_by_hand_hold_no_workers_slot() -> None:
    advertise(3)
    by_hand = connector("by-hand")
    # manage.py run_connector's coordinator: its worker id is host:pid, no worker's.
    actions.take_coordinator_lease(by_hand.pk, "laptop:4242")
    connector("b")
    assert runtime_state.room().free == 3
    report = step(Workers())
    # The hand-run coordinator is left alone; its task and b fill the worker's three slots.
    assert report.coordinators_started == ["b"] and sorted(report.tasks_started) == ["b-0", "by-hand-0"]
    assert runtime_state.room().free == 0 and [w.used for w in runtime_state.workers()] == [3]


def test_a_connector_is_started_whole_or_not_at_all() -> None:
    advertise(3)
    connector("a")
    connector("b")
    report = step(Workers())
    # b's coordinator would fit in the third slot, and hold it for nothing.
    assert report.coordinators_started == ["a"] and report.tasks_started == ["a-0"]
    assert not CoordinatorStatus.objects.filter(connector__name="b", requested_at__isnull=False).exists()


def test_a_task_that_died_is_started_again_in_the_slot_it_freed() -> None:
    advertise(2)
    connector("a")
    step(Workers())
    long_ago = timezone.now() - timedelta(hours=1)
    ConnectorTask.objects.filter(connector__name="a").update(heartbeat_at=long_ago, requested_at=long_ago)
    report = step(Workers())
    assert report.tasks_started == ["a-0"] and not report.coordinators_started


def test_with_no_live_worker_nothing_is_requested_and_the_reason_says_so() -> None:
    advertise(16)
    Worker.objects.update(heartbeat_at=timezone.now() - timedelta(hours=1))
    connector("a")
    report = step(Workers())
    assert not report.coordinators_started and not report.tasks_started
    status = connector_status(Connector.objects.get(name="a"))
    assert status.connector.trace == "no connectors worker is running (none has advertised its slots lately)"


def test_a_worker_that_leaves_takes_its_slots_with_it() -> None:
    advertise(8, "w1@test")
    advertise(8, "w2@test")
    assert runtime_state.room().free == 16
    runtime_state.worker_left("w1@test")
    assert [w.name for w in runtime_state.workers()] == ["w2@test"] and runtime_state.room().free == 8


def test_the_api_and_the_list_page_show_each_worker_with_its_used_and_free_slots(client: Client) -> None:
    advertise(2)
    connector("a")
    step(Workers())
    user = User.objects.create_superuser("alice", "alice@example.com", "pw-alice-1234")
    client.force_login(user)
    api = APIClient()
    api.force_authenticate(user)

    body = api.get("/api/connect/workers").json()
    assert [(w["worker_id"], w["slots"], w["used"], w["free"]) for w in body["workers"]] == [
        ("connectors@test", 2, 2, 0)
    ]
    assert (body["slots"], body["held"], body["free"]) == (2, 2, 0)
    page = client.get(reverse("connector-list")).content.decode()
    assert "2 of 2 slots used: <strong>no slot is free</strong>" in page
    assert re.search(r'<tr data-worker="connectors@test"><td>connectors@test</td><td>test</td><td>2 / 2</td>', page)

    # Gone with its worker (it shut down), a's runners hold no slot of a live worker.
    Worker.objects.all().delete()
    assert api.get("/api/connect/workers").json() == {"workers": [], "slots": 0, "held": 0, "free": 0}
    assert "No connectors worker is running" in client.get(reverse("connector-list")).content.decode()


def test_a_broker_that_cannot_be_listed_is_asked_once_per_step_and_every_connector_says_so(settings: object) -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.KAFKA_BOOTSTRAP_SERVERS = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
    advertise(8)
    for name in ("a", "b"):
        connector(name)
    workers = Workers()
    asked: list[str] = []

    class Counting(Supervisor):
        def _admin(self, bootstrap: str | None = None, client: dict[str, str] | None = None) -> AdminClient:
            asked.append(bootstrap or "default")
            return super()._admin(bootstrap, client)

    report = Counting(start_coordinator=workers.coordinator, start_task=workers.task).step()
    assert report.coordinators_started == [] and workers.started == []
    assert asked == ["default"]  # one listing for both connectors, not one each
    for name in ("a", "b"):
        (warning,) = Connector.objects.get(name=name).source_warnings
        assert warning.startswith("cannot list its topics:")


def test_a_source_cluster_out_of_reach_is_asked_again_only_after_a_back_off_and_keeps_its_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from workers import supervisor

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        gone = f"127.0.0.1:{probe.getsockname()[1]}"
    advertise(8)
    actions.create_connector(
        "far",
        {
            "connector.class": "mirror",
            "source.cluster.bootstrap.servers": gone,
            "target.cluster.bootstrap.servers": "127.0.0.1:9092",
            "topics": "orders",
        },
    )
    clock = [1000.0]
    unreachable = supervisor.Unreachable(clock=lambda: clock[0])
    monkeypatch.setattr(supervisor, "_UNREACHABLE", unreachable)
    asked: list[str | None] = []

    class Counting(Supervisor):
        def _admin(self, bootstrap: str | None = None, client: dict[str, str] | None = None) -> AdminClient:
            asked.append(bootstrap)
            return super()._admin(bootstrap, client)

    workers = Workers()
    counting = Counting(start_coordinator=workers.coordinator, start_task=workers.task)
    counting.step()  # (the listing waits its 10 s out)
    (warning,) = Connector.objects.get(name="far").source_warnings
    assert warning.startswith("cannot list its topics:") and asked == [gone]
    clock[0] += unreachable.FIRST_S - 1
    counting.step()  # within the back-off: not asked, no wait, the warning stands
    assert asked == [gone] and Connector.objects.get(name="far").source_warnings == [warning]
    clock[0] += 2
    counting.step()
    assert asked == [gone, gone]
    # The back-off doubles, up to its maximum.
    assert unreachable._until[gone][1] == 2 * unreachable.FIRST_S
