"""Rebuild a connector's ledger from its tables' snapshot summaries (DESIGN I2).

Every snapshot the sink writes carries the connector, commit id, epoch and
offset ranges, so a lost or damaged ledger can be restored: missing commits
are re-created as COMMITTED and each partition's next offset is set to the
end of its last committed range. The connector must be STOPPED.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from connectors import actions
from connectors.config import SinkConfig
from workers.tables import catalog_for, recovered_commits


class Command(BaseCommand):
    help = "Rebuild a connector's commit ledger and offsets from its Iceberg tables' snapshot summaries."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--dry-run", action="store_true", help="only print what was found")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            connector = actions.get_connector(options["name"])
        except actions.ConnectorNotFound as exc:
            raise CommandError(str(exc)) from None
        config = SinkConfig.parse(connector.config)
        found = recovered_commits(catalog_for(config), [t.name for t in config.tables], connector.name)
        self.stdout.write(f"{connector.name}: {len(found)} commit(s) found in the table snapshots")
        if options["dry_run"]:
            return
        try:
            added, offsets = actions.restore_commits(connector.pk, found)
        except actions.ActionError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{added} commit(s) restored; offsets now:")
        for (topic, partition), offset in sorted(offsets.items()):
            self.stdout.write(f"  {topic}/{partition}: {offset}")
