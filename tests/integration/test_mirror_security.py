"""The mirror between two Apache Kafka clusters that take clients over SASL_SSL only, configured as
MirrorMaker 2's users write it (the Java client's sasl.jaas.config and a PEM truststore): the source with
SASL/PLAIN, the target with SASL/SCRAM-SHA-512. The test makes its own certificate authority and broker
certificates with openssl, and its own SCRAM user with Kafka's admin API. The records arrive once each, and
a consumer group's checkpoint is written and read back over the secured listener."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from connectors.config import validate_config
from sinks.mirror.checkpoints import translated_offsets
from sinks.mirror.engine import ClusterRefused, MirrorTask
from sinks.mirror.settings import MirrorSettings
from tests.conftest import free_port, kafka_cluster
from tests.integration.helpers import create_topic, wait_until
from tests.integration.test_mirror_engine import (
    PARTITIONS,
    assert_mirrored_exactly_once,
    caught_up,
    mirror_config,
    running,
    source_records,
)
from tests.integration.test_mirror_failover import checkpointing, consume_and_commit

# (beside: brokers only, no Spark, and mostly waiting on them: run in the lane beside the others.)
pytestmark = [pytest.mark.integration, pytest.mark.beside]

PLAIN_USER, PLAIN_PASSWORD = "alice", "alice-secret"
SCRAM_USER, SCRAM_PASSWORD = "bob", "bob-secret"


@dataclass(frozen=True)
class SecuredCluster:
    plaintext: str  # the test's own way in (and the brokers' inter-broker listener)
    secured: str  # SASL_SSL: the only listener the mirror is given


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A certificate authority (ca.pem) and a broker key and certificate for 127.0.0.1 and localhost,
    with the CA, in one PEM keystore (broker.pem), as Kafka reads it (ssl.keystore.type=PEM)."""
    where = tmp_path_factory.mktemp("tls")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=sinkadmin-test-ca",
            "-keyout", "ca.key", "-out", "ca.pem", cwd=where)  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "broker.key",
            "-out", "broker.csr", cwd=where)  # fmt: skip
    (where / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "san.cnf", "-out", "broker.crt", cwd=where)  # fmt: skip
    openssl("pkcs8", "-topk8", "-nocrypt", "-in", "broker.key", "-out", "broker.pk8", cwd=where)
    keystore = where / "broker.pem"
    keystore.write_text(
        (where / "broker.pk8").read_text() + (where / "broker.crt").read_text() + (where / "ca.pem").read_text()
    )
    return where


def secured_cluster(name: str, data_dir: Path, tls: Path, mechanism: str) -> Iterator[SecuredCluster]:
    """A broker whose clients' listener is SASL_SSL with ``mechanism`` only (PLAIN: user alice in its
    JAAS config; SCRAM-SHA-512: user bob, created through the admin API)."""
    plain, secured = free_port(), free_port()
    jaas = (
        f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{PLAIN_USER}="{PLAIN_PASSWORD}";'
        if mechanism == "PLAIN"
        else "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    )
    extra: dict[str, object] = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secured},CONTROLLER://127.0.0.1:{free_port()}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secured}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": mechanism,
        f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": tls / "broker.pem",
    }
    controller = int(str(extra["listeners"]).rsplit(":", 1)[1])
    with kafka_cluster(name, data_dir, plain, controller_port=controller, extra=extra):
        cluster = SecuredCluster(f"127.0.0.1:{plain}", f"127.0.0.1:{secured}")
        if mechanism == "SCRAM-SHA-512":
            admin = AdminClient({"bootstrap.servers": cluster.plaintext})
            credential = UserScramCredentialUpsertion(
                SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), SCRAM_PASSWORD.encode()
            )
            for future in admin.alter_user_scram_credentials([credential]).values():
                future.result(30)
        yield cluster


@pytest.fixture(scope="module")
def plain_source(tmp_path_factory: pytest.TempPathFactory, certificates: Path) -> Iterator[SecuredCluster]:
    yield from secured_cluster("kafka-sasl-plain", tmp_path_factory.mktemp("kafka-plain"), certificates, "PLAIN")


@pytest.fixture(scope="module")
def scram_target(tmp_path_factory: pytest.TempPathFactory, certificates: Path) -> Iterator[SecuredCluster]:
    yield from secured_cluster(
        "kafka-sasl-scram", tmp_path_factory.mktemp("kafka-scram"), certificates, "SCRAM-SHA-512"
    )


