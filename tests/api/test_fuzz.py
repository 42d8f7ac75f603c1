"""Schemathesis fuzzes every Connect operation of the OpenAPI document: no 5xx, and
every response (status, content type, headers, body) as the document says.

The figures of the run are printed at the end of the pytest session.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from connectors import actions
from connectors.api.views.schema import EXAMPLE_CONNECTOR
from connectors.models import Commit, Connector
from tests.api.conftest import CONFIG, add_task, basic, commit, run_coordinator

# Examples per operation and generation mode, beside the explicit and coverage
# phases (which reach every documented status): about a minute on two cores.
MAX_EXAMPLES = 50
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]

# Filled as the run goes; printed by the terminal summary hook in conftest.
FIGURES: dict[str, Counter[str]] = {"calls": Counter(), "statuses": Counter()}


@pytest.fixture
def in_test_transaction(db: None) -> Iterator[None]:
    """Serve WSGI calls on the test's connection, as Django's test client does.

    Django closes "old" connections at each request's start and end; here
    that would close the test transaction's connection under the test.
    """
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def ensure_example_connector() -> None:
    """The connector the document's examples name, in the state a live one has,
    so that explicit examples reach real rows and not only 404s."""
    if Connector.objects.filter(name=EXAMPLE_CONNECTOR).exists():
        return
    # (A fresh ledger: the one the fuzzer's deletion left would be taken over by the new connector.)
    Commit.objects.filter(connector_name=EXAMPLE_CONNECTOR, connector__isnull=True).delete()
    connector = actions.create_connector(EXAMPLE_CONNECTOR, CONFIG)
    epoch = run_coordinator(connector)
    commit(connector, epoch, 0, 10)
    add_task(connector, 0)


@pytest.fixture
def connect_schema(alice: object, in_test_transaction: None, kafka_bootstrap: str) -> Any:
    # (The broker: moving a stopped connector's offsets moves its consumer group's too.)
    schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    schema.config.generation.update(
        modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=MAX_EXAMPLES, deterministic=True
    )
    return schema.include(path_regex="^/api/connect")


schema = schemathesis.pytest.from_fixture("connect_schema")


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_no_operation_errs_or_contradicts_the_openapi_document(case: Any) -> None:
    # The fuzzer deletes and stops connectors too; each case starts with one.
    ensure_example_connector()
    response = case.call_and_validate(headers={"Authorization": basic("alice")}, checks=CHECKS)
    documented = case.method.upper() == case.operation.method.upper()
    FIGURES["calls"][case.operation.label if documented else "undocumented methods (expect 405)"] += 1
    FIGURES["statuses"][str(response.status_code)] += 1
    # Connectors the fuzzer made keep the table small, as in real use.
    if Connector.objects.count() > 50:
        Connector.objects.exclude(name=EXAMPLE_CONNECTOR).delete()
