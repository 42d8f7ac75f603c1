"""Web UI views. Thin: pages read through ``connectors.ui``, writes go through ``connectors.actions``."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from connectors import actions
from connectors.actions.lifecycle import validate_name
from connectors.config import PLUGINS, resolve_plugin, validate_config
from connectors.config.secrets import hidden_config, keep_hidden_secrets
from connectors.forms import ConfigEditor, ConnectorMetaForm
from connectors.models import Commit, Connector
from connectors.ui import pages
from connectors.ui.config_diff import config_fingerprint, diff_configs
from connectors.ui.config_text import format_config
from connectors.ui.connection_check import check_connection
from connectors.ui.history import chart_series, files_by_partition, history_page, ledger


def _is_htmx(request: HttpRequest) -> bool:
    # A history restore after a cache miss wants the whole page, not a fragment.
    return request.headers.get("HX-Request") == "true" and "HX-History-Restore-Request" not in request.headers


# --- list and detail -----------------------------------------------------------


@login_required
@require_GET
def connector_list(request: HttpRequest) -> HttpResponse:
    listing = pages.connector_list(request.GET.get("q", ""), request.GET.get("state", ""), timezone.now())
    template = "connectors/_list_table.html" if _is_htmx(request) else "connectors/list.html"
    response = render(request, template, {"listing": listing})
    # The same URL answers with a page or a fragment: caches must keep both apart.
    patch_vary_headers(response, ["HX-Request"])
    return response


@login_required
@require_GET
def connector_detail(request: HttpRequest, name: str) -> HttpResponse:
    return render(request, "connectors/detail.html", pages.connector_detail(name, timezone.now()))


@login_required
@require_GET
def connector_live(request: HttpRequest, name: str) -> HttpResponse:
    """The part of the detail page that refreshes itself."""
    return render(request, "connectors/_live.html", pages.connector_detail(name, timezone.now()))


@login_required
@require_GET
def config_export(request: HttpRequest, name: str, fmt: str) -> HttpResponse:
    connector = get_object_or_404(Connector, name=name)
    response = HttpResponse(
        format_config(hidden_config(connector.config), fmt),
        content_type="application/json" if fmt == "json" else "text/plain; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="{connector.name}.{fmt}"'
    return response


# --- create and edit ---------------------------------------------------------


def _render_form(
    request: HttpRequest, editor: ConfigEditor, meta: ConnectorMetaForm | None, connector: Connector | None
) -> HttpResponse:
    # A form shown again with its errors answers 200, as Django's own views
    # do: browsers log every 4xx page load as a console error.
    return render(
        request,
        "connectors/form.html",
        {
            "editor": editor,
            "meta": meta,
            "connector": connector,
            "name_errors": meta.errors.get("name", []) if meta is not None and meta.is_bound else [],
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def connector_create(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        # The plugin first: its keys make the form.
        plugin = resolve_plugin(request.GET.get("plugin", ""))
        if plugin is None:
            return render(request, "connectors/choose_plugin.html", {"plugins": PLUGINS})
        return _render_form(
            request, ConfigEditor.for_config({"connector.class": plugin.short_name}), ConnectorMetaForm(), None
        )
    editor = ConfigEditor.from_post(request.POST)
    if "switch" in request.POST:
        meta = ConnectorMetaForm(initial={k: request.POST.get(k, "") for k in ("name", "initial_state")})
        return _render_form(request, editor.switched(request.POST["switch"]), meta, None)
    # Checked whatever the name, so that a form shown again lists every problem of its config beside
    # the name's (nothing is saved without one): a form sent empty names every required field left empty.
    editor.check()
    meta = ConnectorMetaForm(request.POST)
    if meta.is_valid() and not editor.errors:
        try:
            connector = actions.create_connector(
                meta.cleaned_data["name"], editor.values, initial_state=meta.cleaned_data["initial_state"]
            )
        except actions.InvalidConfig as exc:
            editor.errors.update(exc.validation.errors)
        except (actions.InvalidName, actions.ConnectorExists) as exc:
            meta.add_error("name", str(exc))
        else:
            messages.success(request, f"Connector {connector.name} created ({connector.desired_state}).")
            return redirect(connector)
    return _render_form(request, editor, meta, None)


@login_required
@require_http_methods(["GET", "POST"])
def connector_edit(request: HttpRequest, name: str) -> HttpResponse:
    connector = get_object_or_404(Connector, name=name)
    if request.method == "GET":
        editor = ConfigEditor.for_config(connector.config, connector.config).check()
        return _render_form(request, editor, None, connector)
    editor = ConfigEditor.from_post(request.POST, connector.config)
    if "switch" in request.POST:
        return _render_form(request, editor.switched(request.POST["switch"]), None, connector)
    if editor.errors:
        return _render_form(request, editor, None, connector)
    if request.POST.get("step") == "apply":
        return _apply_edit(request, connector, editor)
    validation = validate_config(keep_hidden_secrets(editor.values, connector.config))
    if not validation.ok:
        editor.errors.update(validation.errors)
        return _render_form(request, editor, None, connector)
    return _render_review(request, connector, editor)


def _render_review(
    request: HttpRequest, connector: Connector, editor: ConfigEditor, stale: bool = False
) -> HttpResponse:
    diff = diff_configs(connector.config, editor.values)
    return render(
        request,
        "connectors/review.html",
        {
            "connector": connector,
            "diff": diff,
            "changed": [line for line in diff if line.change != "unchanged"],
            "proposed": format_config(editor.values, "json"),
            "fingerprint": config_fingerprint(connector.config),
            "stale": stale,
        },
    )


def _apply_edit(request: HttpRequest, connector: Connector, editor: ConfigEditor) -> HttpResponse:
    # The diff was reviewed against one version of the running config; if
    # someone changed it since, the review is out of date: show the new diff.
    if request.POST.get("fingerprint") != config_fingerprint(connector.config):
        return _render_review(request, connector, editor, stale=True)
    try:
        updated, _ = actions.update_config(connector.name, editor.values)
    except actions.InvalidConfig as exc:
        editor.errors.update(exc.validation.errors)
        return _render_form(request, editor.switched("form"), None, connector)
    if updated.generation == connector.generation:
        messages.info(request, "Nothing changed: the config is the one running.")
    elif connector.failed_at is not None:
        # (update_config restarts a failed connector on its new config, as Kafka Connect does.)
        messages.success(
            request,
            f"Config of {updated.name} updated; its failure is cleared and it restarts with generation "
            f"{updated.generation}.",
        )
    else:
        messages.success(
            request, f"Config of {updated.name} updated; its tasks restart with generation {updated.generation}."
        )
    return redirect(updated)


def _stored_config(request: HttpRequest) -> tuple[dict[str, str], Connector | None]:
    name = request.POST.get("connector", "")
    if not name:
        return {}, None
    connector = get_object_or_404(Connector, name=name)
    return dict(connector.config), connector


@login_required
@require_POST
def config_validate(request: HttpRequest) -> HttpResponse:
    """Per-field errors of the form as it is now, for the live re-validation while typing."""
    stored, connector = _stored_config(request)
    editor = ConfigEditor.from_post(request.POST, stored).check()
    name_errors: list[str] = []
    if connector is None and "name" in request.POST and not request.POST["name"].strip():
        name_errors.append("A name is required")
    if connector is None and request.POST.get("name", "").strip():
        name = request.POST["name"].strip()
        try:
            validate_name(name)
        except actions.InvalidName as exc:
            name_errors.append(str(exc))
        if Connector.objects.filter(name=name).exists():
            name_errors.append(f"Connector {name} already exists")
    return render(
        request,
        "connectors/_validation.html",
        {"editor": editor, "name_errors": name_errors, "show_name": connector is None and "name" in request.POST},
    )


@login_required
@require_POST
def connection_test(request: HttpRequest) -> HttpResponse:
    stored, _ = _stored_config(request)
    editor = ConfigEditor.from_post(request.POST, stored)
    config = keep_hidden_secrets(editor.values, stored)
    validation = validate_config(config)
    if editor.parse_failed or not validation.ok:
        return render(request, "connectors/_connection_results.html", {"invalid": True})
    return render(request, "connectors/_connection_results.html", {"results": check_connection(validation.config)})


# --- lifecycle actions --------------------------------------------------------


@dataclass(frozen=True)
class ConnectorAction:
    verb: str
    done: str
    run: Callable[[HttpRequest, str], Any]
    confirm: bool
    explanation: str


ACTIONS: dict[str, ConnectorAction] = {
    "pause": ConnectorAction(
        "Pause",
        "paused",
        lambda r, n: actions.pause_connector(n),
        False,
        "Tasks keep their partitions and stop reading.",
    ),
    "resume": ConnectorAction(
        "Resume",
        "resumed",
        lambda r, n: actions.resume_connector(n),
        False,
        "Tasks read again from the ledger's offsets.",
    ),
    "restart": ConnectorAction(
        "Restart",
        "restarted",
        lambda r, n: actions.restart_connector(n, include_tasks=True),
        False,
        "The coordinator and every task restart; a commit in flight is abandoned and its records are read again.",
    ),
    "stop": ConnectorAction(
        "Stop",
        "stopped",
        lambda r, n: actions.stop_connector(n),
        True,
        "Tasks are shut down and release their partitions. The running coordinator is fenced: a commit in "
        "flight is abandoned and its records will be read again on resume. Offsets can be edited while stopped.",
    ),
    "delete": ConnectorAction(
        "Delete",
        "deleted",
        lambda r, n: actions.delete_connector(n, delete_ledger=r.POST.get("delete_ledger") == "on"),
        True,
        "The connector and its tasks are removed. Its tables stay. Its commit history stays unless you tick "
        "the box below.",
    ),
}


def _next_url(request: HttpRequest, fallback: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return fallback


@login_required
@require_http_methods(["GET", "POST"])
def connector_action(request: HttpRequest, name: str, action: str) -> HttpResponse:
    spec = ACTIONS.get(action)
    if spec is None:
        raise Http404(f"no action {action}")
    connector = get_object_or_404(Connector, name=name)
    if request.method == "GET":
        return render(
            request,
            "connectors/confirm.html",
            {"connector": connector, "action": action, "spec": spec, "next": _next_url(request, "")},
        )
    try:
        spec.run(request, name)
    except actions.ActionError as exc:
        messages.error(request, f"Could not {action} {name}: {exc}")
        return HttpResponseRedirect(_next_url(request, connector.get_absolute_url()))
    messages.success(request, f"Connector {name} {spec.done}.")
    fallback = reverse("connector-list") if action == "delete" else connector.get_absolute_url()
    if action == "delete":
        return redirect(fallback)
    return HttpResponseRedirect(_next_url(request, fallback))


@login_required
@require_POST
def task_restart(request: HttpRequest, name: str, index: int) -> HttpResponse:
    try:
        actions.restart_task(name, index)
    except actions.ConnectorNotFound as exc:
        raise Http404(str(exc)) from None
    messages.success(request, f"Task {index} of {name} is restarting.")
    return redirect("connector-detail", name)


# --- commit history -------------------------------------------------------------


@login_required
@require_GET
def commit_history(request: HttpRequest, name: str) -> HttpResponse:
    connector = Connector.objects.filter(name=name).first()
    page = history_page(name, request.GET.get("page"))
    if connector is None and not page.paginator.count:
        raise Http404(f"no connector or commit history named {name}")
    return render(
        request,
        "connectors/history.html",
        {"name": name, "connector": connector, "page": page, "series": chart_series(name)},
    )


@login_required
@require_GET
def commit_detail(request: HttpRequest, name: str, commit_id: uuid.UUID) -> HttpResponse:
    commit: Commit = get_object_or_404(ledger(name), commit_id=commit_id)
    partitions, unmatched = files_by_partition(commit)
    return render(
        request,
        "connectors/commit.html",
        {
            "name": name,
            "connector": Connector.objects.filter(name=name).first(),
            "commit": commit,
            "partitions": partitions,
            "unmatched_files": unmatched,
        },
    )
