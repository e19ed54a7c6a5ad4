"""Reading a params or overrides document: one YAML file's top-level mapping (an error is one
line naming the file and the line), and Snakemake's flat `--config` keys nested."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import ParamsError
from ..yaml_text import safe_load
from .schema import deep_merge


def read_yaml(path: Path, what: str) -> dict:
    """A YAML file's top-level mapping, or one line naming the file (and the line of a syntax error)."""
    if not path.is_file():
        raise ParamsError(f"{path}: no such {what}")
    try:
        doc = safe_load(path.read_text()) or {}  # libyaml: every process and Snakefile parse reads it
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ParamsError(f"{path}:{where}: YAML syntax error: {problem}") from None
    if not isinstance(doc, dict):
        raise ParamsError(f"{path}: expected a mapping at the top level, got {type(doc).__name__}")
    return doc


def nest_dotted(over: Any, source: str) -> dict:
    """{"train.lr": 0.5} -> {"train": {"lr": 0.5}} (Snakemake's --config takes flat keys)."""
    if not isinstance(over, dict):
        raise ParamsError(f"{source}: overrides must be a mapping of section -> values, got {over!r}")
    out: dict = {}
    for key, value in over.items():
        *parents, last = str(key).split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ParamsError(f"{source}: key {key!r} sets inside a value that is not a mapping")
        node[last] = deep_merge(node.get(last), value) if last in node else value
    return out
