"""Connectors on real Celery worker processes, kept alive by the supervisor
on Celery beat (issue: Celery runtime)."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from django.contrib.auth.models import User
from django.db import transaction
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from connectors import actions
from connectors.actions import runtime as runtime_state
from connectors.config import SinkConfig
from connectors.models import Commit, CommitState, Connector, ConnectorTask, CoordinatorStatus, TaskState, Worker
from sinkadmin.services import DEFAULT_WORKER_SLOTS, beat_argv, connector_worker_argv, supervisor_worker_argv
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    caught_up,
    create_topic,
    json_records,
    ledger_offsets,
    produce,
    table_in,
    table_rows,
    topic_ids,
    wait_until,
)
from tests.integration.test_files_sink import assert_files_hold_each_record_once, files_config
from tests.integration.test_mirror_engine import assert_mirrored_exactly_once
from tests.integration.test_mirror_engine import caught_up as mirror_caught_up
from tests.integration.test_mirror_engine import setup as mirror_seed
from tests.integration.test_mirror_engine import source_records as mirror_records
from workers.supervisor import Supervisor

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# (A Redis database of its own per xdist worker: tests/lanes.py.)
TEST_REDIS = os.environ.get("SINKADMIN_TEST_CELERY_REDIS", "redis://127.0.0.1:6379/15")


class Cluster:
    """Celery workers, a supervisor worker and beat, as `make run` starts them."""

    def __init__(self, env: dict[str, str], supervisor_interval: int = 1) -> None:
        self.env = {
            **env,
            "REDIS_URL": TEST_REDIS,
            "SINKADMIN_SUPERVISOR_INTERVAL": str(supervisor_interval),
            "SINKADMIN_HEARTBEAT_TIMEOUT": "6",
        }
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.others: list[subprocess.Popen[bytes]] = []
        self.tmp = Path(tempfile.mkdtemp())
        redis.Redis.from_url(TEST_REDIS).flushdb()
        self.others.append(subprocess.Popen(supervisor_worker_argv("supervisor@test", "WARNING"), env=self.env))
        self.others.append(subprocess.Popen(beat_argv(self.tmp / "beat", "WARNING"), env=self.env))

    def add_worker(self, name: str, slots: int = 24) -> subprocess.Popen[bytes]:
        worker = subprocess.Popen(connector_worker_argv(f"{name}@test", slots, "WARNING"), env=self.env)
        self.workers[name] = worker
        return worker

    def stop(self) -> None:
        for process in [*self.workers.values(), *self.others]:
            if process.poll() is None:
                process.kill()
            process.wait(30)


@pytest.fixture
def cluster(lake: dict[str, str]) -> Iterator[Cluster]:
    running = Cluster(lake)
    yield running
    running.stop()


def workers_of(name: str) -> set[str]:
    return set(
        ConnectorTask.objects.filter(connector__name=name, state=TaskState.RUNNING).values_list("worker_id", flat=True)
    )


def assert_exactly_once(name: str, bootstrap: str, ends: dict[tuple[str, int], int]) -> None:
    ids = sorted(r["id"] for r in table_rows(name, "db.events"))
    assert ids == topic_ids(bootstrap, ends)


def test_a_created_connector_starts_on_a_worker_and_commits_with_no_manual_step(
    cluster: Cluster, kafka_bootstrap: str, topic_name: str
) -> None:
    cluster.add_worker("w1")
    create_topic(kafka_bootstrap, topic_name, 4)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, 800), 4)
    actions.create_connector("auto", sink_config(topic_name, "db.events", **{"tasks.max": "2"}))
    wait_until(caught_up("auto", ends), 180, "the connector to start and commit everything")
    assert_exactly_once("auto", kafka_bootstrap, ends)
    tasks = ConnectorTask.objects.filter(connector__name="auto")
    assert tasks.count() == 2 and all(t.worker_id for t in tasks)
    assert sorted(tp for t in tasks for tp in map(tuple, t.assigned_partitions)) == sorted(ends)
    wait_until(lambda: all(t.partition_status for t in tasks.all()), 30, "live partition figures")


def test_a_created_or_resumed_connector_starts_at_once_not_at_the_supervisors_next_beat(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    # Beat runs the supervisor an hour apart here: only the request the
    # actions send once their change is committed (supervise_soon) can start
    # anything within the test.
    hourly = Cluster(lake, supervisor_interval=3600)
    try:
        hourly.add_worker("w1")
        # (A supervisor run before any worker has advertised its slots finds
        # no room, and the next would be an hour later.)
        wait_until(lambda: Worker.objects.filter(name="w1@test").exists(), 60, "the worker to advertise its slots")
        create_topic(kafka_bootstrap, topic_name, 2)
        ends = produce(kafka_bootstrap, topic_name, json_records(0, 200), 2)
        with override_settings(CELERY_BROKER_URL=TEST_REDIS, SUPERVISOR_INTERVAL_SECONDS=3600):
            actions.create_connector("prompt", sink_config(topic_name, "db.events"))
            wait_until(caught_up("prompt", ends), 120, "the created connector to start and commit")
            actions.stop_connector("prompt")

            def runners_gone() -> bool:
                # (Their rows say STOPPED only after a supervisor run that
                # finds their heartbeats stale: the next beat, an hour away.)
                silent_since = timezone.now() - timedelta(seconds=int(hourly.env["SINKADMIN_HEARTBEAT_TIMEOUT"]) + 1)
                tasks = ConnectorTask.objects.filter(connector__name="prompt")
                return not tasks.filter(heartbeat_at__gte=silent_since).exists()

            wait_until(runners_gone, 60, "the stopped connector's runners to leave")
            more = produce(kafka_bootstrap, topic_name, json_records(200, 200), 2)
            actions.resume_connector("prompt")
            wait_until(caught_up("prompt", more), 120, "the resumed connector to start again and commit")
        assert_exactly_once("prompt", kafka_bootstrap, more)
    finally:
        hourly.stop()


def test_killing_a_worker_moves_its_tasks_and_every_record_lands_once(
    cluster: Cluster, kafka_bootstrap: str, topic_name: str
) -> None:
    doomed = cluster.add_worker("doomed")
    create_topic(kafka_bootstrap, topic_name, 4)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, 400), 4)
    actions.create_connector("failover", sink_config(topic_name, "db.events", **{"tasks.max": "2"}))
    wait_until(caught_up("failover", ends), 180, "the first records on the first worker")
    cluster.add_worker("survivor")
    produced = kill_while_producing(doomed, kafka_bootstrap, topic_name, ends, start=400)
    wait_until(caught_up("failover", produced), 240, "the survivor to take over and catch up")
    assert workers_of("failover") and all(w.startswith("survivor@") for w in workers_of("failover"))
    assert_exactly_once("failover", kafka_bootstrap, produced)


def kill_while_producing(
    doomed: subprocess.Popen[bytes],
    bootstrap: str,
    topic: str,
    ends: dict[tuple[str, int], int],
    start: int,
    batch: Callable[[int], dict[tuple[str, int], int]] | None = None,
) -> dict[tuple[str, int], int]:
    """SIGKILL a worker while records keep coming (ids from ``start``, 100 at a time: JSON records, or
    what ``batch(first id)`` produces); the topic's ends after."""
    stop = threading.Event()
    produced: dict[tuple[str, int], int] = dict(ends)
    more = batch or (lambda first: produce(bootstrap, topic, json_records(first, 100), 4))

    def keep_producing() -> None:
        first = start
        while not stop.is_set():
            produced.update(more(first))
            first += 100
            time.sleep(0.3)

    producer = threading.Thread(target=keep_producing)
    producer.start()
    time.sleep(3)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(10)
    time.sleep(4)
    stop.set()
    producer.join()
    return produced


