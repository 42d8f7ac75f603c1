""" "Test connection": can this config reach its brokers, topics and catalog?

Run before saving, with short timeouts, so a typo in a broker address or a
catalog URI shows up in the form instead of as a failed task minutes later.
The Kafka admin client and the catalog are built exactly as the runtime
builds them (``workers.kafka.admin_client``, ``workers.tables.catalog_for``),
so a check that passes here tests the same settings the tasks will use.
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django import db
from django.conf import settings

from connectors.config import SinkConfig, resolve_plugin
from connectors.config.definitions import resolve
from connectors.config.secrets import redact

OK, WARNING, ERROR, SKIPPED = "ok", "warning", "error", "skipped"
KAFKA_TIMEOUT_S = 5.0
CATALOG_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str
    detail: str


def check_connection(config: Mapping[str, str], bootstrap: str | None = None) -> list[CheckResult]:
    """Brokers, topics and catalog of a valid config; each check says what it found."""
    sink = SinkConfig.parse(config)
    plugin = resolve_plugin(sink.raw.get("connector.class", ""))
    bootstrap = bootstrap or settings.KAFKA_BOOTSTRAP_SERVERS
    client = sink.raw
    if plugin is not None and plugin.source:
        # The sink reads another cluster than the product's (the mirror's source cluster).
        source = resolve(plugin.source)(sink)
        bootstrap, client = source.bootstrap, source.client
    results: list[CheckResult] = []

    metadata, error = _bounded(lambda: _list_topics(bootstrap, client), KAFKA_TIMEOUT_S + 2)
    if metadata is None:
        results.append(CheckResult("Kafka brokers", ERROR, f"{bootstrap}: {error}"))
        results.append(CheckResult("Topics", SKIPPED, "needs the brokers"))
    else:
        results.append(CheckResult("Kafka brokers", OK, f"{len(metadata.brokers)} broker(s) answered at {bootstrap}"))
        results.append(_check_topics(sink, metadata.topics))

    if plugin is not None and plugin.probe:
        probe = resolve(plugin.probe)
        found, error = _bounded(lambda: probe(sink), CATALOG_TIMEOUT_S)
        results.append(CheckResult(found[0], OK, found[1]) if found else CheckResult("Store", ERROR, error))
    else:
        results += _catalog_checks(sink)
    # A library's error may quote the URI it was given, password and all.
    return [CheckResult(r.name, r.status, redact(r.detail)) for r in results]


def _catalog_checks(sink: SinkConfig) -> list[CheckResult]:
    catalog, error = _bounded(lambda: _load_catalog(sink), CATALOG_TIMEOUT_S)
    if catalog is None:
        return [
            CheckResult("Iceberg catalog", ERROR, f"{sink.catalog_name}: {error}"),
            CheckResult("Tables", SKIPPED, "needs the catalog"),
        ]
    results = [CheckResult("Iceberg catalog", OK, f"catalog {sink.catalog_name!r} loaded and listed")]
    tables, error = _bounded(lambda: _check_tables(sink, catalog), CATALOG_TIMEOUT_S)
    results.append(tables if tables is not None else CheckResult("Tables", ERROR, error))
    _close(catalog)
    return results


def _close(catalog: Any) -> None:
    # A SQL catalog keeps a connection pool; a check that leaves it open
    # would hold database connections for every click on "Test connection".
    engine = getattr(catalog, "engine", None)
    if engine is not None:
        engine.dispose()


def _bounded(call: Callable[[], Any], timeout: float) -> tuple[Any, str]:
    """Run ``call`` with a deadline; a hung client must not hang the request."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(_closing_db_connections, call)
    try:
        return future.result(timeout=timeout), ""
    except concurrent.futures.TimeoutError:
        return None, f"no answer within {timeout:.0f} s"
    except Exception as exc:  # every client library raises its own types; the message is what the user needs
        return None, _readable(exc)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _closing_db_connections(call: Callable[[], Any]) -> Any:
    # Django opens a connection per thread (the catalog's init lock uses
    # one); this thread ends here, so its connection must not outlive it.
    try:
        return call()
    finally:
        db.connections.close_all()


def _readable(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:500]


def _list_topics(bootstrap: str, config: dict[str, str]) -> Any:
    from workers.kafka import admin_client

    return admin_client(bootstrap, config).list_topics(timeout=KAFKA_TIMEOUT_S)


def _check_topics(sink: SinkConfig, topics: Mapping[str, Any]) -> CheckResult:
    present = {name for name, topic in topics.items() if topic.error is None}
    if sink.topics_regex:
        pattern = re.compile(sink.topics_regex)
        matched = sorted(t for t in present if pattern.fullmatch(t) and not t.startswith("__"))
        if not matched:
            return CheckResult("Topics", WARNING, f"no topic matches {sink.topics_regex!r} yet")
        return CheckResult("Topics", OK, f"{len(matched)} topic(s) match: {', '.join(matched[:10])}")
    missing = [t for t in sink.topics if t not in present]
    if missing:
        return CheckResult("Topics", ERROR, f"missing: {', '.join(missing)}")
    partitions = sum(len(topics[t].partitions) for t in sink.topics)
    return CheckResult("Topics", OK, f"{len(sink.topics)} topic(s), {partitions} partition(s)")


def _load_catalog(sink: SinkConfig) -> Any:
    from workers.tables import catalog_for

    catalog = catalog_for(sink)
    # Loading is lazy for some catalog types; listing proves the catalog answers.
    catalog.list_namespaces()
    return catalog


def _check_tables(sink: SinkConfig, catalog: Any) -> CheckResult:
    missing = [t.name for t in sink.tables if not catalog.table_exists(t.name)]
    if not missing:
        return CheckResult("Tables", OK, f"{len(sink.tables)} table(s) exist")
    if sink.auto_create:
        return CheckResult("Tables", OK, f"will be created on first records: {', '.join(missing)}")
    return CheckResult(
        "Tables", ERROR, f"missing: {', '.join(missing)} (create them or set iceberg.tables.auto-create-enabled)"
    )
