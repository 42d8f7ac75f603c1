from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from sinkadmin.kafka_broker import start_configured_broker
from sinkadmin.services import ServiceError, serve_in_foreground


class Command(BaseCommand):
    help = "Run the embedded Apache Kafka broker (its log under var/kafka) in the foreground until interrupted."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            broker = start_configured_broker(settings.VAR_DIR / "log")
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"Kafka broker at 127.0.0.1:{settings.KAFKA_EMBEDDED_PORT} (log under {settings.KAFKA_EMBEDDED_DIR});"
            " Ctrl-C stops it"
        )
        try:
            serve_in_foreground(broker)
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