def test_a_files_connector_survives_its_worker_killed_with_every_record_in_one_file(
    cluster: Cluster, kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    # The files sink through the same Celery runtime as `make run`: created,
    # started by the supervisor, its worker SIGKILLed under load (writes in
    # flight, files under +tmp), taken over by another worker.
    doomed = cluster.add_worker("doomed")
    create_topic(kafka_bootstrap, topic_name, 4)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, 400), 4)
    actions.create_connector("files-failover", files_config(topic_name, tmp_path, **{"tasks.max": "2"}))
    wait_until(caught_up("files-failover", ends), 180, "the first records on the first worker")
    cluster.add_worker("survivor")
    produced = kill_while_producing(doomed, kafka_bootstrap, topic_name, ends, start=400)
    wait_until(caught_up("files-failover", produced), 240, "the survivor to take over and catch up")
    assert all(w.startswith("survivor@") for w in workers_of("files-failover"))
    assert_files_hold_each_record_once(tmp_path, topic_name, produced, kafka_bootstrap)


def test_a_mirror_survives_its_worker_killed_with_every_record_copied_once(
    cluster: Cluster, kafka_bootstrap: str, target_kafka_bootstrap: str, topic_name: str
) -> None:
    # The Kafka mirror on real Celery workers: its worker SIGKILLed while records keep coming (transactions
    # open), its tasks taken over by another worker, which fences the dead runners' transactional ids and
    # resumes from the target group's offsets.
    doomed = cluster.add_worker("doomed")
    topics = [topic_name]
    ends = mirror_seed(kafka_bootstrap, topics, 600)
    actions.create_connector(
        "mirror-failover",
        {
            "connector.class": "mirror",
            "tasks.max": "2",
            "source.cluster.alias": "east",
            "source.cluster.bootstrap.servers": kafka_bootstrap,
            "target.cluster.bootstrap.servers": target_kafka_bootstrap,
            "topics": topic_name,
            "sinkadmin.commit.interval-ms": "200",
            "sinkadmin.commit.max-records": "100",
        },
    )
    wait_until(lambda: mirror_caught_up(target_kafka_bootstrap, "mirror-failover", ends), 180, "the first worker")
    cluster.add_worker("survivor")
    ends = kill_while_producing(
        doomed,
        kafka_bootstrap,
        topic_name,
        ends,
        start=600,
        batch=lambda first: mirror_records(kafka_bootstrap, topic_name, 100, start=first),
    )
    wait_until(lambda: mirror_caught_up(target_kafka_bootstrap, "mirror-failover", ends), 240, "the survivor")
    assert workers_of("mirror-failover") and all(w.startswith("survivor@") for w in workers_of("mirror-failover"))
    assert_mirrored_exactly_once(kafka_bootstrap, target_kafka_bootstrap, topics)


