"""Reading params.yaml: the chosen scale merged over the defaults, then the overrides
(Snakemake's --configfile / --config, or the file named by KERNATTN_OVERRIDES), each step
validated, then every cross-key check of every section."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import ParamsError
from . import char, lm, studies, vision  # submodules of this package (not its __init__)
from .schema import build, deep_merge, fill_placeholders

SCALE_ENV = "KERNATTN_SCALE"
MIRROR_ENV = "KERNATTN_DATA_MIRROR"
# A YAML file of overrides that every load_params applies (`kernattn --overrides FILE`
# sets it for one stage: how Snakemake's --config reaches the commands its rules run).
OVERRIDES_ENV = "KERNATTN_OVERRIDES"


@dataclass(frozen=True)
class Params:
    scale: str
    data: char.DataParams
    model: char.ModelParams
    train: char.TrainParams
    tracking: char.TrackingParams
    matrix: char.MatrixParams
    report: char.ReportParams
    analysis: char.AnalysisParams
    bench: char.BenchParams
    vision: vision.VisionParams
    lm: lm.LMParams
    studies: studies.StudiesParams
    path: str = "params.yaml"
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    def digest(self) -> str:
        """sha256 (first 12 hex) of the resolved params: the provenance the report shows."""
        blob = json.dumps(self.raw, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


SECTIONS = {
    "data": char.DataParams,
    "model": char.ModelParams,
    "train": char.TrainParams,
    "tracking": char.TrackingParams,
    "matrix": char.MatrixParams,
    "report": char.ReportParams,
    "analysis": char.AnalysisParams,
    "bench": char.BenchParams,
    "vision": vision.VisionParams,
    "lm": lm.LMParams,
    "studies": studies.StudiesParams,
}

Overrides = "dict | list[tuple[str, dict]] | None"


def load_params(path: str | os.PathLike = "params.yaml", scale: str | None = None,
                overrides: Overrides = None) -> Params:
    """Read, merge the chosen scale, apply the overrides, validate. `overrides` is a mapping
    {section: {key: value}} (dotted keys such as "train.lr" allowed) or a list of
    (source, mapping) pairs applied in order; an error names the source it came from.
    Raises ParamsError (one line) on any problem."""
    path = Path(path)
    doc = _read_yaml(path, "params file (run from the repository root, or pass --params)")
    allowed_top = {"scale", "scales", *SECTIONS}
    if unknown := [k for k in doc if k not in allowed_top]:
        raise ParamsError(f"{path}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(allowed_top))}")
    scales = doc.get("scales") or {}
    if not isinstance(scales, dict):
        raise ParamsError(f"{path}: 'scales' must be a mapping of scale name -> overrides")
    chosen = scale or os.environ.get(SCALE_ENV) or doc.get("scale") or "paper"
    if chosen != "paper" and chosen not in scales:
        raise ParamsError(f"{path}: unknown scale {chosen!r}; allowed: {', '.join(sorted({'paper', *scales}))}")
    # Every scale is validated, not only the chosen one: a typo in `paper` must not wait for
    # the day someone runs at paper scale. paper first: a bad key in the base sections is
    # reported as such, not as some scale's.
    params = None
    for name in ["paper", *sorted(set(scales) - {"paper"})]:
        merged = _resolve(doc, scales, name, path)
        if name == chosen:
            params = _finish(merged, chosen, path, _sources(overrides))
        else:
            _checked(_params(merged, name, path), f"{path}: " if name == "paper" else f"{path}: scales.{name} -> ")
    return params


def _finish(merged: dict, scale: str, path: Path, sources: list[tuple[str, dict]]) -> Params:
    """The chosen scale with the overrides and the mirror variable applied, checked: the file
    first, then each source as it comes, so that an error names where the bad value is."""
    params = _checked(_params(merged, scale, path), f"{path}: scale {scale}: ")
    for source, over in sources:
        if unknown := [k for k in over if k not in SECTIONS]:
            raise ParamsError(f"{source}: unknown key {unknown[0]!r}; allowed: {', '.join(SECTIONS)}")
        merged = deep_merge(merged, over)
        _checked(_params(merged, scale, source), f"{source}: scale {scale}: ")
    if mirror := os.environ.get(MIRROR_ENV):
        merged = {**merged, "data": {**merged["data"], "mirror": mirror}}
    if sources or mirror:
        params = _params(merged, scale, path)
    return params


def _params(merged: dict, scale: str, where) -> Params:
    built = {sec: build(cls, merged[sec], sec, where) for sec, cls in SECTIONS.items()}
    # {corpus} (data.corpus, checked to be a plain name) may appear in any section's paths and
    # names, e.g. data.out_dir and tracking.experiment
    sections = {sec: fill_placeholders(section, scale=scale, corpus=built["data"].corpus)
                for sec, section in built.items()}
    return Params(scale=scale, path=str(where), raw={"scale": scale, **merged}, **sections)


def _checked(params: Params, where: str) -> Params:
    """Every cross-key check, with `where` (file and scale) leading the message."""
    char.check(params, where)
    params.vision.check(where)
    lm.check(params.lm, where)
    studies.check(params, where)
    return params


def _read_yaml(path: Path, what: str) -> dict:
    if not path.is_file():
        raise ParamsError(f"{path}: no such {what}")
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ParamsError(f"{path}:{where}: YAML syntax error: {problem}") from None
    if not isinstance(doc, dict):
        raise ParamsError(f"{path}: expected a mapping at the top level, got {type(doc).__name__}")
    return doc


def _resolve(doc: dict, scales: dict, name: str, path: Path) -> dict:
    """The sections of scale `name`: its overrides deep-merged over the defaults, each key
    checked (the values are checked when the sections are built)."""
    merged = {k: doc.get(k, {}) or {} for k in SECTIONS}
    overrides = scales.get(name) or {}
    if not isinstance(overrides, dict):
        raise ParamsError(f"{path}: scales.{name} must be a mapping of overrides")
    for key, value in overrides.items():
        where = f"scales.{name}.{key}"
        if key not in SECTIONS:
            raise ParamsError(f"{path}: unknown key '{where}'; allowed: {', '.join(SECTIONS)}")
        if isinstance(value, dict):
            allowed = list(SECTIONS[key].__dataclass_fields__)
            if unknown := [sub for sub in value if sub not in allowed]:
                raise ParamsError(f"{path}: unknown key '{where}.{unknown[0]}'; allowed: {', '.join(allowed)}")
        merged[key] = deep_merge(merged[key], value)
    prefix = "" if name == "paper" else f"scales.{name} -> "
    try:
        _params(merged, name, path)
    except ParamsError as exc:
        raise ParamsError(str(exc).replace(f"{path}: ", f"{path}: {prefix}", 1)) from None
    return merged


def _sources(overrides: Overrides) -> list[tuple[str, dict]]:
    """The overrides as (source, nested mapping) pairs, KERNATTN_OVERRIDES's file last."""
    if overrides is None:
        pairs = []
    elif isinstance(overrides, dict):
        pairs = [("overrides", overrides)]
    else:
        pairs = list(overrides)
    if env_file := os.environ.get(OVERRIDES_ENV):
        pairs.append((env_file, _read_yaml(Path(env_file), f"overrides file ({OVERRIDES_ENV})")))
    return [(source, nest_dotted(over, source)) for source, over in pairs]


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
