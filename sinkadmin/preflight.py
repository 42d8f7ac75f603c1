"""Start-up checks that name the setting to fix instead of printing a traceback."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.db.utils import OperationalError


def check_database() -> str | None:
    try:
        connection.ensure_connection()
    except OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"DATABASE_URL: cannot connect to PostgreSQL: {first}"
    return None


def check_redis() -> str | None:
    import redis

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        return f"REDIS_URL: cannot reach Redis at {settings.REDIS_URL}: {exc}"
    return None


def check_kafka(timeout: float = 5.0) -> str | None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    client = AdminClient(
        {"bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS, "socket.timeout.ms": int(timeout * 1000)}
    )
    try:
        client.list_topics(timeout=timeout)
    except KafkaException as exc:
        return f"KAFKA_BOOTSTRAP_SERVERS: no Kafka broker answers at {settings.KAFKA_BOOTSTRAP_SERVERS}: {exc.args[0].str() if exc.args else exc}"
    return None


def run_checks(*, kafka: bool = True) -> list[str]:
    checks = [check_database, check_redis] + ([check_kafka] if kafka else [])
    return [problem for check in checks if (problem := check()) is not None]
