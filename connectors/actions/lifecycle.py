"""Connector lifecycle with Kafka Connect semantics: create, configure, pause,
resume, stop, restart, delete, and offset changes (KIP-875)."""

from __future__ import annotations

import importlib
import unicodedata
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from connectors.actions import ledger
from connectors.actions.errors import (
    CommitNotAbandonable,
    CommitNotFound,
    ConnectorExists,
    ConnectorNotFound,
    InvalidConfig,
    InvalidName,
    NotStopped,
    NotTranslatable,
)
from connectors.actions.group_offsets import check_partitions_exist, sync_group
from connectors.config import SinkConfig, resolve_plugin, validate_config
from connectors.config.secrets import keep_hidden_secrets, storable
from connectors.models import (
    Commit,
    CommitState,
    Connector,
    ConnectorTask,
    CoordinatorStatus,
    DesiredState,
    PartitionOffset,
    TaskState,
)
from sinkadmin.celery import supervise_soon

# Why the other tasks of a failed connector do not run: shown as their UNASSIGNED status's trace.
NOT_RUNNING_FAILED = "not running: the connector failed; a restart, or a new config, starts it again"


def get_connector(name: str) -> Connector:
    try:
        return Connector.objects.get(name=name)
    except Connector.DoesNotExist:
        raise ConnectorNotFound(name) from None


def validate_name(name: str) -> None:
    if not name or not name.strip():
        raise InvalidName("Connector name is empty")
    if len(name) > 255:
        raise InvalidName("Connector name is longer than 255 characters")
    if "/" in name or any(unicodedata.category(c) == "Cc" for c in name):
        raise InvalidName(f"Connector name {name!r} may not contain '/' or control characters")


def _validated(config: Mapping[str, Any]) -> dict[str, str]:
    validation = validate_config(config)
    if not validation.ok:
        raise InvalidConfig(validation)
    return validation.config


def create_connector(name: str, config: Mapping[str, Any], initial_state: str = DesiredState.RUNNING) -> Connector:
    validate_name(name)
    if "name" in config and config["name"] != name:
        raise InvalidName(f"Connector name configuration ({config['name']}) doesn't match connector name ({name})")
    if initial_state not in DesiredState.values:
        raise InvalidName(f"initial_state must be one of {', '.join(DesiredState.values)}")
    clean = _validated({k: v for k, v in config.items() if k != "name"})
    try:
        with transaction.atomic():
            # (Every change of what should run asks the supervisor to act once it is committed.)
            transaction.on_commit(supervise_soon)
            connector = Connector.objects.create(name=name, config=clean, desired_state=initial_state)
            plugin = resolve_plugin(clean["connector.class"])
            if plugin is not None and plugin.coordinated:
                # (Its offsets are the ledger's: a deleted connector's under this name are where it resumes.)
                ledger.adopt_ledger(connector)
            return connector
    except IntegrityError:
        raise ConnectorExists(name) from None


def update_config(name: str, config: Mapping[str, Any]) -> tuple[Connector, bool]:
    """PUT semantics: create the connector or replace its whole config. Returns (connector, created)."""
    validate_name(name)
    if "name" in config and config["name"] != name:
        raise InvalidName(f"Connector name configuration ({config['name']}) doesn't match connector name ({name})")
    with transaction.atomic():
        connector = Connector.objects.select_for_update().filter(name=name).first()
        if connector is None:
            return create_connector(name, config), True
        clean = _validated(keep_hidden_secrets({k: v for k, v in config.items() if k != "name"}, connector.config))
        if clean != connector.config:
            connector.config = clean
            # A new config restarts the tasks (new generation) and fences the
            # running coordinator (new epoch comes with the restart).
            connector.generation = F("generation") + 1
            connector.coordinator_epoch = F("coordinator_epoch") + 1
            connector.save(update_fields=["config", "generation", "coordinator_epoch", "updated_at"])
            if connector.failed_at is not None:
                # As Kafka Connect restarts a connector and its tasks on a new
                # config: a failure is the old config's, and the new one runs
                # (its target state, paused or stopped, is kept).
                _clear_failure(connector, ConnectorTask.objects.filter(connector=connector), new_epoch=False)
            connector.refresh_from_db()
            transaction.on_commit(supervise_soon)
    return connector, False


def patch_config(name: str, changes: Mapping[str, Any]) -> Connector:
    """PATCH semantics: keys with null are removed, others set."""
    connector = get_connector(name)
    merged: dict[str, Any] = dict(connector.config)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return update_config(name, merged)[0]


