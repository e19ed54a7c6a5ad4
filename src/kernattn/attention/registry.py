"""Variant registry: a variant is a name, a typed options dataclass and a module class.

The built-in names, options and summaries are the catalogue of options.py (no torch: loading
params validates rows without it); their module classes register themselves with
`register(name, options)` when their module is imported, which `variant(name)` does on first
use. A plugin (a variant outside the package: plugins.py loads it) registers with the same
decorator under a name of its own, its options dataclass declared beside it; the registry
records which plugin it came from (`plugin_of`). `build` validates every option (unknown name,
unknown key, wrong type, value outside its choices) and fails with a message that lists what
is allowed.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from dataclasses import dataclass
from typing import Any, Callable

from ..type_hints import type_hints
from .options import SPECS

IMPLS = ("fast", "reference")


class AttentionConfigError(ValueError):
    """A variant name or option that the registry does not accept."""


@dataclass(frozen=True)
class Variant:
    name: str
    options: type
    module: Callable[..., Any]
    summary: str


class PluginError(AttentionConfigError):
    """A plugin that cannot be used: its message names the plugin and the fix."""


@dataclass(frozen=True)
class Plugin:
    """Where a plugin variant came from: `source` as given (a path, a module name or an entry
    point), the file it was read from and that file's sha256 (what a run records)."""
    source: str
    file: str
    sha256: str


_REGISTRY: dict[str, Variant] = {}
_PLUGINS: dict[str, Plugin] = {}      # plugin variant name -> its plugin
_loading: list[Plugin] = []           # the plugin being imported now (plugins.py sets it)
# Called before any lookup: plugins.py adds its loader of installed packages' entry points
# here when the package is imported (the registry does not import plugins.py: it imports us).
before_lookup: list[Callable[[], None]] = []


def register(name: str, options: type, summary: str | None = None):
    """Class decorator: register `cls` as the module of variant `name`. A built-in's options
    are the catalogue's (options.SPECS); a plugin's are its own dataclass (`summary`: its
    one-line description, default the class docstring's first line)."""

    def wrap(cls):
        if name in _REGISTRY or (_loading and name in SPECS):
            first = _PLUGINS.get(name)
            raise PluginError(f"attention variant {name!r} registered twice ("
                              + (f"first by {first.source}" if first else "a built-in") + f", again by "
                              + (_loading[-1].source if _loading else cls.__module__)
                              + "); give one of them another name")
        if name in SPECS:
            if SPECS[name][0] is not options:
                raise RuntimeError(f"attention variant {name!r}: not in options.SPECS with options {options.__name__}")
            _REGISTRY[name] = Variant(name, options, cls, SPECS[name][1])
        else:
            if not _loading:
                raise PluginError(f"attention variant {name!r} ({cls.__module__}) is not a built-in: load it as a "
                                  f"plugin (params.yaml `plugins:`, KERNATTN_PLUGINS or the kernattn.attention entry "
                                  f"point group), not by importing it")
            _check_plugin_options(name, options, _loading[-1].source)
            line = summary or next(iter((cls.__doc__ or "").strip().splitlines()), "")
            _REGISTRY[name] = Variant(name, options, cls, line)
            _PLUGINS[name] = _loading[-1]
        cls.registry_name = name
        return cls

    return wrap


