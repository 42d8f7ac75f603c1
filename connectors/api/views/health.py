"""GET /health of the Connect API, as KIP-1017 added it to Kafka Connect: for load balancers and probes."""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, connection
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from connectors.api.views.base import ConnectView
from connectors.models import Connector

log = logging.getLogger(__name__)

HEALTHY = "The control plane and its database answer requests."
UNHEALTHY = "The control plane's database does not answer: requests cannot be served."

Health = inline_serializer(
    "Health",
    {
        "status": serializers.ChoiceField(choices=["healthy", "unhealthy"]),
        "message": serializers.CharField(),
    },
)


class HealthView(ConnectView):
    """Served without credentials, as probes call it, and saying nothing but whether requests can be served.

    Kafka Connect's worker answers 500 when unhealthy; here the cause is a service the control plane
    depends on, and 503 is what load balancers and Kubernetes take for "out of rotation until it answers".
    """

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="health",
        summary="Whether the control plane can serve requests (KIP-1017)",
        tags=["cluster"],
        auth=[],
        responses={
            200: OpenApiResponse(Health, description="Healthy."),
            503: OpenApiResponse(Health, description="Unhealthy: the database does not answer."),
        },
    )
    def get(self, request: Request) -> Response:
        try:
            # A query of the control plane's own table: the database answers and its schema is there.
            Connector.objects.exists()
        except DatabaseError as exc:
            log.warning("health: the database does not answer: %s", exc)
            connection.close()  # (the next probe connects afresh)
            return Response({"status": "unhealthy", "message": UNHEALTHY}, status=503)
        return Response({"status": "healthy", "message": HEALTHY})
