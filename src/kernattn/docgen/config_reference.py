"""The params.yaml reference: every section's keys with their type, default and meaning, read
from the typed config (kernattn.config): a field's `doc` metadata, else the comment lines just
above it in its class, else its class docstring's line about it."""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from functools import lru_cache

from ..config.loader import SECTIONS
from ..type_hints import type_hints

_FIELD = re.compile(r"^    (\w+)\s*:(?!\s*$)")  # `    name: type ...` at class-body depth


@lru_cache(maxsize=None)
def field_comments(cls) -> dict[str, str]:
    """{field: the comment block right above it, and its own line's trailing comment} in the
    class's source (the config modules document most keys this way)."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    out, block = {}, []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped.lstrip("#").strip())
            continue
        match = _FIELD.match(line)
        if match:
            trailing = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            text = " ".join(t for t in (*block, trailing) if t)
            if text:
                out.setdefault(match.group(1), text)
        block = []
    return out


def class_doc(cls) -> str:
    """The class docstring's first paragraph (not dataclasses' generated signature)."""
    doc = cls.__doc__ or ""
    return "" if doc.startswith(f"{cls.__name__}(") else escape(" ".join(inspect.cleandoc(doc).split("\n\n")[0].split()))


def type_name(annotation) -> str:
    """A readable type: `int`, `str | None`, `list of Row`."""
    if isinstance(annotation, str):
        return annotation.replace("typing.", "")
    origin = typing.get_origin(annotation)
    if origin in (tuple, list):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return f"list of {type_name(args[0])}" if args else "list"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(annotation))
    if origin is dict:
        return "mapping"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
    else:
        return "(required)"
    if dataclasses.is_dataclass(value):
        return "(section below)"
    if isinstance(value, tuple):
        value = list(value)
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)
    return f"`{text}`" if len(text) <= 60 else f"`{text[:57]}...`"


def meaning(cls, f: dataclasses.Field) -> str:
    doc = f.metadata.get("doc") or field_comments(cls).get(f.name, "")
    choices = f.metadata.get("choices")
    if choices:
        doc = f"{doc} One of: {', '.join(f'`{c}`' for c in choices)}.".strip()
    return escape(" ".join(doc.split()))


def escape(text: str) -> str:
    """Markdown of a meaning in a table cell: `|` escaped, and `<` outside code spans as an
    entity (`<run_id>` would otherwise be read as an HTML tag and vanish)."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def nested(f: dataclasses.Field, hints: dict):
    """The dataclass a field holds (itself, or the items of its list), if any."""
    annotation = hints.get(f.name)
    for candidate in (annotation, *typing.get_args(annotation)):
        if dataclasses.is_dataclass(candidate):
            return candidate
    return None


def section_table(cls, prefix: str, seen: set) -> list[str]:
    """Markdown: the table of `cls`'s fields, then the tables of the dataclasses it nests."""
    hints = type_hints(cls)
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    inner = []
    for f in dataclasses.fields(cls):
        if f.name.startswith("_") or not f.init:
            continue
        kind = type_name(hints.get(f.name, f.type)).replace("|", "\\|")
        rows.append(f"| `{prefix}.{f.name}` | {kind} | {default_text(f)} | "
                    f"{meaning(cls, f) or '—'} |")
        sub = nested(f, hints)
        if sub is not None and sub not in seen:
            seen.add(sub)
            inner.append((f"{prefix}.{f.name}", sub))
    out = rows
    for name, sub in inner:
        out += ["", f"#### `{name}`", "", class_doc(sub), "", *section_table(sub, name, seen)]
    return out


def config_reference() -> str:
    """Every section of params.yaml, in the loader's order."""
    out = []
    for name, cls in SECTIONS.items():
        out += [f"### `{name}`", "", class_doc(cls), "", *section_table(cls, name, {cls}), ""]
    return "\n".join(out)
