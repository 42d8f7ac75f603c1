"""Postgres advisory locks for work that several processes may race to do once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def advisory_lock(name: str) -> Iterator[None]:
    """Hold the session-level advisory lock ``name`` for the block.

    A connection opened for the lock is closed after it: the threads that
    take these locks (a task's writing thread creating a table) go on to
    long Spark writes, and forty participants each keeping a second backend
    through theirs exhausted Postgres's 100 connections.
    """
    opened_here = connection.connection is None
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(hashtext(%s))", [name])
            try:
                yield
            finally:
                cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [name])
    finally:
        if opened_here and not connection.in_atomic_block:
            connection.close()
