"""Print the Spark configuration that reads (and maintains) what the sinks write: the pinned runtimes,
their SQL extensions, and an Iceberg connector's catalog mapped into Spark, as ``--conf`` options for
``pyspark``, ``spark-submit`` or ``spark-sql``.

    manage.py spark_conf                 # the project's own catalog ("iceberg"), jars from var/jars/spark
    manage.py spark_conf orders-sink     # that connector's catalog
    manage.py spark_conf --packages      # Maven coordinates (spark.jars.packages) for a cluster's Spark
"""

from __future__ import annotations

import shlex
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from connectors import actions
from connectors.config import SinkConfig
from sinkadmin.services import (
    SPARK_CONNECT_ARTIFACT,
    ServiceError,
    jvm_classpath,
    pinned_spark_artifacts,
    spark_conf,
)


class Command(BaseCommand):
    help = "Print the --conf options with which Spark reads the sinks' tables (Iceberg's catalog mapped, runtimes)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("connector", nargs="?", help="an Iceberg connector: its catalog (default: the project's)")
        parser.add_argument(
            "--packages", action="store_true", help="the runtimes as Maven coordinates, for a Spark that fetches them"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from sinks.iceberg.tables import (
            SparkCatalogUnmappable,
            connector_spark_catalog_conf,
            default_spark_catalog_conf,
        )

        try:
            if options["connector"]:
                try:
                    config = SinkConfig.parse(actions.get_connector(options["connector"]).config)
                except actions.ConnectorNotFound as exc:
                    raise CommandError(str(exc)) from None
                if config.plugin != "iceberg":
                    raise CommandError(
                        f"{options['connector']} is a {config.plugin} connector: Spark reads what it writes by"
                        " path (format('hudi').load(<table path>) for Hudi), with no catalog to map"
                    )
                catalog = connector_spark_catalog_conf(config)
            else:
                catalog = default_spark_catalog_conf()
            conf = {**runtimes(options["packages"]), **catalog}
        except (ServiceError, SparkCatalogUnmappable) as exc:
            raise CommandError(str(exc)) from None
        for key, value in conf.items():
            self.stdout.write(f"--conf {shlex.quote(f'{key}={value}')}")


def runtimes(packages: bool) -> dict[str, str]:
    """spark_conf's runtimes and extensions; with ``packages``, the jars as Maven coordinates instead."""
    conf = spark_conf(server=False)
    if packages:
        # (Our Hudi conflict check is no Maven artifact: its jar goes by path, copied where the Spark runs.)
        conf["spark.jars"] = ",".join(str(jar) for jar in jvm_classpath("hudi-fence"))
        conf["spark.jars.packages"] = ",".join(
            f"{group}:{artifact}:{version}"
            for group, artifact, version in pinned_spark_artifacts()
            if not artifact.startswith(SPARK_CONNECT_ARTIFACT)
        )
    return conf
