""" "Test connection": can this config reach its brokers, topics and store?

Run before saving, with short timeouts, so a typo in a broker address or a
catalog URI shows up in the form instead of as a failed task minutes later.
The Kafka admin client is built exactly as the runtime builds it
(``connectors.config.kafka_clients.admin_client``), and the sink's store is reached by its
plugin's ``probe`` as its runtime reaches it, so a check that passes here
tests the same settings the tasks will use.
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Callable, Mapping
from typing import Any

from django import db
from django.conf import settings

from connectors.config import SinkConfig, resolve_plugin
from connectors.config.definitions import CheckResult, CheckStatus, resolve
from connectors.config.secrets import redact

OK, WARNING, ERROR, SKIPPED = CheckStatus.OK, CheckStatus.WARNING, CheckStatus.ERROR, CheckStatus.SKIPPED
KAFKA_TIMEOUT_S = 5.0
STORE_TIMEOUT_S = 10.0


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
        found, error = _bounded(lambda: probe(sink), STORE_TIMEOUT_S)
        results += found if found is not None else [CheckResult("Store", ERROR, error)]
    # A library's error may quote the URI it was given, password and all.
    return [CheckResult(r.name, r.status, redact(r.detail)) for r in results]


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
    from connectors.config.kafka_clients import admin_client

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
