"""Every registered sink's runtime module follows the protocols of workers.sink its plugin declares, and
declares every one it follows: the runtime never finds a capability by looking for a function."""

from __future__ import annotations

import importlib
import inspect

import pytest

from connectors.config import PLUGINS, Plugin
from workers import sink

# A capability, the functions of the runtime module its protocol asks for, and the protocol.
CAPABILITIES = {
    "coordinated": sink.CoordinatedSink,
    "maintained": sink.MaintainedSink,
    "recoverable": sink.RecoverableSink,
}


def functions_of(protocol: type) -> set[str]:
    return {name for name, member in vars(protocol).items() if inspect.isfunction(member) and not name.startswith("_")}


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.short_name)
def test_the_runtime_module_provides_what_the_plugin_declares_and_declares_what_it_provides(plugin: Plugin) -> None:
    runtime = importlib.import_module(plugin.runtime)
    provided = {name for name, member in vars(runtime).items() if callable(member)}
    for capability, protocol in CAPABILITIES.items():
        wanted = functions_of(protocol)
        if getattr(plugin, capability):
            assert wanted <= provided, f"{plugin.short_name} is {capability} but its runtime lacks {wanted - provided}"
        else:
            assert not wanted & provided, f"{plugin.short_name} provides {wanted & provided} without being {capability}"
    self_committing = functions_of(sink.SelfCommittingSink)
    if plugin.coordinated:
        assert not self_committing & provided
    else:
        assert self_committing <= provided
    if plugin.offsets:
        offsets = importlib.import_module(plugin.offsets)
        assert callable(offsets.read_offsets) and callable(offsets.alter_offsets)


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.short_name)
def test_the_functions_a_plugin_names_exist(plugin: Plugin) -> None:
    from connectors.config.definitions import resolve

    for path in (plugin.check, plugin.parse, plugin.probe, plugin.destinations, plugin.source):
        if path:
            assert callable(resolve(path)), path
