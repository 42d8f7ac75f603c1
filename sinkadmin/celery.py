"""The Celery application that hosts connector coordinators and tasks."""

from __future__ import annotations

import logging
import os

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sinkadmin.settings")

log = logging.getLogger(__name__)

# The supervisor's task (connectors.tasks.supervise) and its queue.
SUPERVISE, SUPERVISOR_QUEUE = "sinkadmin.supervise", "supervisor"

app = Celery("sinkadmin")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@after_setup_logger.connect
@after_setup_task_logger.connect
def _redact_credentials(logger: logging.Logger, **_: object) -> None:
    # The worker replaces Django's handlers with its own: they hide URI
    # passwords too (sinkadmin.settings.LOGGING).
    from connectors.config.secrets import RedactCredentials

    for handler in logger.handlers:
        if not any(isinstance(f, RedactCredentials) for f in handler.filters):
            handler.addFilter(RedactCredentials())


@app.on_after_configure.connect
def _schedule_supervisor(sender: Celery, **_: object) -> None:
    from django.conf import settings

    interval = settings.SUPERVISOR_INTERVAL_SECONDS
    # Expires with its interval: a backlog of supervisor runs is pointless.
    sender.add_periodic_task(
        float(interval),
        sender.signature(SUPERVISE, queue=SUPERVISOR_QUEUE, expires=interval),
        name="supervise connectors",
    )


def supervise_soon() -> None:
    """Have the supervisor reconcile now, not at its next beat.

    A connector created, resumed, restarted or reconfigured then starts
    within a second, as a Kafka Connect worker starts one on its REST call,
    where it waited up to SINKADMIN_SUPERVISOR_INTERVAL (5 s) for the beat.
    The supervisor's queue is served by one solo worker, so this run and the
    beat's never overlap. Best effort: a message that cannot be sent (the
    broker away) is logged and the next beat does the same work. It expires
    with the beat's interval, as the beat's own do: by then a beat has run.
    The broker URL is read at each call (a new connection each time: these
    are people's actions, a few a minute at most).
    """
    from django.conf import settings

    try:
        with app.connection_for_write(settings.CELERY_BROKER_URL) as connection:
            app.send_task(
                SUPERVISE,
                queue=SUPERVISOR_QUEUE,
                expires=settings.SUPERVISOR_INTERVAL_SECONDS,
                connection=connection,
                retry=False,
            )
    except Exception as exc:
        log.warning(
            "could not ask the supervisor to act at once; it acts at its next beat (every %d s): %s",
            settings.SUPERVISOR_INTERVAL_SECONDS,
            exc,
        )
