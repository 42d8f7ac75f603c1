"""The spark data plane's pieces that need no Spark: what its Python workers run over a staged
file (called here directly, on real files), how a Spark failure reads, the code it ships to
executors, and the message when Spark cannot be reached."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import uuid
import zipfile
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.conf import LazySettings
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from connectors.config import SinkConfig
from sinks.iceberg.spark_writer import SparkWriter, StagedDecode
from sinks.iceberg.writes import TargetTable, WritePlan
from workers import spark_writer
from workers.spark_writer import (
    SparkUnavailable,
    balanced_groups,
    code_archive,
    decode_staged_partitions,
    read_staged_chunks,
    spark_failure,
    task_groups,
    unit_groups,
)
from workers.staging import RawStagingFile, RecordChunk, StagedPartition

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))


def config(**more: str) -> SinkConfig:
    return SinkConfig.parse(
        {
            "connector.class": "iceberg",
            "topics": "orders",
            "iceberg.tables": "db.orders",
            "errors.tolerance": "all",
            **more,
        }
    )


def staged_file(tmp_path: Path, values: list[bytes | None], chunk_bytes: int = 1 << 16) -> StagedPartition:
    raw = RawStagingFile(tmp_path / "staging" / "orders+3+100.parquet", chunk_bytes)
    offsets = list(range(100, 100 + len(values)))
    for first in range(0, len(values), 50):  # row groups of 50 records, as spills would make
        part = slice(first, first + 50)
        n = len(offsets[part])
        raw.write(RecordChunk("orders", 3, offsets[part], [1] * n, [None] * n, values[part], [None] * n, [None] * n))
    return StagedPartition("orders", 3, 100, 100 + len(values), len(values), raw.close(), None)


def job(tmp_path: Path, cfg: SinkConfig, schema: Schema = SCHEMA) -> StagedDecode:
    table = TargetTable(cfg.settings.tables[0], schema, str(tmp_path / "warehouse" / "orders"))
    return StagedDecode(cfg, WritePlan((table,), "spark"), uuid.uuid4(), uuid.uuid4())


def test_a_staged_file_is_read_back_in_chunks_of_about_the_size_asked(tmp_path: Path) -> None:
    values: list[bytes | None] = [json.dumps({"id": i, "name": "x" * 200}).encode() for i in range(120)]
    staged = staged_file(tmp_path, values)
    assert staged.path is not None
    chunks = list(read_staged_chunks(staged.path, 4096))
    assert [o for c in chunks for o in c.offsets] == list(range(100, 220))
    assert [v for c in chunks for v in c.values] == values
    assert max(len(c) for c in chunks) < 50  # cut inside row groups, not a row group a chunk


def test_what_a_python_worker_runs_writes_final_files_and_reports_bad_records(tmp_path: Path) -> None:
    values: list[bytes | None] = [b'{"id": %d, "name": "n"}' % i for i in range(80)]
    values[7], values[60], values[61] = b'{"id": "seven"}', None, b"[1]"
    staged = staged_file(tmp_path, values)
    outcome = job(tmp_path, config()).decode(staged)
    [written] = outcome["files"]
    assert written["path"].endswith(".parquet") and "/data/orders+3+100+179-" in written["path"]
    rows = pq.read_table(written["path"].removeprefix("file://")).to_pylist()
    assert len(rows) == written["records"] == 77
    assert [offset for offset, _, _ in outcome["bad"]] == [107, 161] and outcome["skipped"] == 1
    assert "does not fit its column type" in outcome["bad"][0][1]
    # (Its stage, told by its reason: not a refusal of the sink's own, which would say TASK_PUT.)
    assert outcome["bad"][0][2] is None
    assert not list((tmp_path / "warehouse" / "orders" / "data" / "_tmp").rglob("*.parquet"))


def test_records_with_new_fields_come_back_as_the_fields_to_add(tmp_path: Path) -> None:
    values: list[bytes | None] = [b'{"id": 1, "name": "a", "city": "Oslo"}']
    staged = staged_file(tmp_path, values)
    outcome = job(tmp_path, config(**{"iceberg.tables.evolve-schema-enabled": "true"})).decode(staged)
    additions = Schema.model_validate_json(outcome["additions"])
    assert [f.name for f in additions.fields] == ["city"] and "files" not in outcome
    assert not list((tmp_path / "warehouse").rglob("*.parquet"))  # nothing written in the old schema


def test_the_mapinarrow_function_answers_one_row_per_staged_partition_of_its_groups(tmp_path: Path) -> None:
    first = staged_file(tmp_path / "a", [b'{"id": 1}', b'{"id": 2}'])
    second = replace(staged_file(tmp_path / "b", [b'{"id": 3}']), partition=4)
    third = replace(staged_file(tmp_path / "c", [b'{"id": 4}'] * 3), partition=5)
    decode = replace(job(tmp_path, config()), staged=(first, second, third))
    groups = ((0,), (1, 2))
    # What Spark hands a Python worker: the numbers of its groups of staged partitions.
    batches = iter([pa.record_batch([pa.array([1, 0])], names=["id"])])
    answers = list(decode_staged_partitions(decode, groups, batches))
    outcomes = [a.to_pylist()[0] for a in answers]
    assert [(o["topic"], o["partition"]) for o in outcomes] == [("orders", 4), ("orders", 5), ("orders", 3)]
    assert [json.loads(o["outcome"])["files"][0]["records"] for o in outcomes] == [1, 3, 2]


def test_a_job_has_a_spark_task_per_core_each_with_about_equal_records() -> None:
    def partitions(*records: int) -> list[StagedPartition]:
        return [StagedPartition("orders", n, 0, r, r, None, None) for n, r in enumerate(records)]

    # Eight partitions, two cores: two tasks of four, the largest placed first.
    groups = task_groups(partitions(100, 90, 80, 70, 60, 50, 40, 30), 2)
    assert groups == ((0, 3, 4, 7), (1, 2, 5, 6))
    assert [sum((100, 90, 80, 70, 60, 50, 40, 30)[i] for i in g) for g in groups] == [260, 260]
    # One large partition gets a task of its own.
    assert task_groups(partitions(1000, 10, 10, 10), 2) == ((0,), (1, 2, 3))
    # More cores than partitions: a task each; every partition is in exactly one group.
    assert task_groups(partitions(5, 5, 5), 8) == ((0,), (1,), (2,))
    assert sorted(i for g in task_groups(partitions(*range(1, 17)), 3) for i in g) == list(range(16))
    assert task_groups(partitions(7, 7), 0) == ((0, 1),)
    # Any weights (Hudi's merge groups its file groups' writes by the rows they read).
    assert balanced_groups([3, 9, 1, 4, 0], 2) == ((1,), (0, 2, 3, 4))
    assert balanced_groups([], 4) == ()
    # A UnitJob's units, dealt in turn to a task per core.
    assert unit_groups(5, 2) == ((0, 2, 4), (1, 3))
    assert unit_groups(1, 8) == ((0,),) and unit_groups(0, 2) == ()


def test_executors_get_the_decoder_from_the_shipped_archive(tmp_path: Path) -> None:
    archive = code_archive()
    names = set(zipfile.ZipFile(archive).namelist())
    assert {
        "sinks/iceberg/arrow_writer.py",
        "workers/json_decoder.py",
        "workers/spark_writer.py",
        "connectors/config/validation.py",
    } <= names
    assert code_archive() == archive  # named by content: shipped once per session
    # What a Python worker does first: import the decoder from the archive, without Django settings.
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import workers.spark_writer, sinks.iceberg.arrow_writer, sinks.files.writer, sinks.hudi.writer; print('ok')",
        ],
        env={"PYTHONPATH": str(archive)},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert probe.stdout.strip() == "ok", probe.stderr


def test_a_python_worker_freezes_what_a_task_imported_before_the_next_task_starts(tmp_path: Path) -> None:
    # PySpark's daemon collects garbage in a reused Python worker after every
    # Spark task: what a task's imports keep must be frozen by the next task's
    # start, or every collection walks it again. A start with nothing newly
    # imported freezes nothing (the task's own objects stay collectable).
    script = """
