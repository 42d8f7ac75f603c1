"""Fixtures for the Connect API tests: named users, authenticated clients, connectors."""

from __future__ import annotations

import base64
import sys
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from connectors import actions
from connectors.actions.ledger import PartitionRange, seed_offsets
from connectors.models import Commit, Connector, ConnectorTask, TaskState

BASE = "/api/connect"
PASSWORD = "correct horse battery staple"

CONFIG: dict[str, str] = {
    "connector.class": "iceberg",
    "topics": "orders",
    "iceberg.tables": "db.orders",
    "iceberg.catalog.uri": "postgresql://lake@db/catalog",
    "iceberg.catalog.s3.secret-access-key": "s3-secret-value",
    "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";',
}
SECRET_VALUES = ("s3-secret-value", 'password="p"')


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    # Basic auth checks the password on every request; the production hasher
    # is slow on purpose and would dominate these tests' run time.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def basic(username: str, password: str = PASSWORD) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


@pytest.fixture
def alice(db: None) -> User:
    """An operator: superuser, may do everything."""
    return User.objects.create_superuser("alice", "alice@example.com", PASSWORD)


@pytest.fixture
def rita(db: None) -> User:
    """A read-only user: logged in, but without connector permissions."""
    return User.objects.create_user("rita", "rita@example.com", PASSWORD)


@pytest.fixture
def carl(db: None) -> User:
    """May change connectors, but not create or delete them."""
    user = User.objects.create_user("carl", "carl@example.com", PASSWORD)
    user.user_permissions.add(Permission.objects.get(codename="change_connector"))
    return user


@pytest.fixture
def api(alice: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=basic("alice"))
    return client


@pytest.fixture
def reader(rita: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=basic("rita"))
    return client


@pytest.fixture
def changer(carl: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=basic("carl"))
    return client


@pytest.fixture
def anonymous(db: None) -> APIClient:
    return APIClient()


@pytest.fixture
def token_api(alice: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")
    return client


@pytest.fixture
def make_connector(db: None) -> Callable[..., Connector]:
    def make(name: str = "orders-sink", initial_state: str = "RUNNING", **config: str) -> Connector:
        return actions.create_connector(name, {**CONFIG, **config}, initial_state)

    return make


@pytest.fixture
def connector(make_connector: Callable[..., Connector]) -> Connector:
    return make_connector()


def add_task(connector: Connector, index: int, state: str = TaskState.RUNNING, **fields: Any) -> ConnectorTask:
    """A task row as the supervisor and a live worker leave it."""
    defaults: dict[str, Any] = {"worker_id": f"worker-{index}:8083", "heartbeat_at": timezone.now()}
    return ConnectorTask.objects.create(connector=connector, task_index=index, state=state, **{**defaults, **fields})


def run_coordinator(connector: Connector, worker_id: str = "worker-0:8083") -> int:
    """Take the coordinator lease as a live coordinator does; returns its epoch."""
    return actions.take_coordinator_lease(connector.pk, worker_id)


def commit(
    connector: Connector, epoch: int, start: int, end: int, partition: int = 0, *, applied: bool = True
) -> Commit:
    """One committed interval of topic ``orders``, through the ledger's own actions (only prepared, not
    applied, when ``applied`` is false)."""
    seed_offsets(connector.pk, epoch, {("orders", partition): start})
    prepared = actions.prepare_commit(
        connector.pk,
        epoch=epoch,
        commit_id=uuid.uuid4(),
        started_at=timezone.now(),
        ranges=[PartitionRange("orders", partition, start, end, records=end - start)],
        files=[
            {
                "table": "db.orders",
                "path": f"/warehouse/db/orders/data/orders+{partition}+{start}+{end}.parquet",
                "topic": "orders",
                "partition": partition,
                "records": end - start,
                "bytes": 100,
            }
        ],
        watermark=None,
        complete=True,
    )
    if applied:
        actions.mark_committed(prepared.commit_id, {"db.orders": 7000 + end})
    prepared.refresh_from_db()
    return prepared


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The figures of the schemathesis run (tests/api/test_fuzz.py), when it ran."""
    test_fuzz = sys.modules.get("tests.api.test_fuzz")
    if test_fuzz is None:
        return
    calls = test_fuzz.FIGURES["calls"]
    if not calls:
        return
    statuses = test_fuzz.FIGURES["statuses"]
    terminalreporter.write_sep("-", "schemathesis")
    operations = [name for name in calls if not name.startswith("undocumented")]
    terminalreporter.write_line(
        f"{len(operations)} operations, {sum(calls.values())} requests; statuses: "
        + ", ".join(f"{code}: {n}" for code, n in sorted(statuses.items()))
    )
    for operation, n in sorted(calls.items()):
        terminalreporter.write_line(f"  {n:5d}  {operation}")
