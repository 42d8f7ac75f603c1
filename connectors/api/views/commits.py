"""/connectors/{name}/commits: the commit ledger, beyond Connect's API."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from connectors import actions
from connectors.api.entities import commit_detail, commit_summary
from connectors.api.errors import BadRequest, NotFound
from connectors.api.serializers import CommitDetailSerializer, CommitPageSerializer
from connectors.api.views.base import ConnectView
from connectors.api.views.schema import NAME, error, errors
from connectors.models import Commit, CommitState

TAG = ["commits"]


class CommitPagination(CursorPagination):
    # A cursor, not page numbers: new commits arrive at the head all the time
    # and would shift numbered pages under a reader.
    ordering = ("-started_at", "-id")
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 500

    def get_paginated_response(self, data: Any) -> Response:
        return Response({"commits": data, "next": self.get_next_link(), "previous": self.get_previous_link()})


class CommitListView(ConnectView):
    @extend_schema(
        operation_id="listCommits",
        summary="The connector's commits, newest first",
        tags=TAG,
        parameters=[
            NAME,
            OpenApiParameter("state", OpenApiTypes.STR, enum=CommitState.values, description="Only this state."),
            OpenApiParameter("limit", OpenApiTypes.INT, description="Commits per page (default 50, at most 500)."),
            OpenApiParameter("cursor", OpenApiTypes.STR, description="From the next or previous link."),
        ],
        responses={200: CommitPageSerializer, **errors(400), 404: error("Unknown connector, or a bad cursor.")},
    )
    def get(self, request: Request, name: str) -> Response:
        connector = actions.get_connector(name)
        commits = Commit.objects.filter(connector=connector).prefetch_related("partitions")
        state = request.query_params.get("state")
        if state is not None:
            if state not in CommitState.values:
                raise BadRequest(f"state must be one of {', '.join(CommitState.values)}")
            commits = commits.filter(state=state)
        paginator = CommitPagination()
        page = paginator.paginate_queryset(commits, request, view=self)
        assert page is not None  # a cursor paginator always pages
        return paginator.get_paginated_response([commit_summary(commit) for commit in page])


class CommitView(ConnectView):
    @extend_schema(
        operation_id="getCommit",
        summary="One commit: its files, offsets and table snapshots",
        tags=TAG,
        parameters=[NAME, OpenApiParameter("commit_id", OpenApiTypes.UUID, OpenApiParameter.PATH)],
        responses={200: CommitDetailSerializer, **errors(), 404: error("Unknown connector or commit.")},
    )
    def get(self, request: Request, name: str, commit_id: Any) -> Response:
        connector = actions.get_connector(name)
        commit = Commit.objects.filter(connector=connector, commit_id=commit_id).prefetch_related("partitions").first()
        if commit is None:
            raise NotFound(f"Commit {commit_id} of connector {name} not found")
        return Response(commit_detail(commit))


class CommitAbandonView(ConnectView):
    @extend_schema(
        operation_id="abandonCommit",
        summary="Abandon a prepared commit that cannot be applied; its records are written again",
        description="The way out of a prepared commit the coordinator keeps failing to apply (the connector's "
        "trace names it and why), when fixing the table or the config is not wanted. The commit becomes ABORTED "
        "and its partitions' offsets are rewound to its starts, so the next commit reads and writes its records "
        "again. Only while the connector is STOPPED with no coordinator running, and only if the sink holds none "
        "of the commit (a table that has it would have its records twice). Resume the connector afterwards.",
        tags=TAG,
        parameters=[NAME, OpenApiParameter("commit_id", OpenApiTypes.UUID, OpenApiParameter.PATH)],
        request=None,
        responses={
            200: CommitDetailSerializer,
            **errors(),
            400: error("The connector is not STOPPED."),
            404: error("Unknown connector or commit."),
            409: error("The commit is not prepared, a coordinator is still running, or the sink holds it."),
        },
    )
    def post(self, request: Request, name: str, commit_id: Any) -> Response:
        commit = actions.abandon_commit(name, commit_id)
        commit = Commit.objects.prefetch_related("partitions").get(pk=commit.pk)
        return Response(commit_detail(commit))
