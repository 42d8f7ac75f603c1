"""What every Connect endpoint shares: JSON only, Connect's error shape, auth."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import JSONParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from connectors.actions import ConnectorNotFound
from connectors.api.errors import BadRequest, NotFound, connect_exception_handler
from connectors.api.permissions import ConnectPermission

MAX_TASK_ID = 2**31 - 1


class JSONOnly(DefaultContentNegotiation):
    """Connect always answers JSON, whatever the client's Accept header says."""

    def select_renderer(
        self, request: Request, renderers: Sequence[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        return renderers[0], renderers[0].media_type


def _storable(text: str) -> bool:
    # PostgreSQL text cannot hold NUL; such a name cannot exist, and looking it
    # up would fail in the database instead of answering 404.
    return "\x00" not in text


class ConnectView(APIView):
    renderer_classes = [JSONRenderer]
    parser_classes = [JSONParser]
    permission_classes = [ConnectPermission]
    content_negotiation_class = JSONOnly
    # No OPTIONS self-description: Connect has none, and the OpenAPI document is the description.
    metadata_class = None
    # HTTP method -> Django permissions a write needs (see ConnectPermission).
    required_permissions: ClassVar[dict[str, tuple[str, ...]]] = {}

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Any]:
        return connect_exception_handler

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        name = kwargs.get("name")
        if isinstance(name, str) and not _storable(name):
            raise ConnectorNotFound(name)
        task = kwargs.get("task")
        if isinstance(task, int) and task > MAX_TASK_ID:
            # Task rows hold 32-bit ids; a larger one cannot exist.
            raise NotFound(f"Unknown task: {name}-{task}")


def json_object(request: Request, what: str) -> dict[str, Any]:
    """The request body, which must be a JSON object."""
    data = request.data
    if not isinstance(data, dict):
        raise BadRequest(f"{what} must be a JSON object")
    return dict(data)


def query_flag(request: Request, name: str) -> bool:
    # As Java's Boolean.valueOf, which Connect's JAX-RS uses: only "true", in any case, is true.
    return str(request.query_params.get(name, "false")).strip().lower() == "true"


class UnknownRouteView(ConnectView):
    """Any path under the base URL that is not a Connect route: 404 in Connect's shape, after auth."""

    required_permissions = {m: () for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")}

    def _not_found(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        raise NotFound("HTTP 404 Not Found")

    get = post = put = patch = delete = head = options = _not_found