def _set_desired(name: str, state: DesiredState, *, fence: bool) -> Connector:
    with transaction.atomic():
        connector = Connector.objects.select_for_update().filter(name=name).first()
        if connector is None:
            raise ConnectorNotFound(name)
        fields = ["desired_state", "updated_at"]
        connector.desired_state = state
        if fence:
            connector.coordinator_epoch = F("coordinator_epoch") + 1
            connector.generation = F("generation") + 1
            fields += ["coordinator_epoch", "generation"]
        connector.save(update_fields=fields)
        connector.refresh_from_db()
        transaction.on_commit(supervise_soon)
    return connector


def pause_connector(name: str) -> Connector:
    # Paused tasks keep their assignment; nothing is fenced.
    return _set_desired(name, DesiredState.PAUSED, fence=False)


def resume_connector(name: str) -> Connector:
    return _set_desired(name, DesiredState.RUNNING, fence=False)


def stop_connector(name: str) -> Connector:
    # Fence the running coordinator so that nothing it has in flight can be
    # prepared after the stop (offsets may be edited while stopped).
    return _set_desired(name, DesiredState.STOPPED, fence=True)


@dataclass(frozen=True)
class Restarted:
    """What a restart restarted: the connector (its coordinator) or not, and which tasks."""

    connector: Connector
    restarted_connector: bool
    restarted_tasks: frozenset[int]


def _clear_failure(connector: Connector, tasks: QuerySet[ConnectorTask], *, new_epoch: bool = True) -> list[int]:
    """Forget the connector's failure and restart it and ``tasks`` (a new coordinator epoch, unless the
    caller gave it one; the tasks RESTARTING at a new epoch, their errors cleared); the indexes of the
    tasks restarted. Called inside the caller's transaction, with the connector's row locked."""
    Connector.objects.filter(pk=connector.pk).update(
        failure_message="",
        failure_trace="",
        failed_at=None,
        updated_at=timezone.now(),
        **({"coordinator_epoch": F("coordinator_epoch") + 1} if new_epoch else {}),
    )
    # A restart starts the count of crashes afresh (a connector failed by them would fail again at once).
    CoordinatorStatus.objects.filter(connector=connector).update(crashes=0, crashes_since=None, failed_at=None)
    ConnectorTask.objects.filter(connector=connector).update(crashes=0, crashes_since=None)
    # The tasks the failure stopped (``fail_connector``) are started again by the supervisor: its reason is past.
    ConnectorTask.objects.filter(connector=connector, unassigned_reason=NOT_RUNNING_FAILED).update(unassigned_reason="")
    indexes = sorted(tasks.values_list("task_index", flat=True))
    tasks.update(
        state=TaskState.RESTARTING,
        epoch=F("epoch") + 1,
        error_message="",
        error_trace="",
        failed_at=None,
        unassigned_reason="",
    )
    return indexes


def restart(name: str, *, include_tasks: bool = False, only_failed: bool = False) -> Restarted:
    """Kafka Connect's restart: the connector (with ``only_failed``, only if it FAILED), and with
    ``include_tasks`` its tasks (with ``only_failed``, the FAILED ones)."""
    with transaction.atomic():
        connector = Connector.objects.select_for_update().filter(name=name).first()
        if connector is None:
            raise ConnectorNotFound(name)
        restarted_connector = not only_failed or connector.failed_at is not None
        tasks = ConnectorTask.objects.none()
        if include_tasks:
            tasks = ConnectorTask.objects.filter(connector=connector)
            if only_failed:
                tasks = tasks.filter(state=TaskState.FAILED)
        restarted_tasks: list[int] = []
        if restarted_connector:
            restarted_tasks = _clear_failure(connector, tasks)
        elif include_tasks:
            restarted_tasks = sorted(tasks.values_list("task_index", flat=True))
            tasks.update(
                state=TaskState.RESTARTING, epoch=F("epoch") + 1, error_message="", error_trace="", failed_at=None
            )
        connector.refresh_from_db()
        transaction.on_commit(supervise_soon)
    return Restarted(connector, restarted_connector, frozenset(restarted_tasks))


def restart_connector(name: str, *, include_tasks: bool = False, only_failed: bool = False) -> Connector:
    return restart(name, include_tasks=include_tasks, only_failed=only_failed).connector


def restart_task(name: str, task_index: int) -> ConnectorTask:
    connector = get_connector(name)
    with transaction.atomic():
        # (The task's row only, not its connector's too through the model's ordering: runtime.task_failed.)
        task = (
            ConnectorTask.objects.select_for_update(of=("self",))
            .filter(connector=connector, task_index=task_index)
            .first()
        )
        if task is None:
            raise ConnectorNotFound(f"{name}/tasks/{task_index}")
        task.state = TaskState.RESTARTING
        task.epoch = F("epoch") + 1
        task.error_message = ""
        task.error_trace = ""
        task.failed_at = None
        task.crashes, task.crashes_since = 0, None
        task.save(
            update_fields=["state", "epoch", "error_message", "error_trace", "failed_at", "crashes", "crashes_since"]
        )
        task.refresh_from_db()
        transaction.on_commit(supervise_soon)
    return task