def client_keys(side: str, mechanism: str, user: str, password: str, ca: Path) -> dict[str, str]:
    """One cluster's client settings as a MirrorMaker 2 config writes them (Java client names)."""
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    return {
        f"{side}.cluster.security.protocol": "SASL_SSL",
        f"{side}.cluster.sasl.mechanism": mechanism,
        f"{side}.cluster.sasl.jaas.config": (
            f'org.apache.kafka.common.security.{module} required username="{user}" password="{password}";'
        ),
        f"{side}.cluster.ssl.truststore.type": "PEM",
        f"{side}.cluster.ssl.truststore.location": str(ca),
    }


def test_the_mirror_copies_once_and_checkpoints_between_sasl_ssl_clusters(
    plain_source: SecuredCluster, scram_target: SecuredCluster, certificates: Path
) -> None:
    topic, group = f"payments-{uuid.uuid4().hex[:6]}", f"ledger-{uuid.uuid4().hex[:6]}"
    # (The test writes and reads through the plaintext listeners; the mirror is given only the secured ones.)
    create_topic(plain_source.plaintext, topic, PARTITIONS)
    ends = source_records(plain_source.plaintext, topic, 1500)
    committed = consume_and_commit(plain_source.plaintext, topic, group, {0: 120, 1: 0, 2: 375, 3: 9})
    ca = certificates / "ca.pem"
    config = mirror_config(
        plain_source.secured,
        scram_target.secured,
        topic,
        **client_keys("source", "PLAIN", PLAIN_USER, PLAIN_PASSWORD, ca),
        **client_keys("target", "SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD, ca),
        **{"emit.checkpoints.interval.seconds": "1", "refresh.groups.interval.seconds": "1"},
    )
    settings = MirrorSettings.parse(config)
    assert settings.source_client["sasl.username"] == PLAIN_USER and "sasl.jaas.config" not in settings.source_client
    connector = f"mirror-{topic}"
    with running(config, connector), checkpointing(config, connector):
        wait_until(lambda: caught_up(scram_target.plaintext, connector, ends), 120, "the mirror to catch up")
        wait_until(
            lambda: (
                {t.partition: t.upstream for t in translated_offsets(settings, group)}
                == {p: n for p, n in committed.items() if n}
            ),
            60,
            "the group's checkpoints, read over SASL_SSL",
        )
    assert_mirrored_exactly_once(plain_source.plaintext, scram_target.plaintext, [topic])


def test_a_wrong_password_fails_the_task_with_the_reason_and_unreadable_settings_are_refused(
    plain_source: SecuredCluster, scram_target: SecuredCluster, certificates: Path
) -> None:
    ca = certificates / "ca.pem"
    topic = f"refunds-{uuid.uuid4().hex[:6]}"
    create_topic(plain_source.plaintext, topic, PARTITIONS)
    source_records(plain_source.plaintext, topic, 10)
    config = mirror_config(
        plain_source.secured,
        scram_target.secured,
        topic,
        **client_keys("source", "PLAIN", PLAIN_USER, "not-the-password", ca),
        **client_keys("target", "SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD, ca),
    )
    # librdkafka would retry forever; the task fails instead, saying which cluster refused it and why.
    task = MirrorTask(f"mirror-{topic}", 0, 1, MirrorSettings.parse(config))
    deadline = time.monotonic() + 90
    with pytest.raises(
        ClusterRefused, match=r"the source cluster \(127\.0\.0\.1:\d+\) refused the mirror: .*(?i:authentication)"
    ):
        task.run(lambda: time.monotonic() > deadline)

    # Settings the clients here cannot read are refused per key, with what to write instead.
    base = {
        "connector.class": "mirror",
        "topics": topic,
        "source.cluster.bootstrap.servers": plain_source.secured,
        "target.cluster.bootstrap.servers": scram_target.secured,
    }
    keys = client_keys("source", "PLAIN", PLAIN_USER, PLAIN_PASSWORD, ca)
    refused = validate_config({**base, **keys, "source.cluster.ssl.truststore.type": "JKS"}).errors
    assert "keytool -exportcert -rfc" in refused["source.cluster.ssl.truststore.type"][0]
    oauth = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    refused = validate_config({**base, **keys, "source.cluster.sasl.jaas.config": oauth}).errors
    assert "PlainLoginModule and ScramLoginModule" in refused["source.cluster.sasl.jaas.config"][0]
