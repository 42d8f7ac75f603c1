"""A mirror task's objects, without servers (its clients are made, and never reach a cluster)."""

from __future__ import annotations

import gc
import weakref

from connectors.config import SinkConfig
from sinks.mirror.engine import MirrorTask


def test_a_task_and_its_clients_are_freed_with_its_last_reference_not_by_a_garbage_collection() -> None:
    # A client holds its callbacks: one holding the task made a reference cycle, so an ended task's clients
    # kept connecting to their cluster until a full collection, minutes later in an idle worker.
    config = SinkConfig.parse(
        {
            "connector.class": "mirror",
            "source.cluster.bootstrap.servers": "127.0.0.1:1",
            "target.cluster.bootstrap.servers": "127.0.0.1:2",
            "topics": "orders",
        }
    )
    gc.collect()
    gc.disable()
    try:
        task = MirrorTask("freed", 0, 1, config.settings)
        task.close()
        freed = weakref.ref(task)
        del task
        assert freed() is None
    finally:
        gc.enable()