def delete_connector(name: str, *, delete_ledger: bool = False) -> None:
    """Remove the connector; its tables stay, and so does its ledger unless asked: a connector created again under
    its name resumes from it (``ledger.adopt_ledger``)."""
    with transaction.atomic():
        connector = Connector.objects.select_for_update().filter(name=name).first()
        if connector is None:
            raise ConnectorNotFound(name)
        if delete_ledger:
            Commit.objects.filter(connector=connector).delete()
        connector.delete()
        transaction.on_commit(supervise_soon)


def fail_connector(connector_id: int, message: str, trace: str = "", *, task_index: int | None = None) -> None:
    """Mark the connector FAILED with a readable reason; it stays failed until restarted (or given a new
    config). Nothing of it runs meanwhile: its coordinator stops at its next heartbeat, and so do its
    tasks, whose epochs move on. ``task_index``: the task whose write failed it (a record it cannot
    convert, with errors.tolerance=none), which goes FAILED with the reason, as in Kafka Connect; the
    others are UNASSIGNED, saying why. A task that had already FAILED keeps its own trace."""
    now = timezone.now()
    message, trace = storable(message)[:10000], storable(trace)
    shown = message
    if task_index is not None and not message.startswith(f"task {task_index}"):
        shown = f"task {task_index}: {message}"
    with transaction.atomic():
        Connector.objects.filter(pk=connector_id).update(
            failure_message=shown[:10000],
            failure_trace=trace,
            failed_at=now,
            first_failed_at=Coalesce(F("first_failed_at"), Value(now)),
            failure_count=F("failure_count") + 1,
        )
        tasks = ConnectorTask.objects.filter(connector_id=connector_id).exclude(
            state__in=[TaskState.FAILED, TaskState.STOPPED]
        )
        if task_index is not None:
            tasks.filter(task_index=task_index).update(
                state=TaskState.FAILED,
                error_message=message,
                error_trace=trace,
                failed_at=now,
                first_failed_at=Coalesce(F("first_failed_at"), Value(now)),
                failure_count=F("failure_count") + 1,
                epoch=F("epoch") + 1,
                requested_at=None,
            )
        tasks.exclude(task_index=task_index if task_index is not None else -1).update(
            state=TaskState.UNASSIGNED, unassigned_reason=NOT_RUNNING_FAILED, epoch=F("epoch") + 1, requested_at=None
        )


def _require_stopped(connector: Connector) -> None:
    if connector.desired_state != DesiredState.STOPPED:
        raise NotStopped(
            f"Connectors must be in the STOPPED state before their offsets can be modified. "
            f"This can be done for the specified connector by issuing a 'PUT' request to the "
            f"'/connectors/{connector.name}/stop' endpoint"
        )


def _own_offsets(connector: Connector) -> Any:
    """The module that keeps the connector's offsets outside the ledger (``Plugin.offsets``), if any."""
    plugin = resolve_plugin(connector.connector_class)
    return importlib.import_module(plugin.offsets) if plugin is not None and plugin.offsets else None


def stored_offsets(connector: Connector) -> dict[tuple[str, int], int]:
    """Each partition's committed offset (every record before it readable in the sink): the ledger's, or
    those of a sink that keeps its own (the mirror's target group, where its tasks resume)."""
    own = _own_offsets(connector)
    if own is None:
        return ledger.committed_offsets(connector.pk)
    return dict(sorted(own.read_offsets(connector.name, SinkConfig.parse(connector.config)).items()))


def translated_offsets(name: str, group: str) -> list[Any]:
    """Consumer group ``group``'s offsets for the connector's target cluster, as its latest checkpoints say
    (a Kafka mirror's: ``Plugin.offsets``' ``translated_offsets``), each with its topic and partition there,
    the offset to resume at, and the group's offset on the source."""
    connector = get_connector(name)
    own = _own_offsets(connector)
    translate = getattr(own, "translated_offsets", None) if own is not None else None
    if translate is None:
        raise NotTranslatable(
            f"Connector {name} does not translate consumer groups' offsets: only a Kafka mirror does, from its "
            "checkpoints"
        )
    return list(translate(name, SinkConfig.parse(connector.config), group))


