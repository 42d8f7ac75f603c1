"""Maintenance of a connector's tables beside its coordinator, whatever the sink.

A ``Maintainer`` thread runs the sink's ``MaintainedTables`` every
``sinkadmin.maintenance.interval-ms``, one table after the other, and records
each run in the ledger (``MaintenanceLedger``). What a sink does to a table
is its own (Iceberg's procedures, Hudi's table services); what must not run
beside the sink's commits runs in the coordinator's turn between two of them
(``BetweenCommits``).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from connectors.config.validation import MaintenanceSchedule

log = logging.getLogger(__name__)

T = TypeVar("T")


class Stopped(Exception):
    """The coordinator stopped while maintenance waited for it."""


class MaintenanceFailed(Exception):
    """One or more steps of a run failed (the message says which and why); the others ran."""


class BetweenCommits:
    """Work the maintenance thread hands to the coordinator's thread, which runs it between two commits."""

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self.stopped = threading.Event()

    def run(self, work: Callable[[], T], poll_s: float = 0.5) -> T:
        """Have ``work`` run by the coordinator between commits; its result (or exception) here."""
        future: Future[T] = Future()
        self._work.put((work, future))
        while True:
            if self.stopped.is_set() and future.cancel():
                raise Stopped("the coordinator stopped")
            try:
                return future.result(timeout=poll_s)
            except TimeoutError:
                continue

    @contextlib.contextmanager
    def served(self, poll_s: float = 0.01) -> Iterator[BetweenCommits]:
        """Its turns taken by a thread of its own, as an idle coordinator takes them: for maintenance
        that runs with no coordinator (a stopped connector's table, a benchmark, a test)."""
        stop = threading.Event()

        def serve() -> None:
            while not stop.is_set():
                if not self.run_waiting():
                    stop.wait(poll_s)

        thread = threading.Thread(target=serve, name="between-commits", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(10)

    def run_waiting(self) -> bool:
        """Called by the coordinator when idle: run one waiting piece of work; True if there was one."""
        try:
            work, future = self._work.get_nowait()
        except queue.Empty:
            return False
        if not future.set_running_or_notify_cancel():
            return False
        try:
            future.set_result(work())
        except Exception as exc:
            # (The maintenance thread's failure, not the coordinator's.)
            future.set_exception(exc)
        return True


# --- one table ----------------------------------------------------------------------------


class MaintenanceLedger(Protocol):
    def start(self, table: str) -> int: ...

    def record(self, run_id: int, **figures: Any) -> None: ...

    def finish(self, run_id: int, error: str | None) -> None:
        """SUCCEEDED without ``error``, FAILED with it."""
        ...

    def interrupted(self, run_id: int) -> None: ...

    def current(self) -> bool:
        """Whether the coordinator whose runs these are still holds the connector (not superseded)."""
        ...

    def protected_files(self, tables: Iterable[str]) -> set[str]:
        """Files prepared commits will add to ``tables``: never orphans, however old."""
        ...


class MaintainedTables(Protocol):
    """What a sink's maintenance does to its tables, run by the connector's ``Maintainer``."""

    def existing(self) -> list[str]:
        """The connector's tables that exist now (one not yet created has nothing to maintain)."""
        ...

    def maintain(self, table: str, run_id: int, turns: BetweenCommits) -> None:
        """One run on one table, its figures recorded under ``run_id``; timeline or snapshot commits go
        through ``turns``. Raises when a step failed (``Stopped`` when the coordinator stops)."""
        ...


class Maintainer:
    """Maintains a connector's tables every interval, in a thread beside its coordinator.

    The coordinator calls ``between_commits()`` whenever it is idle (see
    ``BetweenCommits``) and ``close()`` when it stops.
    """

    def __init__(
        self,
        connector: str,
        config: MaintenanceSchedule,
        tables: MaintainedTables,
        ledger: MaintenanceLedger,
        last_run: float | None,
        release: Callable[[], None] = lambda: None,
    ) -> None:
        self.connector = connector
        self.config = config
        self.tables = tables
        self.ledger = ledger
        self.queue = BetweenCommits()
        interval = config.interval_ms / 1000
        # Not at once: coordinators start together (a deploy, a worker's
        # restart, twenty connectors created at once), and their first
        # catalog connections and commits come first; a run is spread over
        # 30-60 s after start (at most one to two intervals). A coordinator
        # that restarts keeps to the interval since the last run.
        settle = time.time() + min(interval, 30.0) * (1 + random.random())
        self.next_run = settle if last_run is None else max(settle, last_run + interval)
        # Called after each run: the thread holds no database connection
        # through the hour between runs (Postgres's connections are the
        # limit to watch with many runners).
        self.release = release
        self.runs = 0
        self._thread = threading.Thread(target=self._loop, name=f"maintenance-{connector}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def between_commits(self) -> bool:
        return self.queue.run_waiting()

    def close(self, timeout: float = 5.0) -> None:
        self.queue.stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        try:
            while not self.queue.stopped.wait(max(0.0, min(1.0, self.next_run - time.time()))):
                if time.time() < self.next_run:
                    continue
                try:
                    self.run_once()
                except Exception as exc:
                    # (The catalog is out, say: the coordinator shows that;
                    # the next interval tries again.)
                    log.warning("%s: maintenance could not run: %s", self.connector, exc)
                finally:
                    self.release()
                self.next_run = time.time() + self.config.interval_ms / 1000
        finally:
            self.release()

    def run_once(self) -> None:
        """Maintain each table once; a table's failure is recorded and the next one goes on."""
        for name in self.tables.existing():
            if self.queue.stopped.is_set():
                return
            run_id = self.ledger.start(name)
            try:
                self.tables.maintain(name, run_id, self.queue)
            except Stopped:
                self.ledger.interrupted(run_id)
                return
            except Exception as exc:
                log.warning("%s: maintenance of %s failed: %s", self.connector, name, exc, exc_info=True)
                self.ledger.finish(
                    run_id, str(exc) if isinstance(exc, MaintenanceFailed) else f"{type(exc).__name__}: {exc}"
                )
                continue
            self.ledger.finish(run_id, None)
        self.runs += 1
