"""Schemas from a Confluent Schema Registry, by id, for values in the Confluent wire format.

Only what decoding needs: ``GET /schemas/ids/{id}`` (a schema id names one
schema forever, so each is fetched once per process), over the configured
URLs in turn, with HTTP basic auth as Confluent's AvroConverter configures it
(``connectors.config.validation.SchemaRegistryConfig``).

What goes wrong is told apart, because each has its own consequence: a
registry that cannot be reached is an outage (``RegistryUnavailable``: the
commit waits and is retried, no record is judged); an id the registry does
not know, or a schema that is not Avro, makes that record undecodable
(``UnknownSchema``, a ValueError: ``errors.tolerance`` decides); a refused
password is neither (``RegistryError``: the write fails with the reason).
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request
from typing import Any

from connectors.config.secrets import redact
from connectors.config.validation import SchemaRegistryConfig


class RegistryUnavailable(Exception):
    """No configured registry URL answered."""


class RegistryError(Exception):
    """The registry answered with an error that is not about one record (a refused password, a server error)."""


class UnknownSchema(ValueError):
    """The registry has no usable schema under the record's id: the record cannot be decoded."""


class SchemaRegistry:
    TIMEOUT_S = 10.0

    def __init__(self, config: SchemaRegistryConfig) -> None:
        self.config = config
        self._schemas: dict[int, str] = {}
        self._lock = threading.Lock()

    def schema(self, schema_id: int) -> str:
        """The schema (JSON text) registered under ``schema_id``, of the configured type (Avro or JSON Schema)."""
        with self._lock:
            known = self._schemas.get(schema_id)
        if known is not None:
            return known
        body = self._get(f"/schemas/ids/{schema_id}", schema_id)
        kind, wanted = body.get("schemaType", "AVRO"), self.config.schema_type
        if kind != wanted:
            raise UnknownSchema(
                f"schema id {schema_id} is registered as {kind}; the connector's converter decodes {wanted} values"
            )
        text = str(body["schema"])
        with self._lock:
            self._schemas[schema_id] = text
        return text

    def _get(self, path: str, schema_id: int) -> dict[str, Any]:
        failures = []
        for url in self.config.urls:
            request = urllib.request.Request(url + path, headers=self._headers())
            try:
                with urllib.request.urlopen(request, timeout=self.TIMEOUT_S) as response:
                    answer: dict[str, Any] = json.loads(response.read())
                    return answer
            except urllib.error.HTTPError as exc:
                message = _message(exc)
                if exc.code == 404:
                    raise UnknownSchema(f"the Schema Registry has no schema with id {schema_id} ({message})") from None
                if exc.code >= 500:
                    failures.append(f"{redact(url)}: HTTP {exc.code} {message}")
                    continue
                raise RegistryError(
                    f"the Schema Registry at {redact(url)} refused: HTTP {exc.code} {message}"
                ) from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                failures.append(f"{redact(url)}: {reason}")
        raise RegistryUnavailable("cannot reach the Schema Registry: " + "; ".join(failures))

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if self.config.credentials is not None:
            token = base64.b64encode(":".join(self.config.credentials).encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        return headers


def _message(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(error.read()).get("message", error.reason))
    except (ValueError, OSError):
        return str(error.reason)
