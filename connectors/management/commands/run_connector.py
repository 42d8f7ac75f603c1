"""Run one connector (or one role of it) in this process, without Celery.

For debugging a config, and for the tests that kill processes mid-commit.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from workers import runtime


class Command(BaseCommand):
    help = "Run a connector's coordinator and/or a worker task in the foreground."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--role", choices=["all", "coordinator", "task"], default="all")
        parser.add_argument("--task-index", type=int, default=0)
        parser.add_argument("--tasks", type=int, default=1, help="number of tasks the partitions are spread over")
        parser.add_argument("--max-commits", type=int, default=None, help="stop after this many commits (coordinator)")

    def handle(self, *args: Any, **options: Any) -> None:
        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        signal.signal(signal.SIGINT, lambda *_: stopping.set())
        name = options["name"]
        role = options["role"]
        threads = []
        if role in ("all", "task"):
            indexes = range(options["tasks"]) if role == "all" else [options["task_index"]]
            for index in indexes:
                partitions = runtime.assigned_partitions(name, index, options["tasks"])
                thread = threading.Thread(
                    target=runtime.run_task,
                    args=(name, index, partitions, stopping.is_set),
                    name=f"task-{index}",
                    daemon=True,
                )
                thread.start()
                threads.append(thread)
        if role in ("all", "coordinator"):
            done = runtime.run_coordinator(name, stopping.is_set, max_commits=options["max_commits"])
            self.stdout.write(f"{name}: {done} commit(s)")
            stopping.set()
        else:
            stopping.wait()
        for thread in threads:
            thread.join(timeout=60)
