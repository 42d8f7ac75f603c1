"""Rebuild a connector's ledger from what its sink wrote (DESIGN I2).

Every Iceberg snapshot and every Hudi commit the sinks write carries the
connector, commit id, epoch and offset ranges, and every committed file of
the files sink names its partition and offsets, so a lost or damaged ledger
can be restored: missing commits are re-created as COMMITTED and each
partition's next offset is set to the end of its last committed range. The
connector must be STOPPED. A sink that records no commits (the Kafka mirror,
whose target's consumer group holds its offsets) is refused.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from connectors import actions
from connectors.config import SinkConfig
from workers.sink import plugin_of, recoverable_sink


class Command(BaseCommand):
    help = "Rebuild a connector's commit ledger and offsets from its Iceberg snapshots, Hudi timeline or file names."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--dry-run", action="store_true", help="only print what was found")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            connector = actions.get_connector(options["name"])
        except actions.ConnectorNotFound as exc:
            raise CommandError(str(exc)) from None
        config = SinkConfig.parse(connector.config)
        runtime = recoverable_sink(plugin_of(config))
        if runtime is None:
            raise CommandError(f"the {config.plugin} sink keeps no record of its commits outside the ledger")
        found = runtime.recovered_commits(connector.name, config)
        self.stdout.write(f"{connector.name}: {len(found)} commit(s) found in what the sink wrote")
        if options["dry_run"]:
            return
        try:
            added, offsets = actions.restore_commits(connector.pk, found)
        except actions.ActionError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{added} commit(s) restored; offsets now:")
        for (topic, partition), offset in sorted(offsets.items()):
            self.stdout.write(f"  {topic}/{partition}: {offset}")
