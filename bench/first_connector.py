#!/usr/bin/env python
"""How long a user's first connector waits on a stack `make run` has just started: with the Spark Connect
server warmed up as it starts (``manage.py warm_spark``, what make run does), against the baseline of the
same stack without (``runstack --no-spark-warm-up``), in turn in each round.

Each round starts a whole stack (``manage.py runstack``: its own embedded broker and Spark Connect server,
web, Celery worker, supervisor and beat, in a directory of its own, on ports, a Redis database and a
PostgreSQL database of its own, new each round, so that it runs beside a user's make run and never sees
its connectors), waits ``--delay`` seconds after its API answers (a user
reading the README), creates a topic of a few records and an Iceberg connector through the REST API, and
measures from the connector's creation:

- until its task is ready to write (its worker log's "ready to write in"; the seconds of the task's own
  warm-up are given too);
- until its first commit is readable (the REST API's offsets endpoint shows every record).

Prints and writes bench/results/first_connector.json.

    .venv/bin/python bench/first_connector.py [--rounds 2] [--delay 30]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from sink_throughput import Product, write_result  # noqa: E402

RECORDS = 100
# Ports and a Redis database apart from make run's (9092/9093, 15002, 8000, db 0) and the tests'.
KAFKA_PORT, SPARK_PORT, REDIS_DB = 9392, 15302, 10


DATABASE = "sinkadmin_bench_first_connector"


def fresh_database() -> str:
    """The URL of a new, empty database for the stack (its control plane and its SQL catalog), on make run's
    PostgreSQL server, as its role (which may create databases: scripts/start-services)."""
    import psycopg
    from django.conf import settings

    DATABASE_URL = settings.DATABASE_URL

    server = DATABASE_URL.split("?", 1)[0].rsplit("/", 1)[0]
    with psycopg.connect(f"{server}/postgres", autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        connection.execute(f"CREATE DATABASE {DATABASE}")
    return f"{server}/{DATABASE}"


class Stack(Product):
    """``manage.py runstack`` in a directory of its own, with its own broker and Spark Connect server."""

    def __init__(self, warm_up: bool) -> None:
        self.var = Path(tempfile.mkdtemp(prefix="sinkadmin-first-connector-"))
        env = {
            **os.environ,
            "SINKADMIN_VAR_DIR": str(self.var),
            "SINKADMIN_KAFKA_PORT": str(KAFKA_PORT),
            "SINKADMIN_KAFKA_CONTROLLER_PORT": str(KAFKA_PORT + 1),
            "SINKADMIN_SPARK_CONNECT_PORT": str(SPARK_PORT),
            "REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
            "DATABASE_URL": fresh_database(),
        }
        for name in ("KAFKA_BOOTSTRAP_SERVERS", "SPARK_REMOTE", "SPARK_MASTER"):
            env.pop(name, None)  # the stack's own broker and Spark server, as on a fresh make run
        super().__init__(env, () if warm_up else ("--no-spark-warm-up",), settle=False)
        deadline = time.monotonic() + 60
        while True:  # (the web server listens before it answers)
            try:
                self.api("GET", "")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise SystemExit(f"the stack's API did not answer (logs: {self.var / 'log'})") from None
                time.sleep(0.2)
        self.answered_after_s = time.monotonic() - self.began

    def worker_log(self) -> str:
        return "".join(p.read_text(errors="replace") for p in (self.var / "log").glob("worker*.log"))


def produce(topic: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = f"127.0.0.1:{KAFKA_PORT}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # (kept: a collected client fails its futures)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        producer.produce(topic, json.dumps({"id": i, "name": f"n{i}"}).encode())
    if producer.flush(30):
        raise SystemExit("the records were not acknowledged")


def first_connector(warm_up: bool, delay: float) -> dict[str, float]:
    stack = Stack(warm_up)
    try:
        time.sleep(delay)
        topic = f"first-{uuid.uuid4().hex[:8]}"
        produce(topic)
        config = {
            "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "topics": topic,
            "iceberg.tables": f"bench.{topic.replace('-', '_')}",
            "iceberg.tables.auto-create-enabled": "true",
            "iceberg.control.commit.interval-ms": "1000",
        }
        created = time.monotonic()
        stack.api("POST", "connectors", {"name": topic, "config": config})
        ready_at = ready_s = committed_at = None
        pattern = re.compile(rf"{re.escape(topic)} task 0: ready to write in ([0-9.]+) s")
        while committed_at is None or ready_at is None:
            if time.monotonic() - created > 300:
                raise SystemExit(f"no first commit in 300 s (logs: {stack.var / 'log'})")
            if ready_at is None and (found := pattern.search(stack.worker_log())):
                ready_at, ready_s = time.monotonic(), float(found.group(1))
            if committed_at is None:
                offsets = stack.api("GET", f"connectors/{topic}/offsets").get("offsets", [])
                if sum(o["offset"]["kafka_offset"] for o in offsets) >= RECORDS:
                    committed_at = time.monotonic()
            time.sleep(0.1)
        return {
            "stack_answered_after_s": round(stack.answered_after_s, 1),
            "ready_after_creation_s": round(ready_at - created, 2),
            "task_warm_up_s": ready_s or 0.0,
            "first_commit_after_creation_s": round(committed_at - created, 2),
        }
    finally:
        stack.stop()
        shutil.rmtree(stack.var, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--delay", type=float, default=30.0, help="seconds between the API answering and the connector")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "first_connector.json"))
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"without warm-up": [], "make run (warm-up)": []}
    for round_ in range(args.rounds):
        for name, warm_up in (("without warm-up", False), ("make run (warm-up)", True)):
            figures = first_connector(warm_up, args.delay)
            runs[name].append(figures)
            print(f"round {round_ + 1}, {name}: {figures}", flush=True)

    def median(name: str, figure: str) -> float:
        return round(statistics.median(r[figure] for r in runs[name]), 2)

    summary: dict[str, dict[str, float]] = {
        name: {figure: median(name, figure) for figure in runs[name][0]} for name in runs
    }
    summary["ratio (warm-up / without)"] = {
        figure: round(median("make run (warm-up)", figure) / median("without warm-up", figure), 2)
        for figure in ("ready_after_creation_s", "first_commit_after_creation_s")
    }
    for name, figures in summary.items():
        print(f"{name}: {figures}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    result = {
        "commit": commit.stdout.strip(),
        "rounds": args.rounds,
        "delay_s": args.delay,
        "records": RECORDS,
        "runs": runs,
        "summary": summary,
    }
    write_result(args.output, result)


if __name__ == "__main__":
    main()
