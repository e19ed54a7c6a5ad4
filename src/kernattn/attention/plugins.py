"""Attention variants of your own, outside the package: plugins.

A plugin is a Python file or an importable module that registers one or more variants with the
decorator the built-ins use, its options dataclass declared beside it:

    @dataclass(frozen=True)
    class SigmoidOptions(VariantOptions):
        bias_init: float = -4.0

    @register("sigmoid", SigmoidOptions)
    class SigmoidAttention(KernelAttention): ...

It loads from any of three places, every process that loads params loading the same ones:
- `plugins:` in params.yaml (and in override files): paths relative to that file, or modules;
- KERNATTN_PLUGINS: paths or module names separated by `:`;
- an installed package's entry point in the group `kernattn.attention` (loaded on the first
  lookup of a variant name).
A plugin that fails to import, registers a name twice, or declares options the registry cannot
validate stops with one line naming the plugin and the fix (registry.PluginError). Each load is
recorded (registry.Plugin: the source, its file, the file's sha256) for config.json and MLflow.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from ..fetch import sha256_bytes
from . import registry
from .registry import Plugin, PluginError

ENV = "KERNATTN_PLUGINS"
ENTRY_POINT_GROUP = "kernattn.attention"
_done: dict[str, Plugin] = {}          # key (resolved file or module) -> its record
_entry_points_loaded = False


def _sha256(path: str) -> str:
    return sha256_bytes(Path(path).read_bytes())


def is_path(source: str) -> bool:
    return source.endswith(".py") or os.sep in source or "/" in source


def load(sources, base: str | os.PathLike | None = None) -> list[Plugin]:
    """Load each plugin of `sources` (paths relative to `base`, or module names) once; the
    plugins they are, in order."""
    return [load_one(str(s), base) for s in sources]


def load_env() -> list[Plugin]:
    """The plugins KERNATTN_PLUGINS names (paths relative to the current folder, or modules)."""
    return load([s for s in os.environ.get(ENV, "").split(":") if s.strip()])


def load_one(source: str, base: str | os.PathLike | None = None) -> Plugin:
    if is_path(source):
        path = Path(source) if Path(source).is_absolute() else Path(base or ".") / source
        path = path.resolve()
        if not path.is_file():
            raise PluginError(f"plugin {source}: no such file ({path}); paths in params.yaml `plugins:` are "
                              f"relative to the params file")
        key = str(path)
        if key not in _done:
            name = "kernattn_plugin_" + sha256_bytes(key.encode())[:12]
            spec = importlib.util.spec_from_file_location(name, path)
            _done[key] = _import(Plugin(source, key, _sha256(key)),
                                 lambda: _exec_file(name, spec))
        return _done[key]
    if source not in _done:
        found = importlib.util.find_spec(source) if _importable(source) else None
        if found is None or not found.origin:
            raise PluginError(f"plugin {source}: no such module (not a .py path either); install it or give "
                              f"its file's path")
        _done[source] = _import(Plugin(source, found.origin, _sha256(found.origin)),
                                lambda: importlib.import_module(source))
    return _done[source]


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _exec_file(name: str, spec) -> None:
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise


def _import(plugin: Plugin, run) -> Plugin:
    """Run the plugin's import with it as the registry's current plugin; any failure one line."""
    registry._loading.append(plugin)
    before = set(registry._PLUGINS)
    try:
        run()
    except PluginError:
        raise
    except Exception as exc:  # noqa: BLE001 -- whatever the plugin raises: one line naming it
        line = next((ln for ln in str(exc).strip().splitlines()), "")
        raise PluginError(f"plugin {plugin.source}: failed to import ({type(exc).__name__}: {line}); fix the "
                          f"plugin or remove it from params.yaml `plugins:` / {ENV}") from None
    finally:
        registry._loading.pop()
    added = set(registry._PLUGINS) - before
    if not added:
        raise PluginError(f"plugin {plugin.source}: registers no attention variant; decorate its class with "
                          f"@register(\"name\", ItsOptions) from kernattn.attention.registry")
    from .base import KernelAttention

    for name in sorted(added):
        module = registry._REGISTRY[name].module
        if not (isinstance(module, type) and issubclass(module, KernelAttention)):
            raise PluginError(f"plugin {plugin.source}: variant {name!r} registers {module!r}, which is not a "
                              f"kernattn.attention.base.KernelAttention subclass")
    return plugin


def load_entry_points() -> None:
    """Every installed package's `kernattn.attention` entry point, once."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        module = ep.value.split(":")[0]
        if module not in _done:
            found = importlib.util.find_spec(module)
            origin = found.origin if found and found.origin else module
            _done[module] = _import(Plugin(f"entry point {ep.name} ({module})", origin,
                                           _sha256(origin) if Path(origin).is_file() else ""),
                                    lambda: ep.load())


registry.before_lookup.append(load_entry_points)


def records(names) -> list[dict]:
    """The plugins that registered any of the variant `names`: what a run records."""
    seen, out = set(), []
    for name in names:
        plugin = registry.plugin_of(name)
        if plugin is not None and plugin.file not in seen:
            seen.add(plugin.file)
            out.append({"variant": name, "source": plugin.source, "file": plugin.file, "sha256": plugin.sha256})
    return out
