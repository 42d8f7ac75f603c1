"""A small Schema Registry for the tests, speaking the part of Confluent's REST API the sink uses.

No Schema Registry server installs from the package registries this project
reaches (Confluent's and Apicurio's are JVM services from Maven or Docker;
Karapace is not on PyPI), so the tests serve schemas from this one, over
real HTTP, to the real client; the values themselves are in the real
Confluent wire format. Schema ids are global and a schema registered again
under any subject keeps its id, as in Confluent's registry.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from typing import Any

import fastavro


class SchemaRegistryServer:
    def __init__(self, credentials: tuple[str, str] | None = None, port: int = 0) -> None:
        self.credentials = credentials
        self.schemas: dict[int, tuple[str, str]] = {}  # id -> (schema text, schemaType)
        self.subjects: dict[str, list[int]] = {}
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> None:
        """Serve (again, on the same port after ``stop``)."""
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                registry._handle(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                registry._handle(self, json.loads(self.rfile.read(length) or b"{}"))

        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self._port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Stop answering: a registry that is down."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def register(self, subject: str, schema: dict[str, Any] | str, schema_type: str = "AVRO") -> int:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        with self._lock:
            found = next((i for i, (t, k) in self.schemas.items() if t == text and k == schema_type), None)
            schema_id = found if found is not None else len(self.schemas) + 1
            self.schemas[schema_id] = (text, schema_type)
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
        return schema_id

    def _handle(self, request: BaseHTTPRequestHandler, body: dict[str, Any] | None) -> None:
        self.requests.append(request.path)
        if self.credentials is not None:
            expected = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
            if request.headers.get("Authorization") != expected:
                return self._answer(request, 401, {"error_code": 401, "message": "Unauthorized"})
        if (match := re.fullmatch(r"/schemas/ids/(\d+)", request.path)) is not None:
            found = self.schemas.get(int(match.group(1)))
            if found is None:
                return self._answer(request, 404, {"error_code": 40403, "message": "Schema not found"})
            text, kind = found
            answer: dict[str, Any] = {"schema": text}
            if kind != "AVRO":
                answer["schemaType"] = kind
            return self._answer(request, 200, answer)
        if (match := re.fullmatch(r"/subjects/([^/]+)/versions", request.path)) is not None and body is not None:
            schema_id = self.register(match.group(1), body["schema"], body.get("schemaType", "AVRO"))
            return self._answer(request, 200, {"id": schema_id})
        return self._answer(request, 404, {"error_code": 404, "message": "HTTP 404 Not Found"})

    @staticmethod
    def _answer(request: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)


def wire_format(schema_id: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    """A value as Confluent's serializers write it: magic byte 0, the schema id (big-endian), the Avro record."""
    out = BytesIO()
    out.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()
