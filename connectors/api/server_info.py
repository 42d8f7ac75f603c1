"""GET / of the Connect API: which version we speak, our commit, and the Kafka cluster's id."""

from __future__ import annotations

import functools
import logging
import threading
import time
import tomllib
from pathlib import Path

from django.conf import settings

from sinkadmin.services import port_open, split_hostport

logger = logging.getLogger(__name__)

# The Kafka Connect release whose REST API this one matches (PATCH config,
# stop, offsets and initial_state all exist there). Clients that look at the
# version see that, with our own version as the qualifier, as vendors do
# ("7.6.0-ccs").
CONNECT_API_VERSION = "3.9.0"

# How long a failed look-up of the cluster id is remembered, so that GET /
# does not wait on an unreachable broker at every call.
CLUSTER_ID_RETRY_SECONDS = 30.0
CLUSTER_ID_TIMEOUT_SECONDS = 2.0


@functools.cache
def sinkadmin_version() -> str:
    try:
        with open(Path(settings.BASE_DIR) / "pyproject.toml", "rb") as f:
            return str(tomllib.load(f)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


@functools.cache
def source_commit() -> str:
    """The git commit the service runs, read from .git without running git."""
    git = Path(settings.BASE_DIR) / ".git"
    try:
        if git.is_file():
            # A worktree's .git names its own git directory ("gitdir: ..."),
            # whose "commondir" holds the refs it shares with the main one.
            git = (git.parent / git.read_text().strip().removeprefix("gitdir: ")).resolve()
        common = (git / (git / "commondir").read_text().strip()).resolve() if (git / "commondir").exists() else git
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head
        ref = head.removeprefix("ref: ")
        git = common
        ref_file = git / ref
        if ref_file.exists():
            return ref_file.read_text().strip()
        for line in (git / "packed-refs").read_text().splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha
    except OSError:
        pass
    return "unknown"


class ClusterIdCache:
    """The Kafka cluster id, asked of the broker once and then kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cluster_id: str | None = None
        self._failed_at: float | None = None

    def get(self) -> str | None:
        with self._lock:
            if self._cluster_id is not None:
                return self._cluster_id
            if self._failed_at is not None and time.monotonic() - self._failed_at < CLUSTER_ID_RETRY_SECONDS:
                return None
            self._cluster_id = _ask_cluster_id(settings.KAFKA_BOOTSTRAP_SERVERS)
            self._failed_at = None if self._cluster_id else time.monotonic()
            return self._cluster_id


def _ask_cluster_id(bootstrap: str) -> str | None:
    first = bootstrap.split(",", maxsplit=1)[0]
    try:
        host, port = split_hostport(first)
    except ValueError:
        return None
    # librdkafka retries an unreachable broker noisily until its timeout; a
    # plain connect tells in milliseconds whether asking is worth it.
    if not port_open(host, port, timeout=0.5):
        return None
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(CLUSTER_ID_TIMEOUT_SECONDS * 1000)})
    try:
        description = admin.describe_cluster(request_timeout=CLUSTER_ID_TIMEOUT_SECONDS).result(
            timeout=CLUSTER_ID_TIMEOUT_SECONDS + 1
        )
    except (KafkaException, TimeoutError, ValueError) as exc:
        logger.warning("could not read the Kafka cluster id from %s: %s", bootstrap, exc)
        return None
    return str(description.cluster_id) if description.cluster_id else None


cluster_ids = ClusterIdCache()


def server_info() -> dict[str, str | None]:
    return {
        "version": f"{CONNECT_API_VERSION}-sinkadmin-{sinkadmin_version()}",
        "commit": source_commit(),
        "kafka_cluster_id": cluster_ids.get(),
    }
