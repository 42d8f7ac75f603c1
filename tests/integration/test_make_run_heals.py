"""`make run` heals (issue: what operators trip over): its Spark Connect server, then its connectors
worker, SIGKILLed while records keep coming. The stack (``manage.py runstack``, as `make run` starts it, on
the session's broker with a Spark Connect server of its own) starts each again; its API answers
throughout; the workers page shows each death and restart; and every record lands in the table once, as
pyiceberg and Spark's own Iceberg reader read it."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
from django.conf import settings

from connectors.models import Commit, CommitState, StackProcess, StackProcessState
from sinkadmin.services import listening_process, port_open
from tests.conftest import free_port
from tests.integration.helpers import create_topic, json_records, produce, table_rows, topic_ids, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# (A Redis database of its own per xdist worker: tests/lanes.py.)
STACK_REDIS = os.environ.get("SINKADMIN_TEST_STACK_REDIS", "redis://127.0.0.1:6379/13")
PARTITIONS = 2
BATCH = 100


class Stack:
    """``manage.py runstack`` (what `make run` runs) on the test database and the session's broker."""

    USER, PASSWORD = "operator-on-make-run", uuid.uuid4().hex

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port, self.spark_port = free_port(), free_port()
        env = {
            **env,
            "REDIS_URL": STACK_REDIS,
            "SINKADMIN_SPARK_CONNECT_PORT": str(self.spark_port),
            "SINKADMIN_ADMIN_USER": self.USER,
            "SINKADMIN_ADMIN_PASSWORD": self.PASSWORD,
            # A dead worker's runners are moved after this long; the supervisor looks every second.
            "SINKADMIN_HEARTBEAT_TIMEOUT": "6",
            "SINKADMIN_SUPERVISOR_INTERVAL": "1",
        }
        env.pop("SPARK_REMOTE", None)  # its own Spark Connect server, as make run starts one
        redis.Redis.from_url(STACK_REDIS).flushdb()
        self.log = log
        # make run warms each Spark Connect server it starts up (manage.py warm_spark): its log, from here.
        self.warm_ups = Path(settings.VAR_DIR) / "log" / "spark-warm-up.log"
        self.warm_ups_from = self.warm_ups.stat().st_size if self.warm_ups.exists() else 0
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    str(Path(settings.BASE_DIR) / "manage.py"),
                    "runstack",
                    "--addr",
                    f"127.0.0.1:{self.port}",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 240
        while not (port_open("127.0.0.1", self.port) and port_open("127.0.0.1", self.spark_port)):
            assert self.process.poll() is None, f"make run's stack exited: {self.said()}"
            assert time.monotonic() < deadline, f"make run's stack did not start: {self.said()}"
            time.sleep(0.5)

    def said(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/connect/{path}",
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={
                "Content-Type": "application/json",
                "Authorization": "Basic " + base64.b64encode(f"{self.USER}:{self.PASSWORD}".encode()).decode(),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                text = response.read()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def connectors_worker(self) -> psutil.Process:
        """The Celery worker that hosts the connectors' runners (its main process, not its pool's)."""
        for child in psutil.Process(self.process.pid).children(recursive=True):
            command, parent = child.cmdline(), child.parent()
            main = parent is None or parent.cmdline() != command  # (a pool process runs its parent's command)
            if main and "worker" in command and any("connectors@" in part for part in command):
                return child
        raise AssertionError("make run has no connectors worker")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


@pytest.fixture
def stack(lake: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    running = Stack(lake, tmp_path / "make-run.log")
    yield running
    running.stop()


class Producing:
    """Records keep coming (100 at a time, ids in order) until stopped; the topic's ends after."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.ends: dict[tuple[str, int], int] = {}
        self.first = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(bootstrap, topic))
        self.thread.start()

    def _run(self, bootstrap: str, topic: str) -> None:
        while not self.stop.is_set():
            self.ends.update(produce(bootstrap, topic, json_records(self.first, BATCH), PARTITIONS))
            self.first += BATCH
            time.sleep(0.4)

    def finish(self) -> dict[tuple[str, int], int]:
        self.stop.set()
        self.thread.join()
        return self.ends


def answers_while(stack: Stack, name: str, done: Any, timeout: float, what: str) -> int:
    """Poll the connector's status through the API until ``done()``; every call must be answered."""
    deadline, answered = time.monotonic() + timeout, 0
    while not done():
        status, body = stack.api("GET", f"connectors/{name}/status")
        assert status == 200, (status, body)
        answered += 1
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s: {stack.said()}"
        time.sleep(0.5)
    return answered


def restarted(stack: Stack, name: str, old_pid: int) -> Any:
    def done() -> bool:
        row = StackProcess.objects.filter(name=name).first()
        return row is not None and row.state == StackProcessState.RUNNING and row.pid not in (None, old_pid)

    return done


def test_make_run_heals_its_spark_server_and_its_worker_killed_mid_ingest_and_every_record_lands_once(
    stack: Stack, kafka_bootstrap: str, topic_name: str
) -> None:
    name, table = "healing", f"db.{topic_name.replace('-', '_')}"
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    status, body = stack.api(
        "POST",
        "connectors",
        {
            "name": name,
            "config": {
                "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
                "topics": topic_name,
                "iceberg.tables": table,
                "iceberg.tables.auto-create-enabled": "true",
                "iceberg.control.topic": f"control-{topic_name}",
                "iceberg.control.commit.interval-ms": "1000",
                "tasks.max": "2",
            },
        },
    )
    assert status == 201, body
    producing = Producing(kafka_bootstrap, topic_name)
    try:
        wait_until(
            lambda: Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED).exists(),
            180,
            f"the first commit: {stack.said()}",
        )

        spark = listening_process(stack.spark_port)
        assert spark is not None
        spark.kill()
        answered = answers_while(
            stack, name, restarted(stack, "spark-connect", spark.pid), 240, "the Spark Connect server's restart"
        )
        assert answered > 0 and port_open("127.0.0.1", stack.spark_port)
        committed = Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED).count()
        wait_until(
            lambda: Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED).count() > committed,
            180,
            "a commit through the restarted Spark Connect server",
        )

        worker = stack.connectors_worker()
        worker.kill()
        answers_while(stack, name, restarted(stack, "worker", worker.pid), 120, "the connectors worker's restart")
    finally:
        ends = producing.finish()

    def caught_up() -> bool:
        status, body = stack.api("GET", f"connectors/{name}/offsets")
        assert status == 200, body
        reported = {
            (o["partition"]["kafka_topic"], o["partition"]["kafka_partition"]): o["offset"]["kafka_offset"]
            for o in body["offsets"]
        }
        return reported == ends

    wait_until(caught_up, 300, f"the offsets API to report every record: {stack.said()}")
    ids = sorted(r["id"] for r in table_rows(name, table))
    assert ids == topic_ids(kafka_bootstrap, ends) == list(range(producing.first))

    # The workers page's rows: each death and restart.
    for process in ("spark-connect", "worker"):
        row = StackProcess.objects.get(name=process)
        assert row.state == StackProcessState.RUNNING and row.restarts == 1
        assert row.last_exit_code == -signal.SIGKILL
    assert "spark-connect exited (-9); restarting in 1 s" in stack.said()

    def warm_ups() -> list[str]:
        if not stack.warm_ups.exists():
            return []
        with stack.warm_ups.open("rb") as log:
            log.seek(stack.warm_ups_from)
            lines = log.read().decode(errors="replace").splitlines()
        return [line for line in lines if "Spark is warm" in line or "could not warm Spark up" in line]

    # The Spark server was warmed up as it started (unless it was killed meanwhile), and again once restarted.
    wait_until(lambda: len(warm_ups()) == 2, 120, f"make run to warm each Spark server it started: {warm_ups()}")
    assert "Spark is warm" in warm_ups()[-1], warm_ups()