def test_pause_resume_stop_restart_and_delete(cluster: Cluster, kafka_bootstrap: str, topic_name: str) -> None:
    cluster.add_worker("w1")
    create_topic(kafka_bootstrap, topic_name, 2)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, 100), 2)
    actions.create_connector("life", sink_config(topic_name, "db.events"))
    wait_until(caught_up("life", ends), 180, "the first commit")

    actions.pause_connector("life")

    def held() -> bool:
        # Idle is also the moment between two commits: the pause has taken
        # effect once the coordinator stays idle, with no new commit, past a
        # heartbeat and a commit interval (the commit in flight finishes).
        before = Commit.objects.filter(connector_name="life").count()
        if CoordinatorStatus.objects.get(connector__name="life").phase != "idle":
            return False
        time.sleep(3)
        phase = CoordinatorStatus.objects.get(connector__name="life").phase
        return phase == "idle" and Commit.objects.filter(connector_name="life").count() == before

    wait_until(held, 60, "the pause")
    paused_commits = Commit.objects.filter(connector_name="life").count()
    more = produce(kafka_bootstrap, topic_name, json_records(100, 100), 2)
    time.sleep(5)
    assert Commit.objects.filter(connector_name="life").count() == paused_commits
    actions.resume_connector("life")
    wait_until(caught_up("life", more), 120, "the resumed connector to pick up where it left off")

    actions.stop_connector("life")
    wait_until(
        lambda: not ConnectorTask.objects.filter(connector__name="life", state=TaskState.RUNNING).exists(),
        60,
        "the tasks to be released",
    )

    actions.resume_connector("life")
    wait_until(lambda: bool(workers_of("life")), 60, "the tasks to run again")
    task = ConnectorTask.objects.get(connector__name="life", task_index=0)
    epoch = task.epoch
    actions.restart_connector("life", include_tasks=True, only_failed=True)
    assert ConnectorTask.objects.get(pk=task.pk).epoch == epoch  # nothing failed, nothing restarted
    # The task's row is locked while it is marked failed and restarted: its
    # live runner's heartbeat (which writes RUNNING) waits, then finds the
    # epoch superseded, instead of reviving the row between the two.
    with transaction.atomic():
        ConnectorTask.objects.select_for_update().filter(pk=task.pk).update(state=TaskState.FAILED)
        actions.restart_connector("life", include_tasks=True, only_failed=True)
    assert ConnectorTask.objects.get(pk=task.pk).epoch == epoch + 1  # the failed one did
    wait_until(
        lambda: ConnectorTask.objects.filter(pk=task.pk, state=TaskState.RUNNING, epoch__gt=epoch).exists(),
        60,
        "the failed task to restart",
    )

    final = produce(kafka_bootstrap, topic_name, json_records(200, 50), 2)
    wait_until(caught_up("life", final), 120, "records after the restarts")
    rows_before = table_rows("life", "db.events")
    actions.delete_connector("life")
    assert sorted(r["id"] for r in rows_before) == topic_ids(kafka_bootstrap, final)
    # The table outlives its connector.
    config = SinkConfig.parse(sink_config(topic_name, "db.events"))
    assert len(table_in(config, "db.events").scan().to_arrow()) == 250


