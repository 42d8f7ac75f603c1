from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sinkadmin.preflight import run_checks


class Command(BaseCommand):
    help = "Check that PostgreSQL, Redis and Kafka are reachable with the configured settings."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--skip-kafka", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        problems = run_checks(kafka=not options["skip_kafka"])
        if problems:
            raise CommandError("\n".join(problems))
        self.stdout.write("preflight: database, redis" + ("" if options["skip_kafka"] else " and kafka") + " reachable")