import gc, sys
from workers import spark_writer
spark_writer._freeze_imports()
gc.collect()
before, frozen = len(gc.get_objects()), gc.get_freeze_count()
spark_writer._freeze_imports()
assert gc.get_freeze_count() == frozen, "nothing was imported, nothing is frozen"
assert "http.server" not in sys.modules
import http.server, xml.dom.minidom
imported = len(gc.get_objects())
spark_writer._freeze_imports()
print(before, imported, len(gc.get_objects()))
"""
    probe = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": str(code_archive())},
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    before, imported, after = map(int, probe.stdout.split())
    assert imported - before > 1000  # what the imports keep
    assert after < before + 100  # frozen: out of the collector's walk


def test_a_spark_failure_shows_the_python_workers_error_first() -> None:
    raised = (
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker.\n"
        "Traceback (most recent call last):\n"
        '  File "/x/workers/spark_writer.py", line 1, in decode\n'
        "    raise OSError\n"
        "OSError: [Errno 28] No space left on device: '/lake/orders/data'\n"
        " SQLSTATE: 38000\n"
        "JVM stacktrace:\n"
        "org.apache.spark.api.python.PythonException\n"
        "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)\n"
    )
    assert spark_failure(Exception(raised)).startswith(
        "Spark job failed: OSError: [Errno 28] No space left on device: '/lake/orders/data'"
    )


@pytest.mark.django_db
def test_a_spark_that_cannot_be_reached_is_named_in_one_clear_message(settings: LazySettings) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    settings.SPARK_REMOTE = f"sc://127.0.0.1:{closed}"
    spark_writer.forget_session(spark_writer._session)
    with pytest.raises(SparkUnavailable, match=f"Spark at sc://127.0.0.1:{closed} is unreachable"):
        _ = SparkWriter(config()).spark


def test_closing_one_spark_connect_client_leaves_the_release_pool_to_the_others() -> None:
    # Spark 3.5 shuts its process-wide pool of result releases down whenever any
    # client closes (a session stopped or collected): another client's query
    # then fails with "Pool not running" (SPARK-55406).
    from multiprocessing.pool import RUN

    from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator as Results

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    kept = spark_writer.connect(f"sc://127.0.0.1:{closed}", max_retries=0)
    spark_writer.connect(f"sc://127.0.0.1:{closed}", max_retries=0).stop()
    Results._initialize_pool_if_necessary()
    pool = Results._release_thread_pool
    assert pool is not None
    spark_writer.connect(f"sc://127.0.0.1:{closed}", max_retries=0).stop()
    assert Results._release_thread_pool is pool and pool._state == RUN  # type: ignore[attr-defined]
    assert not kept.client.is_closed


def test_the_shared_session_is_named_in_the_spark_connect_url_beside_the_operators_parameters() -> None:
    session = spark_writer.shared_session_id(0)
    assert uuid.UUID(session).version == 4 and session != spark_writer.shared_session_id(1)
    assert spark_writer.with_session_id("sc://spark:15002", session) == f"sc://spark:15002/;session_id={session}"
    assert (
        spark_writer.with_session_id("sc://spark:15002/;token=abc;use_ssl=true", session)
        == f"sc://spark:15002/;token=abc;use_ssl=true;session_id={session}"
    )


def test_a_python_worker_whose_working_directory_was_deleted_can_still_import_pyiceberg(tmp_path: Path) -> None:
    # Spark forks its Python workers in a Spark Connect session's directory,
    # which the server deletes with the session; pyiceberg reads os.getcwd()
    # when imported, and every function the workers run comes from `workers`.
    gone = tmp_path / "session"
    gone.mkdir()
    root = Path(__file__).resolve().parent.parent
    script = (
        "import os, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); "
        "import workers, pyiceberg.manifest; print(os.getcwd())"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(gone)],
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == tempfile.gettempdir()


def test_an_unreachable_spark_is_told_by_the_grpc_calls_status_not_its_reprs_first_line() -> None:
    """(A QA pass saw "Spark at sc://... is unreachable: <_MultiThreadedRendezvous of RPC that terminated with:".)"""
    import grpc

    from tests.conftest import free_port
    from workers.spark_writer import _first_line

    call = grpc.insecure_channel(f"127.0.0.1:{free_port()}").unary_unary("/spark.connect.SparkConnectService/Config")
    with pytest.raises(grpc.RpcError) as refused:
        call(b"", timeout=5)
    assert str(refused.value).startswith("<_")  # (what was shown)
    said = _first_line(refused.value)
    assert said.startswith("UNAVAILABLE: ") and "Connection refused" in said, said
    assert _first_line(RuntimeError("one line\nand more")) == "one line"
