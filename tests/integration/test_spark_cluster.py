"""Spark where users outgrow one machine: connectors whose data plane runs on a real Spark
standalone cluster (a master and two workers started from pyspark's own launcher on this
machine), driven both ways a deployment can: the driver in the worker process
(``SPARK_MASTER=spark://...``) and a Spark Connect server attached to the cluster
(``SPARK_REMOTE``). Staged files and tables are on a filesystem every executor reads.
Each test ends with the exactly-once check on the table: every record once, none twice."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from connectors import actions
from connectors.models import Commit, CommitState
from sinkadmin.services import ManagedProcess, start_spark_connect, start_spark_standalone
from sinks.hudi import timeline
from tests.integration.helpers import Processes, caught_up, changes, create_topic, produce, wait_until
from tests.integration.test_crashes import assert_exactly_once, setup_connector, wait_for_phase
from tests.integration.test_files_sink import assert_files_hold_each_record_once
from tests.integration.test_files_sink import start as start_files_sink
from tests.integration.test_hudi_sink import PARTITIONS as HUDI_PARTITIONS
from tests.integration.test_hudi_sink import (
    assert_table_equals_model,
    assert_timeline_matches_ledger,
    hudi_config,
    model_of_topic,
)
from tests.integration.test_iceberg_upserts import assert_table_equals_model as assert_upserts_equal_model
from tests.integration.test_iceberg_upserts import start as start_upserts
from workers.storage import StoragePath

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Each of the cluster's Python workers stalls this long in its first decode
# (its first Hudi merge, its first unit of an upsert's job): a window in which
# the test kills an executor mid-write.
DECODE_STALL_SECONDS = 4


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    def __init__(self, url: str, processes: list[ManagedProcess], work_dir: Path) -> None:
        self.url = url
        self.processes = processes
        self.work_dir = work_dir

    def executors(self) -> list[psutil.Process]:
        """The executor JVMs the workers launched (for any application)."""
        found = []
        for worker in self.processes[1:]:
            for child in psutil.Process(worker.process.pid).children(recursive=True):
                try:
                    if "CoarseGrainedExecutorBackend" in " ".join(child.cmdline()):
                        found.append(child)
                except psutil.NoSuchProcess:
                    continue
        return found

    def executors_that_run_python(self) -> list[psutil.Process]:
        busy = []
        for executor in self.executors():
            try:
                if any("python" in c.name() for c in executor.children(recursive=True)):
                    busy.append(executor)
            except psutil.NoSuchProcess:
                continue
        return busy


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    log_dir = tmp_path_factory.mktemp("spark-cluster")
    work_dir = log_dir / "work"
    url, processes = start_spark_standalone(
        log_dir,
        port=free_port(),
        env={
            "SPARK_WORKER_DIR": str(work_dir),
            "SINKADMIN_FAILPOINTS": (
                f"executor.decode=delay:{DECODE_STALL_SECONDS},upsert.rewrite=delay:{DECODE_STALL_SECONDS}"
            ),
        },
    )
    yield Cluster(url, processes, work_dir)
    for process in reversed(processes):
        process.stop()


@pytest.fixture(scope="module")
def connect_on_cluster(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # One Spark application on the cluster for the module's tests, as a make run on a cluster has one: an
    # executor a test kills is replaced by the cluster's master, for the next test too.
    port = free_port()
    server = start_spark_connect(port, tmp_path_factory.mktemp("spark-connect"), master=cluster.url, driver_memory="1g")
    yield f"sc://127.0.0.1:{port}"
    server.stop()


def on_cluster(lake: dict[str, str], **spark: str) -> dict[str, str]:
    # (PySpark marks a process that opened a Spark Connect session with
    # SPARK_CONNECT_MODE_ENABLED, which children inherit: this test process
    # may have, and a child with it could only use Spark Connect.)
    unset = ("SPARK_REMOTE", "SPARK_MASTER", "SPARK_CONNECT_MODE_ENABLED")
    return {**{k: v for k, v in lake.items() if k not in unset}, **spark}


def test_a_connector_whose_driver_runs_in_its_worker_process_writes_through_the_cluster(
    cluster: Cluster, lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    # One task process, one Spark application (each process with
    # SPARK_MASTER is an application of its own on the cluster).
    processes = Processes(on_cluster(lake, SPARK_MASTER=cluster.url))
    try:
        ends = setup_connector(kafka_bootstrap, topic_name, "on-cluster", **{"sinkadmin.writer": "spark"})
        processes.task("on-cluster")
        processes.coordinator("on-cluster")
        wait_until(caught_up("on-cluster", ends), 240, "every record committed through the cluster")
    finally:
        processes.stop_all()
    assert_exactly_once("on-cluster", kafka_bootstrap, ends)
    # The records were decoded by the cluster's executors, not in the task's process.
    assert list(cluster.work_dir.glob("app-*/*/stderr")), "no executor ran for the connector"


def test_an_executor_killed_mid_write_loses_and_duplicates_nothing(
    cluster: Cluster, connect_on_cluster: str, lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    processes = Processes(on_cluster(lake, SPARK_REMOTE=connect_on_cluster))
    try:
        ends = setup_connector(
            kafka_bootstrap,
            topic_name,
            "executor-killed",
            **{
                "sinkadmin.writer": "spark",
                "tasks.max": "2",
                "iceberg.control.commit.interval-ms": "3000",
                "iceberg.control.commit.timeout-ms": "90000",
            },
        )
        kill_an_executor_mid_write(cluster, processes, "executor-killed")
        wait_until(caught_up("executor-killed", ends), 240, "every record committed after the executor died")
    finally:
        processes.stop_all()
    assert_exactly_once("executor-killed", kafka_bootstrap, ends)
    assert Commit.objects.filter(connector_name="executor-killed", state=CommitState.COMMITTED).exists()


def kill_an_executor_mid_write(cluster: Cluster, processes: Processes, name: str) -> None:
    """Start two tasks and the coordinator; once the commit's Spark jobs run (their Python
    workers stall in their first decode), SIGKILL one executor right there."""
    processes.task(name, 0, 2)
    processes.task(name, 1, 2)
    processes.coordinator(name)
    wait_for_phase(name, "collecting", timeout=120)
    deadline = time.monotonic() + 60
    while not cluster.executors_that_run_python() and time.monotonic() < deadline:
        time.sleep(0.05)
    busy = cluster.executors_that_run_python()
    assert busy, "no executor was decoding"
    busy[0].send_signal(signal.SIGKILL)


def test_a_files_sink_executor_killed_mid_write_leaves_each_record_in_one_file(
    cluster: Cluster,
    connect_on_cluster: str,
    lake: dict[str, str],
    kafka_bootstrap: str,
    topic_name: str,
    tmp_path: Path,
) -> None:
    # The executor dies with a file half written under +tmp: Spark runs the
    # decode again elsewhere, under a file name of its own, and only the
    # files the finished attempt reported are moved to their final names.
    name = "files-executor-killed"
    processes = Processes(on_cluster(lake, SPARK_REMOTE=connect_on_cluster))
    try:
        ends = start_files_sink(
            kafka_bootstrap,
            topic_name,
            name,
            tmp_path,
            **{
                "tasks.max": "2",
                "sinkadmin.commit.interval-ms": "3000",
                "sinkadmin.commit.timeout-ms": "90000",
            },
        )
        kill_an_executor_mid_write(cluster, processes, name)
        wait_until(caught_up(name, ends), 240, "every record committed after the executor died")
    finally:
        processes.stop_all()
    # (Also: no committed commit left a temporary file, the dead attempt's included.)
    assert_files_hold_each_record_once(tmp_path, topic_name, ends, kafka_bootstrap)


def test_hudi_executors_killed_mid_merge_leave_the_table_equal_to_the_model(
    cluster: Cluster,
    connect_on_cluster: str,
    lake: dict[str, str],
    kafka_bootstrap: str,
    topic_name: str,
    tmp_path: Path,
) -> None:
    # The coordinator has Hudi's Spark writer write the commit: every executor dies while Hudi's
    # write is in flight (its instant inflight on the timeline). Spark runs the lost tasks again on
    # new executors (Hudi's markers drop what the dead attempts wrote), and the instant completes once.
    name = "hudi-executor-killed"
    base = tmp_path / "orders"
    processes = Processes(on_cluster(lake, SPARK_REMOTE=connect_on_cluster))
    try:
        create_topic(kafka_bootstrap, topic_name, HUDI_PARTITIONS)
        ends = produce(kafka_bootstrap, topic_name, changes(2000, 150, HUDI_PARTITIONS, seed=21), HUDI_PARTITIONS)
        actions.create_connector(
            name,
            hudi_config(
                topic_name, base, **{"sinkadmin.commit.interval-ms": "3000", "sinkadmin.commit.timeout-ms": "90000"}
            ),
        )
        processes.task(name)
        processes.coordinator(name)
        wait_for_phase(name, "committing", timeout=180)
        wait_until(
            lambda: bool(timeline.pending_writes(StoragePath.parse(str(base)))),
            120,
            "Hudi's write to start its instant",
        )
        killed = cluster.executors()
        assert killed, "no executor was running"
        for executor in killed:
            executor.send_signal(signal.SIGKILL)
        wait_until(caught_up(name, ends), 240, "every record committed after the executors died")
    finally:
        processes.stop_all()
    assert_table_equals_model(base, model_of_topic(kafka_bootstrap, ends))
    assert_timeline_matches_ledger(name, base)


def test_executors_killed_in_a_merge_on_read_upsert_job_leave_the_table_equal_to_the_model(
    cluster: Cluster, connect_on_cluster: str, lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    # The coordinator's upsert job (position delete files beside the live data files) runs on the
    # cluster; every executor dies while its units stall. Spark runs them again on new executors (each
    # attempt writes files of its own names), and the commit's one snapshot takes the files of the
    # attempts that finished: every key once, as the topic last had it.
    name = "upsert-executor-killed"
    processes = Processes(on_cluster(lake, SPARK_REMOTE=connect_on_cluster))
    try:
        ends = start_upserts(
            kafka_bootstrap,
            topic_name,
            name,
            3000,
            23,
            **{"iceberg.control.commit.interval-ms": "3000", "iceberg.control.commit.timeout-ms": "90000"},
        )
        processes.task(name)
        processes.coordinator(name)
        wait_for_phase(name, "committing", timeout=180)
        killed = cluster.executors_that_run_python()
        assert killed, "no executor was running the upsert's units"
        for executor in killed:
            executor.send_signal(signal.SIGKILL)
        wait_until(caught_up(name, ends), 240, "every change committed after the executors died")
    finally:
        processes.stop_all()
    assert_upserts_equal_model(name, kafka_bootstrap, ends)
