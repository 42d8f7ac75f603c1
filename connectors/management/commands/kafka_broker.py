from __future__ import annotations

import signal
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sinkadmin.services import ServiceError, start_embedded_broker


class Command(BaseCommand):
    help = "Run the embedded memory-only Kafka broker (Tansu) in the foreground until interrupted."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=settings.KAFKA_EMBEDDED_PORT)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            broker = start_embedded_broker(options["port"], settings.VAR_DIR / "log")
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Kafka broker (memory only) at 127.0.0.1:{options['port']}; Ctrl-C stops it")
        stopping = False

        def stop(*_: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while not stopping and broker.process.poll() is None:
            time.sleep(0.5)
        broker.stop()
