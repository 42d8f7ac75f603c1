"""Test session: real PostgreSQL (pytest-django's test database), Redis, an
Apache Kafka broker of the session's own (a second cluster where a test needs
two) and a Spark Connect server, started here when the environment does not
point at running ones.

Every test is marked by what it needs (pytest_collection_modifyitems below):
``integration`` (a server of the data plane), ``database`` (PostgreSQL) or
else ``unit`` (no server: `make test-fast` runs these)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.conf import LazySettings, settings
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from sinkadmin.kafka_broker import start_embedded_broker
from sinkadmin.services import ManagedProcess, ServiceError, port_open, split_hostport, start_spark_connect

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from workers.maintenance import BetweenCommits


@pytest.fixture(scope="session")
def django_db_modify_db_settings() -> None:
    """A test database of the lane's own (scripts/run-tests runs two pytest sessions at once: each creates
    and drops its test database)."""
    lane = os.environ.get("SINKADMIN_TEST_LANE", "")
    if lane:
        database = settings.DATABASES["default"]
        database["TEST"] = {**database.get("TEST", {}), "NAME": f"test_{database['NAME']}_{lane}"}


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's Kafka cluster (a fresh single-node Apache Kafka), or the one the environment names."""
    host, port = split_hostport(settings.KAFKA_BOOTSTRAP_SERVERS.split(",")[0])
    if port_open(host, port) or not settings.KAFKA_EMBEDDED:
        if not port_open(host, port):
            pytest.fail(f"KAFKA_BOOTSTRAP_SERVERS={settings.KAFKA_BOOTSTRAP_SERVERS} is not reachable")
        yield settings.KAFKA_BOOTSTRAP_SERVERS
        return
    with kafka_cluster(
        "kafka", tmp_path_factory.mktemp("kafka"), port, controller_port=settings.KAFKA_EMBEDDED_CONTROLLER_PORT
    ):
        yield settings.KAFKA_BOOTSTRAP_SERVERS


@pytest.fixture(scope="session")
def target_kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second Apache Kafka cluster: the target of the mirror's tests (kafka_bootstrap is their source)."""
    port = free_port()
    with kafka_cluster("kafka-target", tmp_path_factory.mktemp("kafka-target"), port):
        yield f"127.0.0.1:{port}"


@contextmanager
def kafka_cluster(
    name: str,
    data_dir: Path,
    port: int,
    controller_port: int | None = None,
    extra: dict[str, object] | None = None,
) -> Iterator[ManagedProcess]:
    """A single-node Apache Kafka on ``port`` with its log in ``data_dir``, for the block's length (started
    again on the same ``data_dir`` and ports, it finds its topics); ``extra``: more of its settings."""
    controller_port = controller_port or free_port()
    logs = settings.VAR_DIR / "log" / "tests"
    try:
        broker = start_embedded_broker(port, data_dir, logs, controller_port=controller_port, name=name, extra=extra)
    except ServiceError as failed:
        # A broker's start is the harness, not what the tests prove: a start that failed on a loaded
        # machine is tried once more, and said (the first failure's log tail shows in the warnings).
        warnings.warn(f"{name} is started again: {failed}", stacklevel=2)
        broker = start_embedded_broker(port, data_dir, logs, controller_port=controller_port, name=name, extra=extra)
    try:
        yield broker
    finally:
        broker.stop()


def free_port() -> int:
    """A port free now, for a server this session starts. Drawn below the kernel's ephemeral range: a port
    from that range can be taken, between this probe and the server's bind, as the local end of any
    connection a client in either lane opens."""
    low, _ = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    while True:
        port = random.randrange(20000, low) if low > 21000 else 0  # (else the kernel's choice)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(probe.getsockname()[1])