def test_a_config_update_takes_effect_without_losing_or_duplicating(
    cluster: Cluster, kafka_bootstrap: str, topic_name: str
) -> None:
    cluster.add_worker("w1")
    create_topic(kafka_bootstrap, topic_name, 2)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, 200), 2)
    actions.create_connector("reconf", sink_config(topic_name, "db.events"))
    wait_until(caught_up("reconf", ends), 180, "the first records")
    more = produce(kafka_bootstrap, topic_name, json_records(200, 200), 2)
    actions.update_config(
        "reconf", sink_config(topic_name, "db.events", **{"iceberg.control.commit.interval-ms": "3000"})
    )
    wait_until(caught_up("reconf", more), 180, "the reconfigured connector to catch up")
    assert_exactly_once("reconf", kafka_bootstrap, more)
    generation = Connector.objects.get(name="reconf").generation
    assert ConnectorTask.objects.filter(connector__name="reconf", generation=generation).exists()
    last = Commit.objects.filter(connector_name="reconf", state=CommitState.COMMITTED).order_by("-started_at").first()
    assert last is not None and last.epoch == Connector.objects.get(name="reconf").coordinator_epoch


def test_ten_connectors_on_two_workers_all_commit_and_the_supervisor_stays_cheap(
    cluster: Cluster, kafka_bootstrap: str, topic_name: str
) -> None:
    # 20 long-running tasks (a coordinator and a task per connector) do not
    # fit in one worker's 12 slots: both workers must take some.
    cluster.add_worker("w1", slots=12)
    cluster.add_worker("w2", slots=12)
    all_ends = {}
    for i in range(10):
        topic = f"{topic_name}-{i}"
        create_topic(kafka_bootstrap, topic, 2)
        all_ends[f"many-{i}"] = produce(kafka_bootstrap, topic, json_records(0, 50), 2)
        actions.create_connector(f"many-{i}", sink_config(topic, f"db.many_{i}"))
    for name, ends in all_ends.items():
        wait_until(caught_up(name, ends), 300, f"{name} to commit")
    durations = []
    for _ in range(5):
        report = Supervisor(start_coordinator=lambda _c: None, start_task=lambda _t, _e: None).step()
        assert report.connectors == 10 and not report.tasks_started and not report.coordinators_started
        durations.append(report.seconds)
    durations.sort()
    print(
        f"\nsupervisor step over 10 running connectors: median {durations[2] * 1000:.1f} ms, max {durations[-1] * 1000:.1f} ms"
    )
    workers = {w.split("@")[0] for w in ConnectorTask.objects.values_list("worker_id", flat=True)}
    workers |= {w.split("@")[0] for w in CoordinatorStatus.objects.values_list("worker_id", flat=True)}
    assert workers == {"w1", "w2"}


