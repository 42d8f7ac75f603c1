#!/usr/bin/env python
"""What a commit pays when Spark's Python workers have to start again, with Spark's own daemon and
with this project's (``sinkadmin_spark_daemon``, which imported the decoder's libraries before forking).

Spark stops a Python worker idle for a minute. A connector that commits
less often (Iceberg's default interval is five minutes), a connector's
first commit, and any Spark whose workers went idle start new ones: one per
core, each importing what the decoder needs unless its daemon had it.

For each daemon, a Spark Connect server started as ``make run`` starts it
(``local[2]``), warmed with ``--warm`` commit jobs; then, ``--rounds``
times: wait until Spark has stopped its idle workers, run a commit's job
(8 staged files of 2,500 ~1 KB records, decoded and written by a task per
core, ``SparkWriter.write``), and at once a second one on the workers the
first started. Reports per round the wall time and the server's CPU (its
JVM's, its Python processes') of both jobs, and the Python workers'
memory after them: resident, and unique to each (the rest is shared with
the daemon, copy-on-write). Spark's own daemon is the baseline; the ratio
is this project's over it, same run. Prints them and writes them to
bench/results/python_worker_start.json.

    .venv/bin/python bench/python_worker_start.py [--rounds 3] [--warm 100]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
from django.conf import settings
from spark_decoding import ROOT, SCHEMA, stage  # (sets up Django)
from spark_job_floor import server_cpu

from connectors.config import SinkConfig
from sinkadmin.services import SPARK_DAEMON_MODULE, listening_process, port_open, start_spark_connect
from sinks.iceberg.spark_writer import SparkWriter
from sinks.iceberg.writes import TargetTable, WritePlan
from workers.spark_writer import forget_session, spark_session

PORT = 15077


def python_workers(server: psutil.Process) -> list[psutil.Process]:
    """The server's Python workers: the children of its daemon (its one Python child)."""
    return [worker for daemon in server.children() for worker in daemon.children()]


def wait_workers_stopped(server: psutil.Process, timeout: float = 180) -> float:
    """Seconds until Spark has stopped every idle Python worker of the server."""
    started = time.monotonic()
    while python_workers(server):
        if time.monotonic() - started > timeout:
            raise SystemExit(f"Spark kept its idle Python workers for {timeout:.0f} s")
        time.sleep(1)
    return time.monotonic() - started


def timed(server: psutil.Process, job: object) -> dict[str, float]:
    jvm, _, python = server_cpu(server)
    wall = time.perf_counter()
    job()  # type: ignore[operator]
    wall = time.perf_counter() - wall
    jvm_after, _, python_after = server_cpu(server)
    return {
        "wall_ms": round(wall * 1000),
        "jvm_cpu_ms": round((jvm_after - jvm) * 1000),
        "python_cpu_ms": round((python_after - python) * 1000),
    }


def measure(preload: bool, rounds: int, warm: int, work: Path) -> dict:
    if port_open("127.0.0.1", PORT):
        raise SystemExit(f"port {PORT} is in use: stop what listens there")
    settings.SPARK_PRELOAD_PYTHON = preload
    service = start_spark_connect(PORT, ROOT / "var" / "log" / "bench", master="local[2]", driver_memory="2g")
    try:
        server = listening_process(PORT)
        assert server is not None
        settings.SPARK_REMOTE, settings.SPARK_MASTER = f"sc://127.0.0.1:{PORT}", ""
        session = spark_session()
        config = SinkConfig.parse({"connector.class": "iceberg", "topics": "bench", "iceberg.tables": "bench.t"})
        writer = SparkWriter(config, session)
        staged = stage(work / "staging", 8 * 2_500, 8)
        table = TargetTable(config.settings.tables[0], SCHEMA, str(work / "out"))

        def commit() -> None:
            writer.write(uuid.uuid4(), uuid.uuid4(), staged, WritePlan((table,), "spark"))

        for _ in range(warm):
            commit()
        measured: list[dict[str, Any]] = []
        for _ in range(rounds):
            waited = wait_workers_stopped(server)
            first = timed(server, commit)
            workers = python_workers(server)
            # What each new worker spent in the commit that started it (user, system).
            started = [worker.cpu_times() for worker in workers]
            second = timed(server, commit)
            memory = [worker.memory_full_info() for worker in workers]
            daemon = workers[0].parent().cmdline()[1:3] if workers else []
            measured.append(
                {
                    "idle_s_until_workers_stopped": round(waited),
                    "after_workers_stopped": first,
                    "next_commit": second,
                    "python_workers": len(workers),
                    "worker_cpu_ms_user_system_in_first_commit": [
                        [round(t.user * 1000), round(t.system * 1000)] for t in started
                    ],
                    "worker_rss_mb": [round(m.rss / 2**20) for m in memory],
                    "worker_uss_mb": [round(m.uss / 2**20) for m in memory],
                }
            )
            print(f"  {'preloaded' if preload else 'spark own'}: {measured[-1]}", flush=True)
        forget_session(session)
    finally:
        service.stop()

    def median(key: str, part: str) -> float:
        return statistics.median(r[part][key] for r in measured)

    return {
        "daemon": " ".join(daemon),
        "rounds": measured,
        **{
            f"{part}_{key}": median(key, part)
            for part in ("after_workers_stopped", "next_commit")
            for key in ("wall_ms", "jvm_cpu_ms", "python_cpu_ms")
        },
        "worker_uss_mb": statistics.median(m for r in measured for m in r["worker_uss_mb"]),
        "worker_rss_mb": statistics.median(m for r in measured for m in r["worker_rss_mb"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=int, default=100, help="commit jobs before the first round")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "python_worker_start.json"))
    parser.add_argument("--only-preloaded", action="store_true", help="skip the baseline (no ratios)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="python-worker-start-"))
    try:
        ways = {}
        if not args.only_preloaded:
            ways["pyspark.daemon (Spark's own)"] = measure(False, args.rounds, args.warm, work / "own")
        ways[f"{SPARK_DAEMON_MODULE} (preloaded)"] = measure(True, args.rounds, args.warm, work / "preloaded")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.only_preloaded:
        print(ways)
        return
    own, preloaded = ways.values()
    ratios = {
        f"{part}_{key}": round(preloaded[f"{part}_{key}"] / own[f"{part}_{key}"], 2)
        for part in ("after_workers_stopped", "next_commit")
        for key in ("wall_ms", "python_cpu_ms")
        if own[f"{part}_{key}"]
    }
    ratios["worker_uss_mb"] = round(preloaded["worker_uss_mb"] / own["worker_uss_mb"], 2)
    report = {
        "commit_job": "8 staged files of 2,500 ~1 KB JSON records, a Spark task per core, SparkWriter.write",
        "spark_master": "local[2]",
        "cpu_count": psutil.cpu_count(),
        "ways": ways,
        "preloaded_to_own": ratios,
    }
    for name, way in ways.items():
        figures = {k: v for k, v in way.items() if k not in ("rounds", "daemon")}
        print(f"{name}: {figures}")
    print(f"preloaded / Spark's own: {ratios}")
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
