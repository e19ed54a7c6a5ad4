"""The typed schema every params section is built with: frozen dataclasses whose field
metadata carries the value checks, and a builder that turns a YAML mapping into one of them
or fails with one line naming the file, the key and what is allowed (`ParamsError`).

Field metadata understood here:
    check: value -> problem or None   (positive(), nonneg(), fraction() build the usual ones)
    choices: the allowed values
    fingerprint: False for a field that does not change what a run computes (paths, threads,
                 device, cadence of checkpoints): `fingerprinted(section)` leaves it out.
A nested dataclass with a class attribute SHORTHAND = "<field>" also takes a bare value for
that field (data.urls: `- https://...` or `- {url: https://..., sha256: ...}`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

from ..errors import ParamsError


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


def build(cls, values: Any, where: str, path: Path | str):
    """`cls(**values)` with every key, type and value checked; `where` is the key's dotted name."""
    if not isinstance(values, dict):
        raise ParamsError(f"{path}: {where} must be a mapping, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in fields:
            raise ParamsError(f"{path}: unknown key '{where}.{key}'; allowed: {', '.join(fields)}")
        kwargs[key] = convert(value, hints[key], f"{where}.{key}", path, fields[key].metadata)
    missing = [n for n, f in fields.items() if n not in kwargs and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ParamsError(f"{path}: missing key '{where}.{missing[0]}'")
    return cls(**kwargs)


_SCALARS = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
}


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