def _check_plugin_options(name: str, options: type, source: str) -> None:
    """A plugin's options: a frozen dataclass of VariantOptions whose every field has a default."""
    from .options import VariantOptions

    where = f"plugin {source}: variant {name!r}"
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise PluginError(f"{where}: its options must be a dataclass (@dataclass(frozen=True) class "
                          f"...Options(VariantOptions)), got {options!r}")
    if not issubclass(options, VariantOptions) or not options.__dataclass_params__.frozen:
        raise PluginError(f"{where}: {options.__name__} must be a frozen dataclass subclassing "
                          f"kernattn.attention.options.VariantOptions")
    bare = [f.name for f in dataclasses.fields(options)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if bare:
        raise PluginError(f"{where}: option(s) {', '.join(bare)} of {options.__name__} need a default "
                          f"(a row that leaves them out must still build)")
    try:
        typing.get_type_hints(options)
    except Exception as exc:  # noqa: BLE001 -- any unresolvable annotation: the registry cannot check values
        raise PluginError(f"{where}: the annotations of {options.__name__} cannot be resolved ({exc})") from None


def has_plugins() -> bool:
    """Whether any plugin registered a variant in this process."""
    return bool(_PLUGINS)


def plugin_of(name: str) -> Plugin | None:
    """The plugin that registered variant `name` (None: a built-in)."""
    return _PLUGINS.get(name)


def _specs() -> dict[str, tuple[type, str]]:
    """name -> (options, summary) of every variant: the built-ins and the loaded plugins."""
    for hook in before_lookup:
        hook()
    return {**{k: (v[0], v[1]) for k, v in SPECS.items()},
            **{k: (_REGISTRY[k].options, _REGISTRY[k].summary) for k in _PLUGINS}}


def available() -> list[str]:
    """Names of the variants, sorted (the built-ins and the loaded plugins)."""
    return sorted(_specs())


def summary(name: str) -> str:
    """Variant `name`'s one-line description (a built-in's from the catalogue, a plugin's own)."""
    _known(name)
    return _specs()[name][1]


def _known(name: str) -> None:
    if name not in _specs():
        raise AttentionConfigError(
            f"unknown attention variant {name!r}; valid names: {', '.join(available())}"
            + " (a variant of your own: name its file in params.yaml `plugins:`)"
        )


def variant(name: str) -> Variant:
    """The variant with its module class (a built-in's module imported on first use)."""
    _known(name)
    if name not in _REGISTRY:
        importlib.import_module(f"{__package__}.{SPECS[name][2]}")
    return _REGISTRY[name]


def options_class(name: str) -> type:
    _known(name)
    return _specs()[name][0]


def option_fields(name: str) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(options_class(name))}


def _check_type(value: Any, annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation in (str, bool):
        return isinstance(value, annotation)
    if origin is tuple:
        args = typing.get_args(annotation)
        return isinstance(value, (tuple, list)) and len(value) == len(args) and all(
            _check_type(v, a) for v, a in zip(value, args)
        )
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return any(_check_type(value, a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    return True


def make_options(name: str, options: dict[str, Any]):
    """Validate `options` for variant `name` and return its options dataclass."""
    options_type = options_class(name)
    fields = option_fields(name)
    hints = type_hints(options_type)
    for key, value in options.items():
        if key not in fields:
            raise AttentionConfigError(
                f"unknown option {key!r} for attention variant {name!r}; "
                f"valid options: {', '.join(sorted(fields)) or '(none)'}"
            )
        if not _check_type(value, hints[key]):
            raise AttentionConfigError(
                f"option {key!r} of attention variant {name!r} must be {_type_name(hints[key])}, "
                f"got {value!r}"
            )
        choices = fields[key].metadata.get("choices")
        if choices is not None and value not in choices:
            raise AttentionConfigError(
                f"option {key!r} of attention variant {name!r} must be one of "
                f"{', '.join(map(str, choices))}; got {value!r}"
            )
        check = fields[key].metadata.get("check")
        if check is not None:
            problem = check(value)
            if problem:
                raise AttentionConfigError(
                    f"option {key!r} of attention variant {name!r}: {problem}; got {value!r}"
                )
    converted = {
        k: (tuple(v) if isinstance(v, list) else float(v) if hints[k] is float else v)
        for k, v in options.items()
    }
    return options_type(**converted)


def freeze_options(options: dict[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """A row's options dict as a sorted, hashable tuple (lists -> tuples), for frozen configs."""
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in (options or {}).items()))


def variations(name: str) -> list[dict[str, Any]]:
    """The option sets that change what variant `name` computes, one option at a time: the
    defaults ({}), every other value of each option with `choices`, and each bool flipped.
    Tests iterate over these, so a new variant or option is covered without editing them."""
    out: list[dict[str, Any]] = [{}]
    for key, f in option_fields(name).items():
        choices = f.metadata.get("choices")
        if choices is not None:
            out += [{key: c} for c in choices if c != f.default]
        elif isinstance(f.default, bool):
            out.append({key: not f.default})
    return out


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", str(annotation))
