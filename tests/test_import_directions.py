"""Imports point one way: the control plane (connectors) <- the runtime (workers) <- the sinks.

The runtime finds a sink's modules by the import paths its plugin names
(``workers.sink``), so no module of workers/ imports sinks; the control plane
runs no runtime code, but for its entry points (Celery tasks, management
commands); a sink's table format's libraries are the sink's alone; and a sink
package imports no other sink. Every import counts, at module level or
inside a function.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The control plane's modules that run the runtime: Celery's tasks and the management commands.
ENTRY_POINTS = ("connectors/tasks.py", "connectors/management/commands/")
# The registry: the one line per sink the control plane reads its plugins from.
REGISTRY = "connectors/config/plugins.py"
FORMAT_LIBRARIES = ("pyiceberg", "hudi")


def imports(path: Path, root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """(line, module) of every import in ``path``; relative imports resolved against its package."""
    package = path.relative_to(root).parent.parts
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1])
                yield node.lineno, f"{base}.{node.module}" if node.module else base
            elif node.module:
                yield node.lineno, node.module


def modules_of(top: str, root: Path = ROOT) -> list[Path]:
    return sorted((root / top).rglob("*.py"))


def violations(top: str, forbidden: tuple[str, ...], allowed: tuple[str, ...] = (), root: Path = ROOT) -> list[str]:
    found = []
    for path in modules_of(top, root):
        name = path.relative_to(root).as_posix()
        if name.startswith(allowed):
            continue
        for line, module in imports(path, root):
            if module.split(".")[0] in forbidden or module.startswith(tuple(f"{f}." for f in forbidden)):
                found.append(f"{name}:{line} imports {module}")
    return found


def test_the_runtime_imports_no_sink_and_no_table_format() -> None:
    assert violations("workers", ("sinks", *FORMAT_LIBRARIES)) == []


def test_the_control_plane_runs_the_runtime_only_from_its_entry_points() -> None:
    assert violations("connectors", ("workers",), allowed=ENTRY_POINTS) == []


def test_the_control_plane_knows_the_sinks_by_the_registry_alone() -> None:
    assert violations("connectors", ("sinks", *FORMAT_LIBRARIES), allowed=(*ENTRY_POINTS, REGISTRY)) == []


@pytest.mark.parametrize("sink", sorted(p.parent.name for p in (ROOT / "sinks").glob("*/plugin.py")))
def test_a_sink_imports_no_other_sink(sink: str) -> None:
    others = tuple(f"sinks.{p.parent.name}" for p in (ROOT / "sinks").glob("*/plugin.py") if p.parent.name != sink)
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in modules_of(f"sinks/{sink}")
        for line, module in imports(path)
        if module.startswith(others)
    ]
    assert found == []


def test_every_sink_package_has_the_same_shape() -> None:
    # What docs/writing-a-sink.md asks of a sink: its definitions, its settings and its runtime.
    for plugin in (ROOT / "sinks").glob("*/plugin.py"):
        package = plugin.parent
        assert {"__init__.py", "plugin.py", "settings.py", "runtime.py"} <= {p.name for p in package.iterdir()}, package


def test_the_scan_sees_every_kind_of_import(tmp_path: Path) -> None:
    # (The rules above would pass vacuously on a scan that missed some.)
    module = tmp_path / "workers" / "probe.py"
    module.parent.mkdir()
    module.write_text("import a.b\nfrom c import d\nfrom . import e\nfrom .f import g\ndef h():\n    import sinks.x\n")
    assert [m for _, m in imports(module, tmp_path)] == ["a.b", "c", "workers", "workers.f", "sinks.x"]
    assert violations("workers", ("sinks",), root=tmp_path) == ["workers/probe.py:6 imports sinks.x"]


@pytest.mark.parametrize(
    "module", ["workers.runtime", "sinks.files.runtime", "sinks.hudi.runtime", "sinks.mirror.runtime"]
)
def test_the_runtime_and_the_other_sinks_load_no_iceberg_library(module: str) -> None:
    # What a worker process loads for a files, Hudi or mirror connector (pyiceberg costs a second and
    # ~100 MB a process): only the Iceberg sink's own runtime brings it.
    script = "import django, importlib, sys; django.setup(); importlib.import_module(sys.argv[1]); "
    script += "print('pyiceberg' in sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", script, module],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "sinkadmin.settings"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "False", loaded.stderr
