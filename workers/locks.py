"""Postgres advisory locks for work that several processes may race to do once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def advisory_lock(name: str) -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(hashtext(%s))", [name])
        try:
            yield
        finally:
            cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [name])
