from __future__ import annotations

import pytest
from django.conf import LazySettings


@pytest.fixture
def lake(
    settings: LazySettings,
    warehouse: str,
    tmp_path_factory: pytest.TempPathFactory,
    subprocess_env: dict[str, str],
    kafka_bootstrap: str,
    spark_remote: str,
) -> dict[str, str]:
    """A fresh warehouse and staging area; returns the environment for child processes."""
    settings.LAKE_WAREHOUSE = warehouse
    settings.STAGING_DIR = tmp_path_factory.mktemp("staging")
    return {**subprocess_env, "LAKE_WAREHOUSE": warehouse, "SINKADMIN_STAGING_DIR": str(settings.STAGING_DIR)}


def sink_config(topic: str, table: str, **overrides: str) -> dict[str, str]:
    return {
        "connector.class": "iceberg",
        "topics": topic,
        "iceberg.tables": table,
        "iceberg.tables.auto-create-enabled": "true",
        "iceberg.control.topic": f"control-{topic}",
        # The SQL catalog's tables are not Django's, so they survive the
        # per-test flush: a catalog name per test keeps tables apart.
        "iceberg.catalog": f"catalog-{topic}",
        "iceberg.control.commit.interval-ms": "1500",
        "iceberg.control.commit.timeout-ms": "15000",
        **overrides,
    }
