"""Every failure we can think of, each checked on the table afterwards:
every record once, none twice (DESIGN I1, I3, I4)."""

from __future__ import annotations

import signal
import time

import pytest

from connectors import actions
from connectors.models import Commit, CommitState, CoordinatorStatus
from sinkadmin.services import listening_process, split_hostport
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    Processes,
    caught_up,
    create_topic,
    json_records,
    produce,
    sink_snapshots,
    table_rows,
    topic_ids,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PARTITIONS = 4
COUNT = 1200


def setup_connector(kafka_bootstrap: str, topic: str, name: str, **overrides: str) -> dict[tuple[str, int], int]:
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    ends = produce(kafka_bootstrap, topic, json_records(0, COUNT), PARTITIONS)
    actions.create_connector(name, sink_config(topic, "db.events", **overrides))
    return ends


def assert_exactly_once(name: str, bootstrap: str, ends: dict[tuple[str, int], int], count: int = COUNT) -> None:
    ids = sorted(r["id"] for r in table_rows(name, "db.events"))
    expected = topic_ids(bootstrap, ends)
    assert set(expected) == set(range(count))
    assert ids == expected, f"{len(ids)} rows, {len(set(ids))} distinct; the topic holds {len(expected)} records"
    committed = Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED).exclude(files_count=0)
    assert len(sink_snapshots(name, "db.events")) == committed.count()


def wait_for_phase(name: str, phase: str, timeout: float = 60) -> None:
    wait_until(
        lambda: CoordinatorStatus.objects.filter(connector__name=name, phase=phase).exists(),
        timeout,
        f"coordinator phase {phase}",
    )