def test_sigterm_lets_a_worker_leave_cleanly_and_another_takes_over(
    cluster: Cluster, kafka_bootstrap: str, topic_name: str
) -> None:
    leaving = cluster.add_worker("leaving")
    create_topic(kafka_bootstrap, topic_name, 2)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, 200), 2)
    actions.create_connector("graceful", sink_config(topic_name, "db.events"))
    wait_until(caught_up("graceful", ends), 180, "the first records")
    cluster.add_worker("staying")
    more = produce(kafka_bootstrap, topic_name, json_records(200, 200), 2)
    leaving.send_signal(signal.SIGTERM)
    # Warm shutdown: the runners notice, leave their commit and free their rows.
    assert leaving.wait(60) == 0
    task = ConnectorTask.objects.get(connector__name="graceful")
    assert task.worker_id.startswith("staying@") or task.state in (TaskState.UNASSIGNED, TaskState.RESTARTING)
    wait_until(caught_up("graceful", more), 180, "the other worker to take over")
    assert workers_of("graceful") and all(w.startswith("staying@") for w in workers_of("graceful"))
    assert_exactly_once("graceful", kafka_bootstrap, more)


def test_a_record_spark_cannot_decode_fails_the_connector_with_its_reason_first_in_the_rest_api(
    cluster: Cluster, kafka_bootstrap: str, topic_name: str, django_user_model: type[User]
) -> None:
    """Through the product as `make run` runs it (a Celery worker, the REST API,
    the default data plane): the status names the record and why, not a JVM trace."""
    cluster.add_worker("w1")
    api = APIClient()
    api.force_authenticate(django_user_model.objects.create_superuser("ops", "ops@example.com", "pw"))
    create_topic(kafka_bootstrap, topic_name, 1)
    produce(kafka_bootstrap, topic_name, json_records(0, 10), 1)
    config = sink_config(topic_name, "db.events", **{"errors.tolerance": "none"})
    assert "sinkadmin.writer" not in config  # the default: Spark
    created = api.post("/api/connect/connectors", {"name": "undecodable", "config": config}, format="json")
    assert created.status_code == 201, created.content
    wait_until(caught_up("undecodable", {(topic_name, 0): 10}), 180, "the clean records")
    produce(kafka_bootstrap, topic_name, [b'{"id": 10, "name": '], 1)  # truncated JSON at offset 10

    def failed() -> bool:
        return api.get("/api/connect/connectors/undecodable/status").json()["connector"]["state"] == "FAILED"

    wait_until(failed, 180, "the connector to fail")
    trace = api.get("/api/connect/connectors/undecodable/status").json()["connector"]["trace"]
    first_line = trace.splitlines()[0]
    assert f"record {topic_name}/0@10 cannot be converted" in first_line, trace
    assert "not valid JSON" in trace and "errors.tolerance=none" in trace
    assert not any(sign in first_line for sign in ("Traceback", "org.apache.spark", "JVM", "Py4J")), trace
    assert ledger_offsets("undecodable") == {(topic_name, 0): 10}
    # Nothing of a failed connector runs or reads as running: its task is FAILED with the same reason.
    tasks = api.get("/api/connect/connectors/undecodable/status").json()["tasks"]
    assert [t["state"] for t in tasks] == ["FAILED"], tasks
    assert f"record {topic_name}/0@10 cannot be converted" in tasks[0]["trace"]

    # A new config starts it again on the worker, as in Kafka Connect: the poison record skipped, the rest once.
    config["errors.tolerance"] = "all"
    updated = api.put("/api/connect/connectors/undecodable/config", config, format="json")
    assert updated.status_code == 200, updated.content
    produce(kafka_bootstrap, topic_name, json_records(11, 9), 1)  # offsets 11-19

    def running() -> bool:
        status = api.get("/api/connect/connectors/undecodable/status").json()
        return status["connector"]["state"] == "RUNNING" and [t["state"] for t in status["tasks"]] == ["RUNNING"]

    wait_until(caught_up("undecodable", {(topic_name, 0): 20}), 180, "the connector to start again and go on")
    wait_until(running, 60, "the connector and its task to show RUNNING")
    assert sorted(r["id"] for r in table_rows("undecodable", "db.events")) == [*range(10), *range(11, 20)]


