"""The typed schema every params section is built with: frozen dataclasses whose field
metadata carries the value checks, and a builder that turns a YAML mapping into one of them
or fails with one line naming the file, the key and what is allowed (`ParamsError`).

Field metadata understood here:
    check: value -> problem or None   (positive(), nonneg(), fraction() build the usual ones)
    choices: the allowed values
    fingerprint: False for a field that does not change what a run computes (paths, threads,
                 device, cadence of checkpoints): `fingerprinted(section)` leaves it out.
A list of nested dataclasses also takes one mapping (as a one-item list).
A nested dataclass with a class attribute SHORTHAND = "<field>" also takes a bare value for
that field (data.urls: `- https://...` or `- {url: https://..., sha256: ...}`).

A section may inherit fields (TrainParams, LMParams and VisionParams inherit
common.RunSettings): the checks, the unknown-key scan and the fingerprint flag see every
field, its own and its base's alike.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

from ..errors import ParamsError
from ..type_hints import type_hints


def positive(doc: str = "", **meta) -> dict:
    return {"check": lambda v: None if v > 0 else "must be > 0", "doc": doc, **meta}


def nonneg(doc: str = "", **meta) -> dict:
    return {"check": lambda v: None if v >= 0 else "must be >= 0", "doc": doc, **meta}


def fraction(doc: str = "", **meta) -> dict:
    return {"check": lambda v: None if 0 < v < 1 else "must be between 0 and 1 (exclusive)", "doc": doc, **meta}


# a field that does not enter a run's fingerprint
NOFP = {"fingerprint": False}


def fingerprinted(section) -> dict[str, Any]:
    """The section's fields as a dict, without those flagged `fingerprint=False`: what a run's
    identity depends on (a changed output path or thread count is the same run)."""
    return {f.name: dataclasses.asdict(section)[f.name] for f in dataclasses.fields(section)
            if f.metadata.get("fingerprint", True)}


def not_fingerprinted(cls) -> tuple[str, ...]:
    """Names of the fields of `cls` flagged `fingerprint=False`."""
    return tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get("fingerprint", True))


def deep_merge(base: Any, over: Any) -> Any:
    """`over` merged into `base`: mappings key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: deep_merge(base.get(k), v) if k in base else v for k, v in over.items()}}
    return over


def fill_placeholders(section, **values: str):
    """Replace `{name}` by values[name] in the section's string fields (output paths,
    experiment names): `{scale}`, so each scale writes its own results and one never
    overwrites another's, and `{corpus}`, so each char corpus does (the loader passes both)."""
    def fill(text: str) -> str:
        for name, value in values.items():
            text = text.replace("{" + name + "}", value)
        return text

    changes = {f.name: fill(getattr(section, f.name)) for f in dataclasses.fields(section)
               if isinstance(getattr(section, f.name), str)}
    changes = {k: v for k, v in changes.items() if v != getattr(section, k)}
    return dataclasses.replace(section, **changes) if changes else section


def field_names(cls) -> list[str]:
    """The keys of a section as an error lists them: the names the class adds first, then
    those of its bases (a track's schedule before RunSettings' out_dir, device, dtype, ...)."""
    inherited = {f.name for base in cls.__mro__[1:] if dataclasses.is_dataclass(base) for f in dataclasses.fields(base)}
    names = [f.name for f in dataclasses.fields(cls)]
    return [n for n in names if n not in inherited] + [n for n in names if n in inherited]


Unknown = tuple[str, str, list[str]]  # (dotted key, its parent, the keys the parent allows)


def unknown_keys(cls, values: Any, where: str) -> list[Unknown]:
    """Every key of the mapping `values`, and of the mappings nested in it, that the schema
    of `cls` does not have: all of them, so that one error names every typo of a file."""
    if not isinstance(values, dict):
        return []  # build() says what is wrong with it
    allowed, hints = field_names(cls), type_hints(cls)
    found = [(f"{where}.{key}", where, allowed) for key in values if key not in allowed]
    for key, value in values.items():
        if key in allowed:
            found += _nested_unknown(hints[key], value, f"{where}.{key}")
    return found


