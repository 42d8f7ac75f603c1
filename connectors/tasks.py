"""Celery tasks: long-running coordinators and worker tasks, and the supervisor.

The state that must survive a crash is in Postgres (the ledger, the task
rows); a Celery message only says "run this epoch of this task". A message
redelivered after its worker died finds its epoch superseded and does nothing.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import socket
import threading
from typing import Any

from celery import shared_task
from celery.signals import celeryd_after_setup, worker_init, worker_process_init, worker_ready, worker_shutting_down
from django.conf import settings
from django.db import connection
from django.utils import timezone

from connectors.actions import runtime as runtime_state
from sinkadmin.celery import SUPERVISE, SUPERVISOR_QUEUE
from workers import runtime

log = logging.getLogger(__name__)

CONNECTORS_QUEUE = "connectors"

# Set when the worker is asked to stop (SIGTERM): every running task leaves
# its commit cleanly and frees its slot for another worker. The signal reaches
# the worker's main process only; the event is shared memory, made before the
# pool forks, so every pool process sees it.
SHUTTING_DOWN = multiprocessing.get_context("fork").Event()

# The worker's main process, as a pool process saw it when it started.
_parent_pid: int | None = None


@worker_shutting_down.connect
def _on_shutdown(**_: object) -> None:
    SHUTTING_DOWN.set()


@worker_init.connect
def _share_imports_with_the_pool(**_: object) -> None:
    # The worker has imported the runtime (Django, pyarrow, pyiceberg,
    # pyspark...) before its pool forks. Frozen, those objects are left out
    # of every pool process's garbage collections, which would otherwise
    # write to each of them and so copy every page that holds one.
    gc.freeze()


@worker_process_init.connect
def _remember_parent(**_: object) -> None:
    global _parent_pid  # noqa: PLW0603 - set once per pool process, when it starts
    _parent_pid = os.getppid()


def stopping() -> bool:
    """Whether this process's runners should leave: the worker is shutting
    down, or it died (SIGKILL, OOM killer) and left this pool process orphaned,
    still holding its tasks' heartbeats that no one could stop otherwise."""
    return SHUTTING_DOWN.is_set() or (_parent_pid is not None and os.getppid() != _parent_pid)


# (name, slots) of this worker, if it hosts runners (consumes the connectors queue).
_advertised: tuple[str, int] | None = None


@celeryd_after_setup.connect
def _name_worker(sender: str, instance: Any, **_: object) -> None:
    global _advertised  # noqa: PLW0603 - set once, in the worker's main process
    # Task rows and the UI show which worker runs what by its node name.
    runtime.WORKER_NAME = sender
    if CONNECTORS_QUEUE in instance.app.amqp.queues.consume_from:
        # (Its autoscaled pool's largest size: it forks a process per runner up to it.)
        _advertised = (sender, int(instance.max_concurrency or instance.concurrency))


@worker_ready.connect
def _advertise_slots(**_: object) -> None:
    """Heartbeat this worker's slots (its pool's processes) into Postgres until it shuts down."""
    if _advertised is None:
        return
    name, slots = _advertised
    started_at = timezone.now()
    # A third of the timeout: one lost beat never makes the worker look gone.
    every = settings.HEARTBEAT_TIMEOUT_SECONDS / 3

    def advertise() -> None:
        try:
            while True:
                try:
                    runtime_state.worker_heartbeat(name, socket.gethostname(), slots, started_at)
                except Exception as exc:  # Postgres away: the next beat tries again
                    log.warning("worker %s: could not advertise its slots: %s", name, exc)
                if SHUTTING_DOWN.wait(every):
                    break
            runtime_state.worker_left(name)
        finally:
            connection.close()

    threading.Thread(target=advertise, name="advertise-slots", daemon=True).start()


@shared_task(name="sinkadmin.run_coordinator", acks_late=True, ignore_result=True, queue=CONNECTORS_QUEUE)
def run_coordinator(connector_id: int) -> None:
    runtime.run_coordinator_supervised(connector_id, stopping)


@shared_task(name="sinkadmin.run_task", acks_late=True, ignore_result=True, queue=CONNECTORS_QUEUE)
def run_task(task_id: int, epoch: int) -> None:
    task = runtime_state.claim_task(task_id, epoch, runtime.worker_id(), socket.gethostname())
    if task is None:
        return  # superseded before it started: a newer epoch runs elsewhere
    runtime.run_task_supervised(task, stopping)


@shared_task(name=SUPERVISE, ignore_result=True, queue=SUPERVISOR_QUEUE)
def supervise() -> None:
    from workers.supervisor import Supervisor

    Supervisor(
        start_coordinator=run_coordinator.delay,
        start_task=run_task.delay,
    ).step()
