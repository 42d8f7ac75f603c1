"""The one write path for connectors, the commit ledger and live state.

Views, the admin, the REST API, management commands and workers call these
functions; nothing else writes those tables.
"""

from connectors.actions.errors import (
    ActionError,
    ConnectorExists,
    ConnectorNotFound,
    InvalidConfig,
    InvalidName,
    LedgerConflict,
    NotStopped,
    StaleEpoch,
)
from connectors.actions.ledger import (
    PartitionRange,
    abort_commit,
    committed_offsets,
    mark_committed,
    pending_commit,
    prepare_commit,
    publish_coordinator_phase,
    restore_commits,
    seed_offsets,
    skip_offsets,
    take_coordinator_lease,
)
from connectors.actions.lifecycle import (
    alter_offsets,
    create_connector,
    delete_connector,
    fail_connector,
    get_connector,
    patch_config,
    pause_connector,
    reset_offsets,
    restart_connector,
    restart_task,
    resume_connector,
    stop_connector,
    update_config,
)

__all__ = [
    "ActionError",
    "ConnectorExists",
    "ConnectorNotFound",
    "InvalidConfig",
    "InvalidName",
    "LedgerConflict",
    "NotStopped",
    "PartitionRange",
    "StaleEpoch",
    "abort_commit",
    "alter_offsets",
    "committed_offsets",
    "create_connector",
    "delete_connector",
    "fail_connector",
    "get_connector",
    "mark_committed",
    "patch_config",
    "pause_connector",
    "pending_commit",
    "prepare_commit",
    "publish_coordinator_phase",
    "reset_offsets",
    "restart_connector",
    "restart_task",
    "restore_commits",
    "resume_connector",
    "seed_offsets",
    "skip_offsets",
    "stop_connector",
    "take_coordinator_lease",
    "update_config",
]
