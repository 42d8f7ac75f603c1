"""The Java programs of tests/integration/java that run the Kafka Connect plugins' own code on what the tests
give them (var/jars/connect-plugins: jvm/connect-plugins/pom.xml): the oracles our transforms and decoder are
compared with."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
JARS = ROOT / "var" / "jars" / "connect-plugins"


def run_oracle(program: str, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each job through ``program`` (a file of tests/integration/java), which answers each line of JSON with one."""
    done = subprocess.run(
        ["java", "-cp", f"{JARS}/*", str(ROOT / "tests" / "integration" / "java" / program)],
        input="".join(json.dumps(job) + "\n" for job in jobs),
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # (Lines end at "\n" only: Jackson writes U+2028 and U+0085 as they are, which splitlines() would break at.)
    return [json.loads(line) for line in done.stdout.split("\n") if line]
