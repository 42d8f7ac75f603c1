"""/connectors/{name}/maintenance: the connector's table maintenance runs, beyond Connect's API."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from connectors import actions
from connectors.api.entities import maintenance_run
from connectors.api.errors import BadRequest
from connectors.api.serializers import MaintenanceRunsSerializer
from connectors.api.views.base import ConnectView
from connectors.api.views.schema import NAME, error, errors
from connectors.models import MaintenanceRun

MAX_RUNS = 500


class MaintenanceRunListView(ConnectView):
    @extend_schema(
        operation_id="listMaintenanceRuns",
        summary="The connector's table maintenance runs (compaction, snapshot expiry, orphan removal), newest first",
        tags=["maintenance"],
        parameters=[
            NAME,
            OpenApiParameter(
                "limit", OpenApiTypes.INT, description=f"Runs to return (default 50, at most {MAX_RUNS})."
            ),
        ],
        responses={200: MaintenanceRunsSerializer, **errors(400), 404: error("Unknown connector.")},
    )
    def get(self, request: Request, name: str) -> Response:
        connector = actions.get_connector(name)
        limit = request.query_params.get("limit", "50")
        if not limit.isdigit() or not 1 <= int(limit) <= MAX_RUNS:
            raise BadRequest(f"limit must be a whole number from 1 to {MAX_RUNS}")
        runs = MaintenanceRun.objects.filter(connector=connector).order_by("-started_at", "-id")[: int(limit)]
        return Response({"runs": [maintenance_run(run) for run in runs]})
