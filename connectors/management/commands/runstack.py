"""`make run`: everything the product needs on one machine, stopped together with Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from connectors.actions import runtime as runtime_state
from sinkadmin.kafka_broker import start_configured_broker
from sinkadmin.preflight import check_kafka, run_checks
from sinkadmin.services import (
    DEFAULT_WORKER_SLOTS,
    ManagedProcess,
    Restarted,
    ServiceError,
    beat_argv,
    connector_worker_argv,
    spawn,
    start_spark_connect,
    supervisor_worker_argv,
)
from sinks.iceberg.tables import default_spark_catalog_conf


class Command(BaseCommand):
    help = (
        "Run web, Celery worker and beat, plus the embedded Kafka broker and Spark Connect server when not configured."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--addr", default="127.0.0.1:8000")
        parser.add_argument(
            "--worker-concurrency",
            type=int,
            default=int(os.environ.get("SINKADMIN_WORKER_CONCURRENCY", str(DEFAULT_WORKER_SLOTS))),
        )
        parser.add_argument(
            "--no-spark-warm-up",
            action="store_true",
            help="do not warm the local Spark Connect server up when it starts (manage.py warm_spark)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        problems = run_checks(kafka=False)
        if problems:
            raise CommandError("\n".join(problems))
        call_command("migrate", interactive=False, verbosity=0)
        call_command("ensure_admin")
        call_command("collectstatic", interactive=False, verbosity=0)
        log_dir = settings.VAR_DIR / "log"
        started: list[Restarted] = []
        warm_ups: list[ManagedProcess] = []
        stopping = False

        def say(line: str) -> None:
            self.stderr.write(line)

        recorded = RecordedProcesses(socket.gethostname(), say)
        recorded.stack_started()

        def keep(start: Callable[[], ManagedProcess]) -> None:
            # Each child is started again when it dies (Restarted): the stack heals, Ctrl-C stops it all.
            started.append(Restarted(start, say, recorded))

        def request_stop(*_: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        try:
            if settings.KAFKA_EMBEDDED:
                self.stdout.write(
                    f"starting the embedded Kafka broker (its log under {settings.KAFKA_EMBEDDED_DIR})..."
                )
                keep(lambda: start_configured_broker(log_dir))
            if problem := check_kafka():
                raise CommandError(problem)
            if settings.SPARK_LOCAL_CONNECT:
                self.stdout.write("starting the local Spark Connect server (a JVM, ~10-20 s)...")

                def spark_server() -> ManagedProcess:
                    server = start_spark_connect(
                        settings.SPARK_CONNECT_PORT, log_dir, catalogs=default_spark_catalog_conf()
                    )
                    if options["no_spark_warm_up"]:
                        return server
                    # In the background, so the rest of the stack starts meanwhile; again after a restart.
                    warm_ups.append(
                        spawn(
                            "spark-warm-up",
                            [sys.executable, str(settings.BASE_DIR / "manage.py"), "warm_spark"],
                            log_dir,
                        )
                    )
                    return server

                keep(spark_server)
            slots = options["worker_concurrency"]
            keep(lambda: spawn("worker", connector_worker_argv("connectors@%h", slots), log_dir))
            keep(lambda: spawn("supervisor", supervisor_worker_argv("supervisor@%h"), log_dir))
            keep(lambda: spawn("beat", beat_argv(settings.VAR_DIR / "celerybeat-schedule"), log_dir))
            keep(
                lambda: spawn("web", [sys.executable, "manage.py", "runserver", options["addr"], "--noreload"], log_dir)
            )
        except (ServiceError, CommandError) as exc:
            for warm_up in warm_ups:
                warm_up.stop()
            for service in reversed(started):
                service.stop()
            raise CommandError(str(exc)) from None

        self.stdout.write(
            self.style.SUCCESS(f"sinkadmin is running: http://{options['addr']}/  (admin: /admin/, API: /api/connect/)")
        )
        self.stdout.write(
            f"Kafka: {settings.KAFKA_BOOTSTRAP_SERVERS}   Spark: {settings.SPARK_REMOTE or settings.SPARK_MASTER}"
        )
        self.stdout.write(f"warehouse: {settings.LAKE_WAREHOUSE}   logs: {log_dir}   Ctrl-C stops everything")
        try:
            while not stopping:
                for service in started:
                    service.check()
                warm_ups[:] = [w for w in warm_ups if w.process.poll() is None]  # (reaped once done)
                recorded.beat()
                time.sleep(0.5)
        finally:
            # (A closed terminal or pipe must not keep the children running: say it, if anyone can hear.)
            with contextlib.suppress(OSError):
                self.stdout.write("stopping...")
            for warm_up in warm_ups:
                warm_up.stop()
            for service in reversed(started):
                service.stop()
            recorded.stack_stopped()


class RecordedProcesses:
    """The stack's children as the workers page shows them (``connectors.models.StackProcess``): started,
    died, started again. The database being out never stops the stack: it is said once, and the rows
    catch up when it answers."""

    BEAT_S = 5.0

    def __init__(self, host: str, say: Callable[[str], None]) -> None:
        self.host = host
        self.say = say
        self.failing = False
        self.last_beat = 0.0

    def _record(self, write: Callable[[], None]) -> None:
        try:
            write()
        except DatabaseError as exc:
            if not self.failing:
                self.say(f"cannot record the stack's processes for the workers page: {exc}")
            self.failing = True
        else:
            self.failing = False

    def stack_started(self) -> None:
        self._record(lambda: runtime_state.stack_started(self.host))

    def started(self, service: ManagedProcess) -> None:
        pid, log = service.process.pid, str(service.log_path)
        self._record(lambda: runtime_state.stack_process_started(self.host, service.name, pid, log))

    def exited(self, service: ManagedProcess) -> None:
        code = service.process.returncode
        self._record(lambda: runtime_state.stack_process_exited(self.host, service.name, code))

    def beat(self) -> None:
        if time.monotonic() - self.last_beat >= self.BEAT_S:
            self.last_beat = time.monotonic()
            self._record(lambda: runtime_state.stack_seen(self.host))

    def stack_stopped(self) -> None:
        self._record(lambda: runtime_state.stack_stopped(self.host))
