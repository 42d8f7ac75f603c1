from __future__ import annotations

from connectors.config import ConfigValidation


class ActionError(Exception):
    """Base of the errors an action reports to its caller; ``status`` is the HTTP code Connect uses."""

    status = 400


class ConnectorNotFound(ActionError):
    status = 404

    def __init__(self, name: str) -> None:
        super().__init__(f"Connector {name} not found")
        self.name = name


class ConnectorExists(ActionError):
    status = 409

    def __init__(self, name: str) -> None:
        super().__init__(f"Connector {name} already exists")


class InvalidName(ActionError):
    pass


class InvalidConfig(ActionError):
    def __init__(self, validation: ConfigValidation) -> None:
        super().__init__(validation.message())
        self.validation = validation


class NotStopped(ActionError):
    status = 400


class StaleEpoch(ActionError):
    """A coordinator whose epoch is no longer the connector's tried to write (a zombie)."""

    status = 409


class LedgerConflict(ActionError):
    """A write status does not continue the ledger's offsets for its partition."""

    status = 409


class CommitNotAbandonable(ActionError):
    """A commit that cannot be abandoned now: not prepared, still being applied, or already in the sink."""

    status = 409


class CommitNotFound(ActionError):
    status = 404

    def __init__(self, name: str, commit_id: object) -> None:
        super().__init__(f"Commit {commit_id} of connector {name} not found")


class NotTranslatable(ActionError):
    """Consumer groups' offsets asked of a connector that does not translate them (only a mirror does)."""

    status = 404
