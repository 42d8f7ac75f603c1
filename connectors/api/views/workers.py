"""/workers: the live connectors workers and their slots, beyond Connect's API."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from connectors.actions import runtime as runtime_state
from connectors.api.serializers import WorkersSerializer
from connectors.api.views.base import ConnectView
from connectors.api.views.schema import errors


class WorkerListView(ConnectView):
    @extend_schema(
        operation_id="listWorkers",
        summary="Live workers, with the slots each has used and free",
        tags=["workers"],
        responses={200: WorkersSerializer, **errors()},
    )
    def get(self, request: Request) -> Response:
        room = runtime_state.room()
        return Response(
            {
                "workers": [
                    {
                        "worker_id": w.name,
                        "host": w.hostname,
                        "slots": w.slots,
                        "used": w.used,
                        "free": w.free,
                        "heartbeat_at": w.heartbeat_at.isoformat(),
                    }
                    for w in room.workers
                ],
                "slots": room.slots,
                "held": room.held,
                "free": max(0, room.free),
            }
        )