def _nested_unknown(annotation, value: Any, where: str) -> list[Unknown]:
    """unknown_keys inside one value, following its annotation as convert() does."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return [] if value is None else _nested_unknown(next(a for a in args if a is not type(None)), value, where)
    if dataclasses.is_dataclass(annotation):
        if (short := getattr(annotation, "SHORTHAND", None)) and not isinstance(value, dict):
            value = {short: value}
        return unknown_keys(annotation, value, where)
    if origin is tuple and isinstance(value, (list, tuple, dict)):
        value = _one_as_list(args[0], value)
        return [u for i, v in enumerate(value) for u in _nested_unknown(args[0], v, f"{where}[{i}]")]
    return []


def unknown_keys_error(source, found: list[Unknown]) -> ParamsError:
    """One line naming every unknown key and what its parent allows:
    `my.yaml: unknown keys 'trian', 'matrix.rowz'; allowed: at the top: data, ...; in matrix: seeds, ...`."""
    keys = ", ".join(repr(key) for key, _, _ in found)
    groups = {parent: allowed for _, parent, allowed in found}
    if len(groups) == 1:
        allowed = ", ".join(next(iter(groups.values())))
    else:
        allowed = "; ".join(f"{'in ' + parent if parent else 'at the top'}: {', '.join(names)}"
                            for parent, names in groups.items())
    return ParamsError(f"{source}: unknown key{'s' if len(found) > 1 else ''} {keys}; allowed: {allowed}")


def build(cls, values: Any, where: str, path: Path | str):
    """`cls(**values)` with every key, type and value checked; `where` is the key's dotted name."""
    if not isinstance(values, dict):
        raise ParamsError(f"{path}: {where} must be a mapping, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if unknown := [key for key in values if key not in fields]:
        raise unknown_keys_error(path, [(f"{where}.{key}", where, field_names(cls)) for key in unknown])
    hints = type_hints(cls)
    kwargs = {key: convert(value, hints[key], f"{where}.{key}", path, fields[key].metadata)
              for key, value in values.items()}
    missing = [n for n, f in fields.items() if n not in kwargs and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ParamsError(f"{path}: missing key '{where}.{missing[0]}'; give it a value")
    return cls(**kwargs)


_SCALARS = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
}


def _one_as_list(item, value):
    """A list of mappings (dataclass items) also takes one mapping: a row's `paper: {...}` is `[{...}]`."""
    return [value] if isinstance(value, dict) and dataclasses.is_dataclass(item) else value


def convert(value, annotation, where: str, path, meta) -> Any:
    """One value checked against its annotation (Optional, tuple[...], dict, a nested
    dataclass, a scalar) and its metadata."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return convert(value, next(a for a in args if a is not type(None)), where, path, meta)
    if dataclasses.is_dataclass(annotation):
        # A class with a SHORTHAND field takes a bare value for it: `- https://...` in a list
        # of {url: ..., sha256: ...} entries is {url: https://...}.
        if (short := getattr(annotation, "SHORTHAND", None)) and not isinstance(value, dict):
            value = {short: value}
        return build(annotation, value, where, path)
    if origin is tuple:
        value = _one_as_list(args[0], value)
        if not isinstance(value, (list, tuple)):
            raise ParamsError(f"{path}: {where} must be a list, got {value!r}")
        return tuple(convert(v, args[0], f"{where}[{i}]", path, {}) for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ParamsError(f"{path}: {where} must be a mapping, got {value!r}")
        return dict(value)
    if not _SCALARS.get(annotation, lambda v: True)(value):
        raise ParamsError(f"{path}: {where} must be {annotation.__name__}, got {value!r}")
    if annotation is float:
        value = float(value)
    if "choices" in meta and value not in meta["choices"]:
        raise ParamsError(f"{path}: {where} must be one of {', '.join(map(str, meta['choices']))}; got {value!r}")
    if "check" in meta and (problem := meta["check"](value)):
        raise ParamsError(f"{path}: {where} {problem}; got {value!r}")
    return value
