"""Web UI views. Thin: reading is done by queries here, writing by connectors.actions."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from connectors.models import Connector


@login_required
def connector_list(request: HttpRequest) -> HttpResponse:
    connectors = Connector.objects.all()
    return render(request, "connectors/list.html", {"connectors": connectors})


@login_required
def connector_detail(request: HttpRequest, name: str) -> HttpResponse:
    connector = get_object_or_404(Connector, name=name)
    commits = connector.commits.all()[:50]
    return render(request, "connectors/detail.html", {"connector": connector, "commits": commits})
