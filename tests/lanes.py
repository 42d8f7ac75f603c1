"""Servers of their own for each pytest-xdist worker of the integration lane (``-p tests.lanes``, which
scripts/run-tests passes).

The integration tests share a session's broker, Spark Connect server, S3 server and test database. Run in
two xdist workers at once (``-n 2 --dist loadfile``: a file's tests stay together), each worker starts its
own: this module, imported before Django reads its settings, gives worker ``gwN`` (N > 0) its own broker
and Spark ports, ``var/`` directory (logs, staging, warehouse) and Redis databases, and every worker its own
test database (``SINKADMIN_TEST_LANE``, read by tests/conftest.py). Worker ``gw0`` keeps the ports and
directories a single pytest would use.
"""

from __future__ import annotations

import os
from pathlib import Path

# Redis databases by worker: the connectors' (REDIS_URL), the Celery runtime tests' and make run's stacks'.
# (Database 14 is the lane beside the integration tests': scripts/run-tests.)
REDIS_DATABASES = {0: (0, 15, 13), 1: (12, 11, 10)}


def redis_url(database: int) -> str:
    """``REDIS_URL`` with its database number replaced."""
    base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    head, _, tail = base.rpartition("/")
    return f"{head}/{database}" if head and tail.isdigit() else f"{base.rstrip('/')}/{database}"


def _configure(worker: str) -> None:
    index = int(worker.removeprefix("gw"))
    if index not in REDIS_DATABASES:
        raise RuntimeError(f"tests/lanes.py gives servers to {len(REDIS_DATABASES)} xdist workers, not {worker}")
    os.environ["SINKADMIN_TEST_LANE"] = worker
    connectors, celery, stacks = REDIS_DATABASES[index]
    os.environ["SINKADMIN_TEST_CELERY_REDIS"] = redis_url(celery)
    os.environ["SINKADMIN_TEST_STACK_REDIS"] = redis_url(stacks)
    if index == 0:
        return
    os.environ["REDIS_URL"] = redis_url(connectors)
    kafka = int(os.environ.get("SINKADMIN_KAFKA_PORT", "19092")) + 1000 * index
    os.environ["SINKADMIN_KAFKA_PORT"] = str(kafka)
    os.environ["SINKADMIN_KAFKA_CONTROLLER_PORT"] = str(kafka + 1)
    spark = int(os.environ.get("SINKADMIN_SPARK_CONNECT_PORT", "15012")) + 1000 * index
    os.environ["SINKADMIN_SPARK_CONNECT_PORT"] = str(spark)
    var = Path(os.environ.get("SINKADMIN_VAR_DIR", Path(__file__).resolve().parent.parent / "var"))
    os.environ["SINKADMIN_VAR_DIR"] = str(var / f"test-{worker}")


if (_worker := os.environ.get("PYTEST_XDIST_WORKER")) is not None:
    _configure(_worker)
