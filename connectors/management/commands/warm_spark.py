"""Warm the Spark Connect server up for the connectors: join the session every process running this code
shares (``workers.spark_writer.shared_session_id``) and have its Python workers start and import the
decoder, so that the first connector's tasks do not wait for the server's first session.

``make run`` runs it in the background each time it starts the server (its log: ``spark-warm-up.log``;
``runstack --no-spark-warm-up`` skips it). What it saves a first connector is measured by
``bench/first_connector.py`` (docs/spark.md, "A server warmed up as make run starts it")."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Join the code's shared Spark session and start its Python workers, before a connector needs them."

    def handle(self, *args: Any, **options: Any) -> None:
        from workers.spark_writer import SparkJobs

        began, jobs = time.monotonic(), SparkJobs()
        try:
            jobs.warm_up()  # the sinks' warm-up job: a Spark task per core, each importing the decoder
        except Exception as exc:
            raise CommandError(f"could not warm Spark up: {exc}") from None
        self.stdout.write(f"Spark is warm: {jobs.cores} Python workers ready in {time.monotonic() - began:.2f} s")
