"""Spark's Python workers start from this project's daemon (``sinkadmin_spark_daemon``), which has
imported the decoder's libraries before it forks them: on the real Spark Connect server that the
product starts, and in a worker process's own local Spark."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyspark
import pytest
from django.conf import LazySettings, settings
from pyspark import cloudpickle

from sinkadmin.services import SPARK_DAEMON_MODULE, SPARK_DAEMON_PATH, python_daemon_conf
from sinks.iceberg.spark_writer import StagedDecode
from tests.test_spark_writer import config, job, staged_file
from workers.spark_writer import spark_session
from workers.staging import StagedPartition

ROOT = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = {"workers", "connectors", "sinks", "sinkadmin", "tests"}

# The probe below runs in Spark's Python workers, which have the code archive
# (workers, connectors, sinks) but not the tests: it travels by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def imported_by_a_decode(
    decode: StagedDecode, staged: StagedPartition, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """In a Python worker: decode ``staged``, then say which daemon forked this worker and which
    libraries (not the standard library's, not this project's) it imported that the daemon had not."""
    outcome = decode.decode(staged)
    daemon = sys.modules["__main__"]
    preloaded = getattr(daemon, "PRELOADED", frozenset())
    libraries = sorted(
        name
        for name in sys.modules
        if name not in preloaded
        and name.split(".")[0] not in sys.stdlib_module_names
        and name.split(".")[0] not in PROJECT_PACKAGES
    )
    for _ in batches:
        report = {
            "daemon": Path(getattr(daemon, "__file__", "")).name,
            "preloaded": len(preloaded),
            "imported": libraries,
            "records": sum(f["records"] for f in outcome["files"]),
        }
        yield pa.RecordBatch.from_pylist([{"report": json.dumps(report)}])


def test_the_daemon_is_for_a_spark_on_this_machine_and_can_be_turned_off(settings: LazySettings) -> None:
    assert python_daemon_conf("local[2]") == {"spark.python.daemon.module": SPARK_DAEMON_MODULE}
    # A cluster's executors do not have the file (an operator can give it to them; docs/spark.md says how).
    assert python_daemon_conf("spark://master:7077") == {}
    assert python_daemon_conf("yarn") == {}
    settings.SPARK_PRELOAD_PYTHON = False  # SINKADMIN_SPARK_PRELOAD_PYTHON=false
    assert python_daemon_conf("local[2]") == {}


@pytest.mark.integration
def test_python_workers_fork_from_a_daemon_that_has_every_library_a_decode_imports(
    spark_remote: str, tmp_path: Path
) -> None:
    if not settings.SPARK_LOCAL_CONNECT:
        pytest.skip("the Spark Connect server is the operator's (SPARK_REMOTE): its daemon is Spark's own")
    from pyspark.sql.types import StringType, StructField, StructType

    values: list[bytes | None] = [b'{"id": %d, "name": "n"}' % i for i in range(40)]
    staged = staged_file(tmp_path, values)
    probe = functools.partial(imported_by_a_decode, job(tmp_path, config()), staged)
    # A task per core (the server's local[2]), so every worker the daemon forked so far may answer.
    frame = spark_session().range(0, 2, 1, 2)
    rows = frame.mapInArrow(probe, StructType([StructField("report", StringType())])).collect()
    reports = [json.loads(row["report"]) for row in rows]
    assert len(reports) == 2
    for report in reports:
        assert report["daemon"] == f"{SPARK_DAEMON_MODULE}.py", report
        assert report["preloaded"] > 500 and report["records"] == 40, report
        # The worker imported no library the daemon lacked: a new worker costs no imports but ours.
        # (A worker the daemon forked earlier in the suite also ran other tests' decodes, those of
        # partitioned tables among them: they count too.)
        assert report["imported"] == [], report


def test_the_daemon_preloads_without_starting_a_thread_and_leaves_no_zip_importer_to_reread() -> None:
    # Spark's PYTHONPATH for its Python processes: pyspark's own archives first.
    lib = Path(pyspark.__file__).parent / "python" / "lib"
    archives = [str(lib / "pyspark.zip"), *map(str, lib.glob("py4j-*-src.zip"))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*archives, str(SPARK_DAEMON_PATH)])}
    script = f"""
import importlib, sys, zipimport
import {SPARK_DAEMON_MODULE} as daemon
daemon.preload()
print(daemon.single_threaded(), sys.modules["pyspark"].__file__)
# What a worker's first task does once it has added the session's archives to its path:
print(sum(isinstance(finder, zipimport.zipimporter) for finder in sys.path_importer_cache.values()))
importlib.invalidate_caches()
# A module of pyspark.zip that nothing imported yet still imports.
assert "pyspark.sql.avro.functions" not in sys.modules
import pyspark.sql.avro.functions
print(pyspark.sql.avro.functions.__file__)
"""
    preloaded = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert preloaded.returncode == 0, preloaded.stderr
    threads, cached, avro = preloaded.stdout.strip().splitlines()
    assert threads.startswith("True ") and "pyspark.zip" in threads
    # No importer left to read its archive's directory again at each new worker's first task.
    assert cached == "0"
    assert "pyspark.zip" in avro


@pytest.mark.parametrize(
    ("before", "why"),
    [
        # A library that starts a thread on import (another build of it): a
        # fork would not have the thread and could deadlock on its locks.
        ("threading.Thread(target=time.sleep, args=(600,), daemon=True).start()", "an import started a thread"),
        # A library this Python lacks: its workers' decode says so, not the daemon's death.
        ('sys.modules["fastavro"] = None', "preloading failed (ModuleNotFoundError"),
    ],
)
def test_a_daemon_that_cannot_preload_safely_becomes_sparks_own(before: str, why: str) -> None:
    # Spark's own daemon writes its port to Spark and exits when Spark closes its standard input.
    script = f"""
import runpy, sys, threading, time
{before}
sys.argv = ["{SPARK_DAEMON_MODULE}", "pyspark.worker"]
runpy.run_module("{SPARK_DAEMON_MODULE}", run_name="__main__")
"""
    daemon = subprocess.Popen(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(SPARK_DAEMON_PATH)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert daemon.stdout is not None and daemon.stdin is not None and daemon.stderr is not None
    port = int.from_bytes(daemon.stdout.read(4), "big")
    command = Path(f"/proc/{daemon.pid}/cmdline").read_bytes().split(b"\0")
    daemon.stdin.close()
    daemon.wait(60)
    assert 0 < port < 65536
    assert command[1:3] == [b"-m", b"pyspark.daemon"]
    assert why in daemon.stderr.read().decode()


@pytest.mark.integration
def test_a_worker_processs_own_local_spark_starts_python_workers_from_the_daemon(tmp_path: Path) -> None:
    # SPARK_MASTER=local[...] without SPARK_REMOTE: the Spark of a worker
    # process's own JVM (the driver in the process, executors in it too).
    script = """
import os, sys
import django
django.setup()
from pyspark.sql.types import StringType, StructField, StructType
from workers.spark_writer import spark_session

def daemon(batches):
    import pyarrow as pa
    main = sys.modules["__main__"]
    for _ in batches:
        yield pa.RecordBatch.from_pylist([{"daemon": os.path.basename(getattr(main, "__file__", ""))}])

rows = spark_session().range(0, 1, 1, 1).mapInArrow(daemon, StructType([StructField("daemon", StringType())])).collect()
print(rows[0]["daemon"])
"""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPARK_")}
    env.update(SPARK_MASTER="local[1]", DJANGO_SETTINGS_MODULE="sinkadmin.settings")
    run = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == f"{SPARK_DAEMON_MODULE}.py"