def test_a_participant_killed_while_staging_loses_nothing(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    ends = setup_connector(
        kafka_bootstrap,
        topic_name,
        "kill-staging",
        **{"iceberg.control.commit.interval-ms": "4000", "iceberg.control.commit.timeout-ms": "4000"},
    )
    procs.coordinator("kill-staging")
    doomed = procs.task("kill-staging")
    wait_for_phase("kill-staging", "staging")
    time.sleep(2)
    doomed.kill()
    procs.task("kill-staging")
    wait_until(caught_up("kill-staging", ends), 180, "the replacement task to catch up")
    assert_exactly_once("kill-staging", kafka_bootstrap, ends)


def test_a_participant_killed_after_writing_files_loses_nothing(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    ends = setup_connector(kafka_bootstrap, topic_name, "kill-writing", **{"iceberg.control.commit.timeout-ms": "4000"})
    procs.coordinator("kill-writing")
    doomed = procs.task("kill-writing", failpoints="participant.before_status=kill")
    assert doomed.wait(120) == -signal.SIGKILL
    procs.task("kill-writing")
    wait_until(caught_up("kill-writing", ends), 180, "the replacement task to catch up")
    assert_exactly_once("kill-writing", kafka_bootstrap, ends)


@pytest.mark.parametrize("point", ["coordinator.after_prepare", "coordinator.after_table_commit"])
def test_a_coordinator_killed_mid_commit_is_rolled_forward(
    procs: Processes, kafka_bootstrap: str, topic_name: str, point: str
) -> None:
    name = f"kill-{point.rsplit('.', maxsplit=1)[-1].replace('_', '-')}"
    ends = setup_connector(kafka_bootstrap, topic_name, name)
    procs.task(name)
    doomed = procs.coordinator(name, failpoints=f"{point}=kill")
    assert doomed.wait(120) == -signal.SIGKILL
    assert Commit.objects.filter(connector_name=name, state=CommitState.PREPARED).count() == 1
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 180, "the new coordinator to roll forward and catch up")
    assert_exactly_once(name, kafka_bootstrap, ends)


def test_a_zombie_coordinator_cannot_commit_twice(procs: Processes, kafka_bootstrap: str, topic_name: str) -> None:
    ends = setup_connector(kafka_bootstrap, topic_name, "zombie")
    procs.task("zombie")
    zombie = procs.coordinator("zombie", failpoints="coordinator.after_prepare=stop")
    wait_until(
        lambda: Commit.objects.filter(connector_name="zombie", state=CommitState.PREPARED).exists(),
        120,
        "the first coordinator to prepare and freeze",
    )
    procs.coordinator("zombie")
    wait_until(caught_up("zombie", ends), 180, "the new coordinator to take over")
    zombie.send_signal(signal.SIGCONT)
    # The zombie resumes with its prepared commit: the table already holds
    # it, so it adds nothing, and its next ledger write finds it fenced.
    assert zombie.wait(120) == 0
    assert_exactly_once("zombie", kafka_bootstrap, ends)


def test_a_zombie_coordinator_with_the_table_loaded_cannot_append_twice(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    # The zombie freezes with the table loaded and its append built: its successor commits the
    # same prepared commit meanwhile. pyiceberg's own retry would apply the zombie's append again
    # on top of the successor's; the sink turns it off and re-checks the table instead.
    ends = setup_connector(kafka_bootstrap, topic_name, "zombie-loaded")
    procs.task("zombie-loaded")
    zombie = procs.coordinator("zombie-loaded", failpoints="iceberg.before_snapshot=stop")
    wait_until(
        lambda: Commit.objects.filter(connector_name="zombie-loaded", state=CommitState.PREPARED).exists(),
        120,
        "the first coordinator to prepare",
    )
    time.sleep(2)  # (and to reach its append, where it freezes)
    procs.coordinator("zombie-loaded")
    wait_until(caught_up("zombie-loaded", ends), 180, "the new coordinator to take over")
    zombie.send_signal(signal.SIGCONT)
    assert zombie.wait(120) == 0
    assert_exactly_once("zombie-loaded", kafka_bootstrap, ends)


def test_a_silent_participant_does_not_block_the_others(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    ends = setup_connector(kafka_bootstrap, topic_name, "silent", **{"iceberg.control.commit.timeout-ms": "5000"})
    procs.coordinator("silent")
    procs.task("silent", 0, 2)
    silent = procs.task("silent", 1, 2, failpoints="participant.before_write=hang")
    answered = {tp: end for tp, end in ends.items() if tp[1] % 2 == 0}
    wait_until(caught_up("silent", answered), 120, "the answering task's partitions to commit")
    partial = Commit.objects.filter(connector_name="silent", state=CommitState.COMMITTED, complete=False)
    assert partial.exists()
    silent.kill()
    procs.task("silent", 1, 2)
    wait_until(caught_up("silent", ends), 180, "the replacement to catch up")
    assert_exactly_once("silent", kafka_bootstrap, ends)


def test_a_participant_that_answers_after_the_timeout_has_its_late_files_ignored(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    # Task 1 takes 8 s once to report its first commit (a long pause, a
    # slow disk) and then goes on: its late WRITE_STATUS must be discarded,
    # its files never committed, and its records read again from the ledger.
    # (A 4 s interval: both tasks are up before the first commit ends.)
    ends = setup_connector(
        kafka_bootstrap,
        topic_name,
        "late",
        **{"iceberg.control.commit.interval-ms": "4000", "iceberg.control.commit.timeout-ms": "3000"},
    )
    procs.coordinator("late")
    procs.task("late", 0, 2)
    late = procs.task("late", 1, 2, failpoints="participant.before_status=delay:8")
    wait_until(caught_up("late", ends), 180, "every partition, the late task's too, to commit")
    assert late.poll() is None  # it came back and caught up; nobody replaced it
    first = Commit.objects.filter(connector_name="late").exclude(files_count=0).order_by("started_at").first()
    assert first is not None and not first.complete  # committed without the late task's partitions
    assert_exactly_once("late", kafka_bootstrap, ends)


@pytest.mark.parametrize("phase", ["staging", "collecting"])
def test_a_broker_that_stalls_mid_commit_loses_and_duplicates_nothing(
    procs: Processes, kafka_bootstrap: str, topic_name: str, phase: str
) -> None:
    broker = listening_process(split_hostport(kafka_bootstrap.split(",", maxsplit=1)[0])[1])
    if broker is None:
        pytest.skip("the broker does not run on this host, so it cannot be stalled")
    name = f"stall-{phase}"
    # The first commit holds every record (a 3 s interval: the task joins
    # it as it starts). The broker stalls for 5 s, longer than the commit
    # timeout: while records are staged and END is due, or, "collecting",
    # after END reached the task and before its WRITE_STATUS went out (the
    # task takes 3 s to report, once), so the coordinator gives up on the
    # commit mid-stall and the status arrives late, for a commit long gone.
    ends = setup_connector(
        kafka_bootstrap,
        topic_name,
        name,
        **{"iceberg.control.commit.interval-ms": "3000", "iceberg.control.commit.timeout-ms": "2000"},
    )
    procs.coordinator(name)
    procs.task(name, failpoints="participant.before_status=delay:3" if phase == "collecting" else "")
    wait_for_phase(name, phase)
    broker.suspend()  # SIGSTOP: connections stay open, nothing answers
    try:
        time.sleep(5)
    finally:
        broker.resume()
    wait_until(caught_up(name, ends), 180, "the connector to catch up after the stall")
    assert all(child.poll() is None for child in procs.children)  # it rode the stall out
    assert_exactly_once(name, kafka_bootstrap, ends)
    if phase == "collecting":
        first = Commit.objects.filter(connector_name=name).order_by("started_at").first()
        assert first is not None and first.state == CommitState.ABORTED