def alter_offsets(name: str, offsets: Iterable[tuple[str, int, int | None]]) -> Connector:
    """Set (or, with None, forget) the next offset of partitions; the next commit starts there."""
    connector = get_connector(name)
    _require_stopped(connector)
    offsets = list(offsets)
    own = _own_offsets(connector)
    if own is not None:
        # Where the sink's tasks resume; the ledger below follows it.
        own.alter_offsets(name, SinkConfig.parse(connector.config), offsets)
    else:
        check_partitions_exist(connector, [(topic, partition) for topic, partition, o in offsets if o is not None])
    with transaction.atomic():
        for topic, partition, offset in offsets:
            if offset is None:
                PartitionOffset.objects.filter(connector=connector, topic=topic, partition=partition).delete()
            else:
                PartitionOffset.objects.update_or_create(
                    connector=connector,
                    topic=topic,
                    partition=partition,
                    defaults={"next_offset": offset, "committed_offset": offset, "last_commit": None},
                )
    if own is None:
        sync_group(connector)
    return connector


def abandon_commit(name: str, commit_id: uuid.UUID) -> Commit:
    """The way out of a prepared commit that cannot be applied (the coordinator crashes on it, naming why):
    give it up, and have its records written again by the next commit.

    Only while the connector is STOPPED and no coordinator beats for it: one
    applying the commit meanwhile would put into the sink what is then
    written again. And only if the sink holds none of it (a table that has
    it would have it twice): a commit that some table holds is finished by
    restarting the connector once the others are fixed.
    """
    connector = get_connector(name)
    if connector.desired_state != DesiredState.STOPPED:
        raise NotStopped(
            f"Connector {name} must be STOPPED before a commit can be abandoned (PUT /connectors/{name}/stop)"
        )
    commit = Commit.objects.filter(connector=connector, commit_id=commit_id).first()
    if commit is None:
        raise CommitNotFound(name, commit_id)
    if commit.state != CommitState.PREPARED:
        raise CommitNotAbandonable(f"commit {commit_id} is {commit.state}: only a prepared commit can be abandoned")
    cutoff = timezone.now() - timedelta(seconds=settings.HEARTBEAT_TIMEOUT_SECONDS)
    if CoordinatorStatus.objects.filter(connector=connector, heartbeat_at__gte=cutoff).exists():
        raise CommitNotAbandonable(
            f"a coordinator of {name} is still running (it may be applying the commit); try again once it has "
            f"stopped, within {settings.HEARTBEAT_TIMEOUT_SECONDS} s"
        )
    plugin = resolve_plugin(connector.connector_class)
    if plugin is None or not plugin.recoverable:
        raise CommitNotAbandonable(f"the {connector.connector_class} sink cannot say whether it holds the commit")
    runtime = importlib.import_module(plugin.runtime)
    try:
        held = _held_by_sink(runtime, name, SinkConfig.parse(connector.config), commit)
    except Exception as exc:
        raise CommitNotAbandonable(
            f"cannot tell whether the sink holds commit {commit_id}, so it is not abandoned: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if held is not None:
        raise CommitNotAbandonable(
            f"the sink already holds {held}: abandoning it would write its records twice; fix what its error names "
            "and restart the connector to finish it"
        )
    return ledger.abandon_commit(connector.pk, commit_id, f"by an operator, after: {_last_error(connector)}")


def _held_by_sink(runtime: Any, name: str, config: SinkConfig, commit: Commit) -> str | None:
    """What of a prepared commit the sink holds already, in words; None: nothing. A sink that applies a commit
    in parts (the files sink's moves) names the parts it holds (``runtime.commit_held``); the others are asked
    which commits they hold (``runtime.recovered_commits``: the tables holding it)."""
    commit_held = getattr(runtime, "commit_held", None)
    if commit_held is not None:
        parts = commit_held(name, config, list(commit.files), str(commit.commit_id))
        more = f" and {len(parts) - 1} more" if len(parts) > 1 else ""
        return f"part of commit {commit.commit_id} ({parts[0]}{more})" if parts else None
    held = [c for c in runtime.recovered_commits(name, config) if c.commit_id == commit.commit_id]
    return f"commit {commit.commit_id} ({', '.join(sorted(held[0].snapshot_ids))})" if held else None


def _last_error(connector: Connector) -> str:
    status = CoordinatorStatus.objects.filter(connector=connector).values_list("error_message", flat=True).first()
    return status or connector.failure_message or "no error recorded"


def reset_offsets(name: str) -> Connector:
    connector = get_connector(name)
    _require_stopped(connector)
    own = _own_offsets(connector)
    if own is not None:
        own.alter_offsets(name, SinkConfig.parse(connector.config), None)
    PartitionOffset.objects.filter(connector=connector).delete()
    if own is None:
        sync_group(connector)
    return connector
