"""Failpoints kill the process where a crash test sets them, and nowhere else."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

BLOCK = """
import time
from workers.failpoints import failpoint_while
with failpoint_while("spark.job", after_s={after_s}):
    time.sleep({takes_s})
print("answer taken in", flush=True)
"""


def run_block(failpoints: str, after_s: float, takes_s: float) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "SINKADMIN_FAILPOINTS": failpoints}
    script = BLOCK.format(after_s=after_s, takes_s=takes_s)
    return subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("after_s", "takes_s"),
    [(0.05, 2.0), (5.0, 0.0)],
    ids=["while-the-block-waits", "a-block-faster-than-the-point"],
)
def test_a_timed_point_kills_the_process_before_it_takes_in_the_blocks_answer(after_s: float, takes_s: float) -> None:
    finished = run_block("spark.job=kill", after_s, takes_s)
    assert finished.returncode == -9
    assert "answer taken in" not in finished.stdout


def test_a_point_not_set_lets_the_block_finish() -> None:
    finished = run_block("spark.other=kill", 0.0, 0.1)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout == "answer taken in\n"
