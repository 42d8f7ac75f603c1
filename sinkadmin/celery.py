"""The Celery application that hosts connector coordinators and tasks."""

from __future__ import annotations

import logging
import os

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sinkadmin.settings")

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
        sender.signature("sinkadmin.supervise", queue="supervisor", expires=interval),
        name="supervise connectors",
    )