def test_a_connector_beyond_the_workers_slots_says_why_and_starts_once_a_slot_frees(
    cluster: Cluster, kafka_bootstrap: str, topic_name: str
) -> None:
    cluster.add_worker("small", slots=3)
    ends = {}
    for name in ("first", "second"):  # (the supervisor visits connectors by name)
        topic = f"{topic_name}-{name}"
        create_topic(kafka_bootstrap, topic, 1)
        ends[name] = produce(kafka_bootstrap, topic, json_records(0, 50), 1)
        actions.create_connector(name, sink_config(topic, f"db.{name}"))
    wait_until(caught_up("first", ends["first"]), 180, "the first connector to commit")

    api = APIClient()
    api.force_authenticate(User.objects.create_superuser("ops", "ops@example.com", "pw-ops-1234"))
    reason = "no worker has a free slot (this connector needs 2, 1 free): 2/3 used on small@test"
    status = api.get("/api/connect/connectors/second/status").json()
    assert status["connector"] == {"state": "UNASSIGNED", "worker_id": None, "trace": reason}
    assert [t.get("trace") for t in status["tasks"]] == [reason]
    workers = api.get("/api/connect/workers").json()["workers"]
    assert [(w["worker_id"], w["slots"], w["used"]) for w in workers] == [("small@test", 3, 2)]

    # The first connector's runners leave at their next heartbeat; their slots go to the second.
    actions.delete_connector("first")
    wait_until(caught_up("second", ends["second"]), 120, "the second connector to start and commit")
    assert api.get("/api/connect/connectors/second/status").json()["connector"]["state"] == "RUNNING"


def test_a_worker_that_shuts_down_takes_its_slots_with_it(cluster: Cluster) -> None:
    worker = cluster.add_worker("leaving", slots=5)
    wait_until(lambda: Worker.objects.filter(name="leaving@test", slots=5).exists(), 60, "the worker to advertise")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    assert not Worker.objects.filter(name="leaving@test").exists()


def test_twenty_connectors_all_run_on_make_runs_default_worker(
    cluster: Cluster, kafka_bootstrap: str, topic_name: str
) -> None:
    cluster.add_worker("default", slots=DEFAULT_WORKER_SLOTS)
    ends = {}
    # What is proved here is the runtime's: forty runners hosted by one worker, none waiting for room. Their
    # tasks write with the arrow plane: twenty tasks' first Spark jobs at once would measure the test
    # machine's two cores (the spark plane under many connectors: the ten-connector test, bench/).
    plane = {"sinkadmin.writer": "arrow"}
    for i in range(20):
        topic = f"{topic_name}-{i:02d}"
        create_topic(kafka_bootstrap, topic, 2)
        ends[f"fleet-{i:02d}"] = produce(kafka_bootstrap, topic, json_records(0, 20), 2)
        actions.create_connector(f"fleet-{i:02d}", sink_config(topic, f"db.fleet_{i:02d}", **plane))
    for name, connector_ends in ends.items():
        wait_until(caught_up(name, connector_ends), 300, f"{name} to commit")
    # A coordinator and a task each, all on the one worker, none waiting for room.
    workers = runtime_state.workers()
    assert [(w.name, w.used) for w in workers] == [("default@test", 40)]
    assert not ConnectorTask.objects.exclude(unassigned_reason="").exists()
