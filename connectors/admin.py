"""The power-user view. Writes go through connectors.actions, like everywhere else."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from connectors import actions
from connectors.config import validate_config
from connectors.config.secrets import hidden_config
from connectors.models import Commit, CommitPartition, Connector, ConnectorTask, MaintenanceRun, PartitionOffset


class ConnectorAdminForm(forms.ModelForm):
    config = forms.JSONField(
        widget=forms.Textarea(attrs={"rows": 18, "cols": 90, "style": "font-family: monospace"}),
        help_text="Flat JSON object of Kafka Connect style keys and string values.",
    )

    class Meta:
        model = Connector
        fields = ["name", "config", "desired_state"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            # Shown with its secrets hidden; they come back hidden and keep their stored values.
            self.initial["config"] = hidden_config(self.instance.config)

    def clean_config(self) -> dict[str, str]:
        config = self.cleaned_data["config"]
        if not isinstance(config, dict):
            raise forms.ValidationError("The config must be a JSON object of keys to values.")
        if self.instance.pk:
            config = actions.lifecycle.keep_hidden_secrets(config, self.instance.config)
        validation = validate_config(config)
        if not validation.ok:
            raise forms.ValidationError(
                [f"{key}: {message}" for key, msgs in sorted(validation.errors.items()) for message in msgs]
            )
        return validation.config


class ConnectorTaskInline(admin.TabularInline):
    model = ConnectorTask
    extra = 0
    can_delete = False
    fields = readonly_fields = (
        "task_index",
        "state",
        "worker_id",
        "assigned_partitions",
        "heartbeat_at",
        "error_message",
    )

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Connector)
class ConnectorAdmin(admin.ModelAdmin):
    form = ConnectorAdminForm
    list_display = [
        "name",
        "plugin",
        "destinations",
        "desired_state",
        "failed",
        "coordinator_epoch",
        "commits_link",
        "updated_at",
    ]
    list_filter = ["desired_state", ("failed_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "config"]
    readonly_fields = [
        "coordinator_epoch",
        "generation",
        "source_warnings",
        "failure_message",
        "failed_at",
        "created_at",
        "updated_at",
        "commits_link",
    ]
    inlines = [ConnectorTaskInline]
    actions = ["pause", "resume", "stop", "restart"]

    @admin.display(description="class")
    def plugin(self, obj: Connector) -> str:
        return obj.connector_class

    @admin.display(description="writes to")
    def destinations(self, obj: Connector) -> str:
        return ", ".join(obj.destinations)

    @admin.display(boolean=True)
    def failed(self, obj: Connector) -> bool:
        return obj.failed_at is not None

    @admin.display(description="commits")
    def commits_link(self, obj: Connector) -> str:
        url = reverse("admin:connectors_commit_changelist") + f"?connector__id__exact={obj.pk}"
        return format_html('<a href="{}">{} commits</a>', url, obj.commits.count())

    def save_model(self, request: HttpRequest, obj: Connector, form: forms.ModelForm, change: bool) -> None:
        # Route the write through the action functions so the admin behaves
        # exactly like the API (validation, fencing, generation bumps).
        desired = form.cleaned_data["desired_state"]
        if change:
            original_name = Connector.objects.values_list("name", flat=True).get(pk=obj.pk)
            actions.update_config(original_name, form.cleaned_data["config"])
            {"RUNNING": actions.resume_connector, "PAUSED": actions.pause_connector, "STOPPED": actions.stop_connector}[
                desired
            ](original_name)
            obj.refresh_from_db()
        else:
            created = actions.create_connector(obj.name, form.cleaned_data["config"], initial_state=desired)
            obj.pk = created.pk
            obj.refresh_from_db()

    def delete_model(self, request: HttpRequest, obj: Connector) -> None:
        actions.delete_connector(obj.name)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Connector]) -> None:
        for connector in queryset:
            actions.delete_connector(connector.name)

    def _bulk(self, request: HttpRequest, queryset: QuerySet[Connector], action: Any, verb: str) -> None:
        for connector in queryset:
            action(connector.name)
        self.message_user(request, f"{verb} {queryset.count()} connector(s).", messages.SUCCESS)

    @admin.action(description="Pause selected connectors")
    def pause(self, request: HttpRequest, queryset: QuerySet[Connector]) -> None:
        self._bulk(request, queryset, actions.pause_connector, "Paused")

    @admin.action(description="Resume selected connectors")
    def resume(self, request: HttpRequest, queryset: QuerySet[Connector]) -> None:
        self._bulk(request, queryset, actions.resume_connector, "Resumed")

    @admin.action(description="Stop selected connectors")
    def stop(self, request: HttpRequest, queryset: QuerySet[Connector]) -> None:
        self._bulk(request, queryset, actions.stop_connector, "Stopped")

    @admin.action(description="Restart selected connectors and their tasks")
    def restart(self, request: HttpRequest, queryset: QuerySet[Connector]) -> None:
        self._bulk(request, queryset, lambda name: actions.restart_connector(name, include_tasks=True), "Restarted")


class ReadOnlyAdmin(admin.ModelAdmin):
    """The ledger and live state are written by the runtime only."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ConnectorTask)
class ConnectorTaskAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "state", "worker_id", "partitions", "heartbeat_at", "failure_count"]
    list_filter = ["state", "connector"]
    search_fields = ["connector__name", "worker_id", "error_message"]

    @admin.display(description="partitions")
    def partitions(self, obj: ConnectorTask) -> int:
        return len(obj.assigned_partitions)


class CommitPartitionInline(admin.TabularInline):
    model = CommitPartition
    extra = 0
    can_delete = False
    fields = readonly_fields = ("topic", "partition", "start_offset", "end_offset", "records", "dead_lettered")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class LedgerRowAdmin(ReadOnlyAdmin):
    """A row of a connector's history (a commit, a maintenance run): kept when the connector is deleted."""

    @admin.display(description="connector", ordering="connector_name")
    def connector_link(self, obj: Commit | MaintenanceRun) -> str:
        if obj.connector_id is None:
            return f"{obj.connector_name} (deleted)"
        url = reverse("admin:connectors_connector_change", args=[obj.connector_id])
        return format_html('<a href="{}">{}</a>', url, obj.connector_name)

    @admin.display(description="duration (s)")
    def duration(self, obj: Commit | MaintenanceRun) -> str:
        seconds = obj.duration_seconds
        return "" if seconds is None else f"{seconds:.1f}"


@admin.register(Commit)
class CommitAdmin(LedgerRowAdmin):
    list_display = [
        "commit_id",
        "connector_link",
        "state",
        "started_at",
        "duration",
        "records",
        "files_count",
        "complete",
        "ended_by",
    ]
    list_filter = ["state", "complete", "ended_by", "connector"]
    search_fields = ["commit_id", "connector_name"]
    date_hierarchy = "started_at"
    inlines = [CommitPartitionInline]
    readonly_fields = ["pretty_files", "pretty_snapshots"]
    exclude = ["files", "snapshot_ids"]

    @admin.display(description="files")
    def pretty_files(self, obj: Commit) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.files, indent=2))

    @admin.display(description="snapshot ids")
    def pretty_snapshots(self, obj: Commit) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.snapshot_ids, indent=2))


@admin.register(PartitionOffset)
class PartitionOffsetAdmin(ReadOnlyAdmin):
    list_display = ["connector", "topic", "partition", "committed_offset", "next_offset", "last_commit", "updated_at"]
    list_filter = ["connector"]
    search_fields = ["connector__name", "topic"]


@admin.register(MaintenanceRun)
class MaintenanceRunAdmin(LedgerRowAdmin):
    list_display = [
        "started_at",
        "connector_link",
        "table_name",
        "outcome",
        "duration",
        "rewritten_files",
        "added_files",
        "expired_snapshots",
        "expired_files",
        "orphan_files",
    ]
    list_filter = ["outcome", "connector"]
    search_fields = ["connector_name", "table_name"]
    date_hierarchy = "started_at"
