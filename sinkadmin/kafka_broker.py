"""The embedded Apache Kafka broker: one KRaft node (broker and controller in one JVM) from the jars
that jvm/kafka/pom.xml pins, with its log directory on disk so topics survive a restart.

``make run`` keeps it under ``var/kafka``; each test session has its own, in a temporary directory.
A user's own cluster (``KAFKA_BOOTSTRAP_SERVERS``) replaces it.

The directory holds ``server.properties`` (written at every start from the ports asked for),
``cluster.id`` (the id this installation formatted its log directory with) and ``data/``, the log
directory Kafka's own ``StorageTool`` formats. A ``data/`` formatted for another cluster is refused
with the reason, never wiped: its topics may be someone's only copy.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from sinkadmin.services import ManagedProcess, ServiceError, jvm_classpath, port_open, spawn, wait_ready

KAFKA_JARS = "kafka"
LOG4J_CONFIG = Path(__file__).resolve().parent.parent / "jvm" / "kafka" / "log4j2.properties"
NODE_ID = 1
# Kafka's own default heap for a broker is 1 GB; one node of local topics needs less.
HEAP = ["-Xms256m", "-Xmx1g"]


def server_properties(
    data_dir: Path, host: str, port: int, controller_port: int, extra: Mapping[str, object] | None = None
) -> str:
    """A single-node KRaft cluster: every internal topic with one replica and a few partitions (Kafka's
    default of 50 makes a new broker's first group or transaction wait seconds for them), no rebalance
    delay. ``extra``: more settings, or others in place of these (a listener with TLS and SASL)."""
    settings: dict[str, object] = {
        "process.roles": "broker,controller",
        "node.id": NODE_ID,
        "controller.quorum.voters": f"{NODE_ID}@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": data_dir / "data",
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 8,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.num.partitions": 8,
        "transaction.state.log.min.isr": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "group.initial.rebalance.delay.ms": 0,
        **(extra or {}),
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def java(main_class: str, *args: str) -> list[str]:
    classpath = os.pathsep.join(str(jar) for jar in jvm_classpath(KAFKA_JARS))
    return [
        os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java",
        *HEAP,
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
        "-cp",
        classpath,
        main_class,
        *args,
    ]


def formatted_cluster_id(log_dir: Path) -> str | None:
    """The cluster id Kafka's StorageTool wrote into ``log_dir``, or None if it was never formatted."""
    meta = log_dir / "meta.properties"
    if not meta.exists():
        return None
    found = re.search(r"^cluster\.id=(\S+)$", meta.read_text(), re.MULTILINE)
    if found is None:
        raise ServiceError(f"{meta} names no cluster.id: not a Kafka log directory this broker can use")
    return found.group(1)


def prepare_log_dir(data_dir: Path) -> str:
    """The cluster id of ``data_dir``'s log directory, formatting it first if it is new.

    Refuses a log directory formatted for another cluster than the one this
    directory's ``cluster.id`` records (copied in, or left from another
    installation), and one with no record of ours at all.
    """
    record = data_dir / "cluster.id"
    ours = record.read_text().strip() if record.exists() else None
    found = formatted_cluster_id(data_dir / "data")
    if found is not None:
        if ours is None:
            raise ServiceError(
                f"{data_dir / 'data'} holds the log of Kafka cluster {found}, which this broker did not format"
                f" ({record} is missing); move it aside, or write {found} to {record} to adopt it"
            )
        if found != ours:
            raise ServiceError(
                f"{data_dir / 'data'} belongs to Kafka cluster {found}, but this broker is cluster {ours}"
                f" ({record}); it was not wiped: move it aside to start afresh"
            )
        return found
    cluster_id = ours or run_tool(data_dir, "kafka.tools.StorageTool", "random-uuid").strip()
    run_tool(
        data_dir,
        "kafka.tools.StorageTool",
        "format",
        "--cluster-id",
        cluster_id,
        "--config",
        str(data_dir / "server.properties"),
        "--ignore-formatted",
    )
    record.write_text(cluster_id + "\n")
    return cluster_id


def run_tool(data_dir: Path, main_class: str, *args: str) -> str:
    done = subprocess.run(
        java(main_class, *args), check=False, capture_output=True, text=True, cwd=data_dir, timeout=120
    )
    if done.returncode != 0:
        raise ServiceError(f"{main_class} {args[0]} failed: {(done.stderr or done.stdout).strip()[-2000:]}")
    return done.stdout


def start_embedded_broker(
    port: int,
    data_dir: Path,
    log_dir: Path,
    *,
    host: str = "127.0.0.1",
    controller_port: int | None = None,
    name: str = "kafka",
    extra: Mapping[str, object] | None = None,
) -> ManagedProcess:
    """Start the broker on ``host:port`` (its controller on ``controller_port``, by default the next
    port) with its log under ``data_dir``; returns once it answers clients there (``extra``: more
    server.properties, e.g. a TLS and SASL listener beside the plaintext one)."""
    controller_port = controller_port or port + 1
    for wanted, variable in ((port, "SINKADMIN_KAFKA_PORT"), (controller_port, "SINKADMIN_KAFKA_CONTROLLER_PORT")):
        if port_open(host, wanted):
            raise ServiceError(f"port {host}:{wanted} is already in use; set {variable} to a free port")
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "server.properties").write_text(server_properties(data_dir, host, port, controller_port, extra))
    prepare_log_dir(data_dir)
    service = spawn(name, java("kafka.Kafka", str(data_dir / "server.properties")), log_dir)
    wait_ready(service, host, port, timeout=90, dump_threads=True)
    wait_for_metadata(service, f"{host}:{port}", timeout=60)
    return service


def wait_for_metadata(service: ManagedProcess, bootstrap: str, timeout: float) -> None:
    """Wait until the broker answers clients, its group and transaction coordinators included (it
    listens a moment before; a new log creates their internal topics on first use)."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    deadline = time.monotonic() + timeout
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": "sinkadmin-broker-check", "log_level": 0})
    try:
        while True:
            try:
                group.committed([TopicPartition("sinkadmin-broker-check", 0)], timeout=5)
                transactions = Producer(
                    {"bootstrap.servers": bootstrap, "transactional.id": "sinkadmin-broker-check", "log_level": 0}
                )
                transactions.init_transactions(max(1.0, deadline - time.monotonic()))
                return
            except KafkaException as exc:
                if time.monotonic() > deadline or service.process.poll() is not None:
                    service.stop()
                    raise ServiceError(f"Kafka at {bootstrap} listens but does not serve clients: {exc}") from exc
                time.sleep(0.5)
    finally:
        group.close()


def start_configured_broker(log_dir: Path) -> ManagedProcess:
    """The broker settings describe (``SINKADMIN_KAFKA_PORT``, ``var/kafka``): make run's, the benchmarks'."""
    from django.conf import settings

    return start_embedded_broker(
        settings.KAFKA_EMBEDDED_PORT,
        settings.KAFKA_EMBEDDED_DIR,
        log_dir,
        controller_port=settings.KAFKA_EMBEDDED_CONTROLLER_PORT,
    )
