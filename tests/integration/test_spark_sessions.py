"""Processes running the same code share one Spark Connect session (and so its warm Python
workers), against the real Spark Connect server: joined from separate processes at once, and
moved on to the next generation when the server has closed the session."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import LazySettings

from sinks.iceberg.spark_writer import SparkWriter
from workers import spark_writer

pytestmark = pytest.mark.integration

# A child process that joins the shared session of the code archive named on its command line.
JOIN = """
import os, sys, pathlib
import django
django.setup()
from workers import spark_writer
spark_writer.code_archive = lambda: pathlib.Path(sys.argv[1])
spark = spark_writer.spark_session()
view = sys.argv[2]
if view:
    spark.range(7).createOrReplaceTempView(view)
# A job whose Python worker imports the shipped code: the archive reached the session.
spark_writer.SparkJobs(spark).warm_up()
print(spark.session_id, flush=True)
# A process that met a closed session can hang in gRPC's channel teardown at
# interpreter exit (docs/spark.md, "Sessions"); what is tested is the joining.
os._exit(0)
"""


@pytest.fixture
def code_version(spark_remote: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The code archive under a name of its own (the shared session of a code version no other test
    runs), in this process and, through their command line, in the children."""
    archive = tmp_path / f"sinkadmin-test{uuid.uuid4().hex[:12]}.zip"
    shutil.copyfile(spark_writer.code_archive(), archive)
    monkeypatch.setattr(spark_writer, "code_archive", lambda: archive)
    return archive


def join(archive: Path, env: dict[str, str], view: str = "") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", JOIN, str(archive), view],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )


def session_of(child: subprocess.Popen[str]) -> str:
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    return out.strip().splitlines()[-1]


@pytest.mark.django_db
def test_processes_that_join_at_once_share_one_session(
    spark_remote: str, subprocess_env: dict[str, str], code_version: Path
) -> None:
    # Four processes add the same archive to the same new session at the
    # same moment (the server's check-then-move races) and all get in.
    children = [join(code_version, subprocess_env) for _ in range(4)]
    sessions = {session_of(child) for child in children}
    assert sessions == {spark_writer.shared_session_id(0)}

    # One session on the server: what one process defines, another sees.
    view = f"v_{uuid.uuid4().hex[:8]}"
    session_of(join(code_version, subprocess_env, view))
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(spark_writer.with_session_id(spark_remote, next(iter(sessions)))).create()
    assert spark.table(view).count() == 7


def test_a_spark_35_server_never_closes_a_session_it_drops_it() -> None:
    """Spark 4's servers close a session idle beyond their timeout and answer SESSION_CLOSED, and the
    processes move on to the next generation's id together. A Spark 3.5 client cannot close a session
    (no ReleaseSession) and its server never answers SESSION_CLOSED: it drops a session idle for an
    hour (or beyond its 100 sessions) and answers the same id with a new, empty one; the next test
    shows a write rejoining it."""
    from pyspark.sql.connect.client.core import SparkConnectClient

    assert not hasattr(SparkConnectClient, "release_session")


@pytest.mark.django_db
def test_a_write_that_meets_a_dropped_session_joins_it_again_and_writes_every_record(
    code_version: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: LazySettings
) -> None:
    """A connector whose topic was quiet longer than the server's session timeout: its next write
    meets a session that lost this code (a Spark 3.5 server answers its id with a new, empty
    session), which is routine, not a failure. A server of its own, restarted as the dropping."""
    import pyarrow.parquet as pq

    from sinkadmin.services import start_spark_connect
    from tests.conftest import free_port
    from tests.test_spark_writer import config, job, staged_file

    port = free_port()
    logs = settings.VAR_DIR / "log" / "tests"
    server = start_spark_connect(port, logs, master="local[1]", driver_memory="1g")
    try:
        settings.SPARK_REMOTE = f"sc://127.0.0.1:{port}"
        monkeypatch.setattr(spark_writer, "_session", None)  # this process joins as a runner would
        writer = SparkWriter(config())
        writer.warm_up()
        assert writer.spark.session_id == spark_writer.shared_session_id(0)

        server.stop()
        server = start_spark_connect(port, logs, master="local[1]", driver_memory="1g")

        values = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(300)]
        staged = staged_file(tmp_path, list(values))
        work = job(tmp_path, config())
        result = writer.write(work.commit_id, work.staging_id, [staged], work.plan)
    finally:
        server.stop()

    assert writer.spark.session_id == spark_writer.shared_session_id(0)
    assert not result.bad
    rows = [row for f in result.files for row in pq.read_table(f.path.removeprefix("file://")).to_pylist()]
    assert sorted(row["id"] for row in rows) == list(range(300))


@pytest.mark.django_db
def test_a_first_write_during_the_warm_up_waits_for_it_and_writes_every_record(
    spark_remote: str, code_version: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The warm-up runs on a thread of its own (runtime.run_task); a first commit that ends before
    it is done writes with the same session, and no second warm-up job runs."""
    import threading

    import pyarrow.parquet as pq

    from tests.test_spark_writer import config, job, staged_file

    monkeypatch.setattr(spark_writer, "_session", None)
    writer = SparkWriter(config())
    ranges: list[int] = []
    real_range = writer.spark.range

    def counted(*args: int) -> object:
        ranges.append(len(args))
        return real_range(*args)

    monkeypatch.setattr(writer.spark, "range", counted)
    warming = threading.Thread(target=writer.warm_up)
    warming.start()
    values = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(300)]
    staged = staged_file(tmp_path, list(values))
    work = job(tmp_path, config())
    result = writer.write(work.commit_id, work.staging_id, [staged], work.plan)
    warming.join()

    # One warm-up job (range over the default parallelism: one argument
    # besides the start) and the write's job (four: its Spark tasks given).
    assert sorted(ranges) == [2, 4]
    assert not result.bad
    rows = [row for f in result.files for row in pq.read_table(f.path.removeprefix("file://")).to_pylist()]
    assert sorted(row["id"] for row in rows) == list(range(300))
