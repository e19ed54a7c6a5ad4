"""Variant registry: a variant is a name, a typed options dataclass and a module class.

The names, options and summaries are the catalogue of options.py (no torch: loading params
validates rows without it); the module classes register themselves with `register(name,
options)` when their module is imported, which `variant(name)` does on first use. Adding a
variant means writing its module, its options in options.py and one `register(...)` call;
`build` validates every option (unknown name, unknown key, wrong type, value outside its
choices) and fails with a message that lists what is allowed.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from dataclasses import dataclass
from typing import Any, Callable

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


_REGISTRY: dict[str, Variant] = {}


def register(name: str, options: type):
    """Class decorator: register `cls` as the module of variant `name`, whose options are
    the catalogue's (options.SPECS)."""

    def wrap(cls):
        if name in _REGISTRY:
            raise RuntimeError(f"attention variant {name!r} registered twice")
        if name not in SPECS or SPECS[name][0] is not options:
            raise RuntimeError(f"attention variant {name!r}: not in options.SPECS with options {options.__name__}")
        _REGISTRY[name] = Variant(name, options, cls, SPECS[name][1])
        cls.registry_name = name
        return cls

    return wrap


def available() -> list[str]:
    """Names of the variants, sorted."""
    return sorted(SPECS)


def _known(name: str) -> None:
    if name not in SPECS:
        raise AttentionConfigError(
            f"unknown attention variant {name!r}; valid names: {', '.join(available())}"
        )


def variant(name: str) -> Variant:
    """The variant with its module class (its module imported on first use)."""
    _known(name)
    if name not in _REGISTRY:
        importlib.import_module(f"{__package__}.{SPECS[name][2]}")
    return _REGISTRY[name]


def options_class(name: str) -> type:
    _known(name)
    return SPECS[name][0]


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
    hints = typing.get_type_hints(options_type)
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
