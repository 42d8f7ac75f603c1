"""The Celery application that hosts connector coordinators and tasks."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sinkadmin.settings")

app = Celery("sinkadmin")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