@contextmanager
def serving(name: str, argv: list[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A server from this venv's bin/ (``argv[0]``) listening on ``port`` for the block's length; yields its
    process, the leader of its process group."""
    logs = settings.VAR_DIR / "log" / "tests"
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / f"{name}.log").open("ab") as log:
        # In a session of its own: a launcher script may start the server as its child,
        # and the whole group is stopped at the end, not the launcher alone.
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / argv[0]), *argv[1:]],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while not port_open("127.0.0.1", port):
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"{name} did not start (see {log.name})")
            time.sleep(0.1)
        try:
            yield server
        finally:
            with contextlib.suppress(ProcessLookupError):  # (a test may have stopped the group itself)
                os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(30)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """An S3-compatible server (moto's standalone server) for the files sink's S3 store."""
    port = free_port()
    with serving("moto-s3", ["moto_server", "-H", "127.0.0.1", "-p", str(port)], port):
        yield f"http://127.0.0.1:{port}"


def s3_client(endpoint: str) -> pafs.S3FileSystem:
    """A client of the S3-compatible server at ``endpoint`` (moto's: any keys), that may create buckets."""
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(
        access_key="test",
        secret_key="test",
        region="us-east-1",
        endpoint_override=endpoint.removeprefix("http://"),
        scheme="http",
        allow_bucket_creation=True,
    )


def s3_boto_client(endpoint: str) -> Any:
    """A boto3 client of the S3-compatible server at ``endpoint`` (moto's: any keys): the tests' own reader of
    objects, their metadata and ACLs, apart from the sink's clients."""
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    )


# The bucket of the S3-compatible server that the session's Spark reaches through Hadoop's S3A connector.
S3A_BUCKET = "lake"


@pytest.fixture(scope="session")
def spark_conf_dir(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Spark's defaults for the session (``SPARK_CONF_DIR``), as a user configures S3 for Spark: the
    ``lake`` bucket on the S3-compatible server, in Hadoop's per-bucket S3A settings. The Spark Connect
    server and the workers (this process's and its children) read them."""
    conf_dir = tmp_path_factory.mktemp("spark-conf")
    prefix = f"spark.hadoop.fs.s3a.bucket.{S3A_BUCKET}"
    (conf_dir / "spark-defaults.conf").write_text(
        f"{prefix}.endpoint {s3_endpoint}\n"
        f"{prefix}.endpoint.region us-east-1\n"
        f"{prefix}.path.style.access true\n"
        f"{prefix}.access.key test\n"
        f"{prefix}.secret.key test\n"
    )
    s3_client(s3_endpoint).create_dir(S3A_BUCKET)
    before = os.environ.get("SPARK_CONF_DIR")
    os.environ["SPARK_CONF_DIR"] = str(conf_dir)
    yield conf_dir
    if before is None:
        os.environ.pop("SPARK_CONF_DIR", None)
    else:
        os.environ["SPARK_CONF_DIR"] = before


@pytest.fixture(scope="session")
def spark_remote(django_db_setup: None, spark_conf_dir: Path) -> Iterator[str]:
    """A Spark Connect endpoint shared by the whole session (one JVM, started once), as make run starts
    it: the project's own Iceberg catalog mapped (on the test database: after django_db_setup), and
    Spark's defaults of the session (``spark_conf_dir``)."""
    from sinks.iceberg.tables import default_spark_catalog_conf

    server = None
    if settings.SPARK_REMOTE:
        host, port = split_hostport(settings.SPARK_REMOTE.removeprefix("sc://").split("/")[0])
        if not port_open(host, port):
            if not settings.SPARK_LOCAL_CONNECT:
                pytest.fail(f"SPARK_REMOTE={settings.SPARK_REMOTE} is not reachable")
            server = start_spark_connect(
                port,
                settings.VAR_DIR / "log" / "tests",
                master="local[2]",
                driver_memory="2g",
                catalogs=default_spark_catalog_conf(),
            )
    yield settings.SPARK_REMOTE or settings.SPARK_MASTER
    if server is not None:
        server.stop()


@pytest.fixture
def topic_name() -> str:
    # The broker keeps topics for its lifetime: every test gets fresh names.
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("warehouse")
    return str(path)


@pytest.fixture
def subprocess_env(db: None) -> dict[str, str]:
    """Environment for child processes (workers) so they use this test database."""
    db_settings = settings.DATABASES["default"]
    name = db_settings["NAME"]
    user = urllib.parse.quote(db_settings.get("USER") or "", safe="")
    password = urllib.parse.quote(db_settings.get("PASSWORD") or "", safe="")
    host = db_settings.get("HOST") or ""
    port = db_settings.get("PORT") or ""
    auth = f"{user}:{password}@" if password else f"{user}@" if user else ""
    location = f"{host}:{port}" if host else ""
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": f"postgres://{auth}{location}/{name}",
            "KAFKA_BOOTSTRAP_SERVERS": settings.KAFKA_BOOTSTRAP_SERVERS,
            "DJANGO_SETTINGS_MODULE": "sinkadmin.settings",
        }
    )
    if settings.SPARK_REMOTE:
        env["SPARK_REMOTE"] = settings.SPARK_REMOTE
    return env


@pytest.fixture
def lake(
    settings: LazySettings,
    warehouse: str,
    tmp_path_factory: pytest.TempPathFactory,
    subprocess_env: dict[str, str],
    kafka_bootstrap: str,
    spark_remote: str,
) -> dict[str, str]:
    """A fresh warehouse and staging area; returns the environment for child processes."""
    settings.LAKE_WAREHOUSE = warehouse
    settings.STAGING_DIR = tmp_path_factory.mktemp("staging")
    return {**subprocess_env, "LAKE_WAREHOUSE": warehouse, "SINKADMIN_STAGING_DIR": str(settings.STAGING_DIR)}


def sink_config(topic: str, table: str, **overrides: str) -> dict[str, str]:
    return {
        "connector.class": "iceberg",
        "topics": topic,
        "iceberg.tables": table,
        "iceberg.tables.auto-create-enabled": "true",
        "iceberg.control.topic": f"control-{topic}",
        # The SQL catalog's tables are not Django's, so they survive the
        # per-test flush: a catalog name per test keeps tables apart.
        "iceberg.catalog": f"catalog-{topic}",
        "iceberg.control.commit.interval-ms": "1500",
        "iceberg.control.commit.timeout-ms": "15000",
        **overrides,
    }


@pytest.fixture
def operator(db: None) -> User:
    """A superuser: may see and do everything."""
    return User.objects.create_superuser("operator", "operator@example.com", "pw-operator-1234")


@pytest.fixture
def signed_in(client: Client, operator: User) -> Client:
    """The web UI and the admin, as the operator sees them."""
    client.force_login(operator)
    return client


@pytest.fixture
def operator_api(operator: User) -> APIClient:
    """The REST API, as the operator."""
    client = APIClient()
    client.force_authenticate(operator)
    return client


@pytest.fixture
def turns() -> Iterator[BetweenCommits]:
    """Turns between commits taken as an idle coordinator takes them (workers.maintenance.BetweenCommits)."""
    from workers.maintenance import BetweenCommits

    with BetweenCommits().served() as between:
        yield between


# What a test needs, from where it lives and the fixtures it uses (their closure, so a fixture built on
# ``db`` or ``lake`` counts), not from a list of tests: pytest.ini declares the markers.

# Fixtures that start or reach a server of the data plane (a new one belongs here).
INTEGRATION_FIXTURES = frozenset({"kafka_bootstrap", "target_kafka_bootstrap", "spark_remote", "s3_endpoint"})
# pytest-django's fixtures that create or open the test database in PostgreSQL.
DATABASE_FIXTURES = frozenset(
    {
        "django_db_setup",
        "db",
        "transactional_db",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
        "live_server",
    }
)
INTEGRATION_DIR = Path(__file__).parent / "integration"


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        uses = set(getattr(item, "fixturenames", ()))
        needs = {
            "integration": item.path.is_relative_to(INTEGRATION_DIR) or bool(uses & INTEGRATION_FIXTURES),
            # (pytest-django's marker opens the database without naming a fixture)
            "database": item.get_closest_marker("django_db") is not None or bool(uses & DATABASE_FIXTURES),
        }
        for marker, needed in needs.items():
            if needed and item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        servers = [marker for marker in ("integration", "database") if item.get_closest_marker(marker) is not None]
        if not servers:
            item.add_marker("unit")
        elif item.get_closest_marker("unit") is not None:  # (-m unit must stay -m "not integration and not database")
            raise pytest.UsageError(f"{item.nodeid} is marked unit but needs a server ({', '.join(servers)})")


def pytest_report_collectionfinish(items: list[pytest.Item]) -> str:
    """The split, under pytest's "collected" line."""
    counts = {
        name: sum(item.get_closest_marker(name) is not None for item in items)
        for name in ("unit", "database", "integration")
    }
    return "needs: " + ", ".join(f"{name} {n}" for name, n in counts.items())
