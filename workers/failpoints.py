"""Named points where a test can make a process die, to prove recovery.

``SINKADMIN_FAILPOINTS=coordinator.after_prepare=kill,participant.before_status=kill``
makes the process SIGKILL itself on reaching those points (``hang`` blocks
forever, ``stop`` freezes it until SIGCONT, ``delay:SECONDS`` sleeps the
first time the point is reached and goes on: a slow moment, not a death).
Unset in production, each point costs one dict lookup.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

_ACTIVE: dict[str, str] = {}
_DELAYED: set[str] = set()
for _item in filter(None, os.environ.get("SINKADMIN_FAILPOINTS", "").split(",")):
    _name, _, _action = _item.partition("=")
    _ACTIVE[_name.strip()] = _action.strip() or "kill"


def failpoint_set(name: str) -> bool:
    """Whether the point ``name`` is set (for work only a test's failpoint needs)."""
    return name in _ACTIVE


def failpoint(name: str) -> None:
    action = _ACTIVE.get(name)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "hang":
        signal.pause()
    elif action == "stop":
        # Frozen until the test sends SIGCONT: a zombie in the making.
        os.kill(os.getpid(), signal.SIGSTOP)
    elif action is not None and action.startswith("delay:") and name not in _DELAYED:
        _DELAYED.add(name)
        time.sleep(float(action.removeprefix("delay:")))


@contextlib.contextmanager
def failpoint_while(name: str, after_s: float = 1.0, when: Callable[[], bool] | None = None) -> Iterator[None]:
    """The point ``name``, reached by a thread of its own while the block waits on another process (Spark
    running a job): ``after_s`` into the block, or at its end if it ends sooner (the other process has done
    the work, and this one has not yet taken in its answer: a fast job must not let the point pass unreached);
    or, given ``when``, as soon as ``when()`` holds (polled), a moment the block's own progress marks.
    Nothing when the point is not set."""
    if name not in _ACTIVE:
        yield
        return
    done = threading.Event()
    reached = threading.Lock()

    def reach_once() -> None:
        if reached.acquire(blocking=False):
            failpoint(name)

    def reach() -> None:
        if when is None:
            if not done.wait(after_s):
                reach_once()
            return
        while not done.wait(0.02):
            if when():
                failpoint(name)
                return

    thread = threading.Thread(target=reach, name=f"failpoint {name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        if when is None:
            reach_once()
