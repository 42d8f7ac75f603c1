"""The Celery application that hosts connector coordinators and tasks."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sinkadmin.settings")

app = Celery("sinkadmin")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


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
