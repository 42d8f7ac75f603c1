"""Run a Spark Connect server as make run starts it (the pinned runtimes loaded, the project's Iceberg
catalog mapped as ``iceberg``), in the foreground until interrupted: for a container of its own
(docker-compose.yml's ``spark``) or a host that serves other hosts' workers."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sinkadmin.services import ServiceError, serve_in_foreground, start_spark_connect


class Command(BaseCommand):
    help = "Run a Spark Connect server with the sinks' runtimes and the project's catalog, until interrupted."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="a loopback host answers this machine only")
        parser.add_argument("--port", type=int, default=settings.SPARK_CONNECT_PORT)
        parser.add_argument("--master", default="local[*]")
        parser.add_argument("--driver-memory", default="2g")

    def handle(self, *args: Any, **options: Any) -> None:
        from sinks.iceberg.tables import default_spark_catalog_conf

        try:
            server = start_spark_connect(
                options["port"],
                settings.VAR_DIR / "log",
                master=options["master"],
                driver_memory=options["driver_memory"],
                host=options["host"],
                catalogs=default_spark_catalog_conf(),
            )
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Spark Connect at sc://{options['host']}:{options['port']}; Ctrl-C stops it")
        try:
            serve_in_foreground(server)
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
