"""GET / of the Connect API."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from connectors.api.serializers import ServerInfoSerializer
from connectors.api.server_info import server_info
from connectors.api.views.base import ConnectView
from connectors.api.views.schema import errors


class ServerInfoView(ConnectView):
    @extend_schema(
        operation_id="serverInfo",
        summary="Version, commit and Kafka cluster id",
        tags=["cluster"],
        responses={200: ServerInfoSerializer, **errors()},
    )
    def get(self, request: Request) -> Response:
        return Response(server_info())


class ServerInfoWithoutSlashView(ServerInfoView):
    """The base URL itself, as clients call it; the same as "/" and documented once."""

    @extend_schema(exclude=True)
    def get(self, request: Request) -> Response:
        return super().get(request)
