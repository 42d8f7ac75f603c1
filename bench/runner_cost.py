"""What a runner (a connector's coordinator or task) costs at rest, in the product as `make run`
starts it, and whether its default worker hosts dozens of connectors.

Starts `make run`'s stack (``manage.py runstack``) on the benchmark's broker and Spark, measures
its connectors worker idle, then creates N connectors through the REST API (each on a topic of
its own with a few records, ``tasks.max`` T), waits until every one has committed all of its
records, lets them rest, and measures each pool process that hosts a runner: memory of its own
(USS) and proportional (PSS), threads, TCP connections (to the broker, Postgres, Spark), the CPU
it burns at rest, and the whole worker's PSS; and the CPU of the broker and of the machine at
rest against the same stack before any connector existed. Prints the figures and writes them to
bench/results/runner_cost.json.

    .venv/bin/python bench/runner_cost.py [--connectors 20] [--tasks 2] [--slots N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
from django.conf import settings
from django.db import connection
from sink_throughput import ROOT, Product, broker_process, ensure_services, produce, usage

from connectors.models import ConnectorTask, CoordinatorStatus, PartitionOffset

RECORDS = 100
# Remote ports of what a runner talks to (as make services starts them).
PEERS = {
    5432: "postgres",
    int(settings.KAFKA_BOOTSTRAP_SERVERS.rsplit(":", 1)[1]): "kafka",
    6379: "redis",
    int((settings.SPARK_REMOTE or "sc://x:15002").rsplit(":", 1)[1].split("/")[0]): "spark",
}


def process_figures(pid: int) -> dict[str, float]:
    process = psutil.Process(pid)
    memory = process.memory_full_info()
    return {
        "uss_mb": memory.uss / 2**20,
        "pss_mb": memory.pss / 2**20,
        "rss_mb": memory.rss / 2**20,
        "threads": process.num_threads(),
        **{f"connections_to_{peer}": 0 for peer in [*PEERS.values(), "other"]},
        **connections_by_peer(process),
    }


def connections_by_peer(process: psutil.Process) -> dict[str, int]:
    counts: dict[str, int] = {}
    for socket_ in process.net_connections(kind="inet"):
        if socket_.raddr:
            peer = PEERS.get(socket_.raddr.port, "other")
            counts[f"connections_to_{peer}"] = counts.get(f"connections_to_{peer}", 0) + 1
    return counts


def cpu_seconds(process: psutil.Process | None) -> float:
    if process is None:
        return 0.0
    times = process.cpu_times()
    return float(times.user + times.system)


def busy_cores() -> float:
    """Cores' worth of CPU the machine used since the last call (psutil's own baseline at the first)."""
    return psutil.cpu_percent(interval=None) / 100 * (psutil.cpu_count() or 1)


def postgres_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute("select count(*) from pg_stat_activity where backend_type = 'client backend'")
        return int(cursor.fetchone()[0])


def postgres_setting(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("select current_setting(%s)", [name])
        return str(cursor.fetchone()[0])


def summary(rows: list[dict[str, float]]) -> dict[str, float]:
    if not rows:
        return {}
    return {
        f"{key}_{stat}": round(fn([row[key] for row in rows]), 1)
        for key in rows[0]
        for stat, fn in (("median", statistics.median), ("max", max))
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connectors", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--slots", type=int, default=0, help="the worker's slots (default: make run's default)")
    parser.add_argument("--rest-seconds", type=float, default=15.0)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "runner_cost.json"))
    args = parser.parse_args()
    if args.slots:
        os.environ["SINKADMIN_WORKER_CONCURRENCY"] = str(args.slots)

    ensure_services()
    run = uuid.uuid4().hex[:6]
    names = [f"rest-{run}-{i:02d}" for i in range(args.connectors)]
    for name in names:
        produce(name, RECORDS, args.tasks)

    product = Product()
    try:
        worker = product.worker()
        time.sleep(10)  # the pool started and settled
        pool = worker.children()
        idle = [process_figures(p.pid) for p in pool]
        idle_worker = usage(worker)
        idle_backends = postgres_backends()
        broker = broker_process()
        busy_cores()
        broker_cpu, began = cpu_seconds(broker), time.monotonic()
        time.sleep(args.rest_seconds)
        idle_machine_cores, idle_seconds = busy_cores(), time.monotonic() - began
        idle_broker_cores = (cpu_seconds(broker) - broker_cpu) / idle_seconds
        print(f"worker idle: {len(pool)} pool processes, {idle_worker.memory / 2**20:.0f} MB PSS in all")

        started = time.monotonic()
        for name in names:
            config = {
                "connector.class": "iceberg",
                "topics": name,
                "iceberg.tables": f"bench.{name.replace('-', '_')}",
                "tasks.max": str(args.tasks),
                "iceberg.tables.auto-create-enabled": "true",
                "iceberg.control.commit.interval-ms": "2000",
                "iceberg.control.topic": f"control-{name}",
            }
            product.api("POST", "connectors", {"name": name, "config": config})
        deadline = time.monotonic() + 600
        while True:
            committed = {
                name: sum(
                    PartitionOffset.objects.filter(connector__name=name).values_list("committed_offset", flat=True)
                )
                for name in names
            }
            done = [name for name, offset in committed.items() if offset >= RECORDS]
            if len(done) == len(names):
                break
            if time.monotonic() > deadline:
                statuses = {n: product.api("GET", f"connectors/{n}/status") for n in names if n not in done}
                raise SystemExit(f"{len(done)}/{len(names)} connectors committed in 600 s: {statuses}")
            time.sleep(1)
        all_committed_s = time.monotonic() - started
        print(f"{len(names)} connectors ({args.tasks} tasks each) all committed in {all_committed_s:.0f} s")
        time.sleep(5)  # (the last commits' writes end)

        pids = {int(w.rsplit(":", 1)[1]): "task" for w in ConnectorTask.objects.values_list("worker_id", flat=True)}
        pids |= {
            int(w.rsplit(":", 1)[1]): "coordinator"
            for w in CoordinatorStatus.objects.values_list("worker_id", flat=True)
        }
        # CPU at rest: what each runner, the broker and the machine burn while nothing arrives.
        runner_cpu = {pid: cpu_seconds(psutil.Process(pid)) for pid in pids}
        busy_cores()
        broker_cpu, began = cpu_seconds(broker), time.monotonic()
        time.sleep(args.rest_seconds)
        rest_machine_cores, rest_seconds = busy_cores(), time.monotonic() - began
        rest_broker_cores = (cpu_seconds(broker) - broker_cpu) / rest_seconds
        by_role: dict[str, list[dict[str, float]]] = {"coordinator": [], "task": []}
        for pid, role in pids.items():
            figures = process_figures(pid)
            figures["cpu_percent_of_a_core"] = (cpu_seconds(psutil.Process(pid)) - runner_cpu[pid]) / rest_seconds * 100
            by_role[role].append(figures)
        at_rest = usage(worker)
        # (Runners reach Postgres over its Unix socket, which the per-process count above does not see.)
        backends = postgres_backends() - idle_backends
        result = {
            "connectors": args.connectors,
            "tasks_per_connector": args.tasks,
            "slots": len(pool),
            "all_committed_seconds": round(all_committed_s, 1),
            "idle_pool_process": summary(idle),
            "idle_worker_pss_mb": round(idle_worker.memory / 2**20),
            "coordinator_at_rest": summary(by_role["coordinator"]),
            "task_at_rest": summary(by_role["task"]),
            "worker_pss_mb_at_rest": round(at_rest.memory / 2**20),
            "worker_pss_mb_per_runner": round((at_rest.memory - idle_worker.memory) / 2**20 / len(pids), 1),
            "postgres_backends_per_runner": round(backends / len(pids), 2),
            "postgres_max_connections": int(postgres_setting("max_connections")),
            "cpu_at_rest": {
                "seconds": round(rest_seconds, 1),
                "machine_cores_busy": round(rest_machine_cores, 2),
                "machine_cores_busy_before_any_connector": round(idle_machine_cores, 2),
                "machine_cores_busy_ratio": round(rest_machine_cores / max(idle_machine_cores, 0.01), 1),
                "broker_cores": round(rest_broker_cores, 3),
                "broker_cores_before_any_connector": round(idle_broker_cores, 3),
                "runners_cores": round(sum(r["cpu_percent_of_a_core"] for rs in by_role.values() for r in rs) / 100, 2),
                "machine_cores": psutil.cpu_count(),
            },
        }
        print(json.dumps(result, indent=2))
        Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    finally:
        for name in names:
            try:
                product.api("DELETE", f"connectors/{name}")
            except Exception as exc:  # the stack may be gone: its database rows stay, and say so
                print(f"could not delete {name}: {exc}")
        product.stop()


if __name__ == "__main__":
    main()
