"""What the Snakefile's rules take from the stage table: their `params` (the rerun trigger:
the sections a stage reads, a per-run stage seeing only its own row of the matrix) and the
`--config` / `--configfile` overrides, checked like params.yaml and handed to the commands."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import yaml

from ..config import Params, nest_dotted
from ..config.schema import deep_merge
from ..io import atomic_write_text
from ..stage import Stage

# Snakemake config keys that are not params.yaml overrides
RESERVED = ("scale", "params")


def rule_params(stage: Stage, params: Params) -> dict:
    """{section: its resolved values}; a per-run stage's narrowed sections are functions of
    the job's wildcards (Snakemake evaluates them per job)."""
    out = {section: params.raw[section] for section in stage.params}
    if stage.narrow is not None and stage.runs:
        for section in stage.narrow(stage.runs[0]):
            out[section] = (lambda wildcards, s=section: stage.narrow(wildcards.run)[s])
    return out


def override_sources(config_settings) -> list[tuple[str, dict]]:
    """(source, mapping) per --configfile, then --config, without the reserved keys; the
    source names the file or `--config` in every error."""
    sources = []
    for path in getattr(config_settings, "configfiles", None) or ():
        doc = yaml.safe_load(Path(path).read_text()) or {}
        sources.append((str(path), doc))
    sources.append(("--config", _typed(dict(getattr(config_settings, "config", None) or {}))))
    return [(src, {k: v for k, v in doc.items() if k not in RESERVED}) if isinstance(doc, dict) else (src, doc)
            for src, doc in sources]


def _typed(value):
    """--config values as YAML would type them: Snakemake parses `train={lr: 0.5}` with YAML's
    BaseLoader, which leaves every scalar inside a mapping a string ("0.5")."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, str):
        try:
            return yaml.safe_load(value) if value.strip() else value
        except yaml.YAMLError:
            return value
    return value


def load(params_file: str, scale: str | None, sources: list[tuple[str, dict]]) -> Params:
    """load_params for the Snakefile: a bad params file or override stops the parse with its
    one line (Snakemake would print a traceback around it)."""
    from ..config import load_params
    from ..errors import ParamsError

    try:
        return load_params(params_file, scale, sources)
    except ParamsError as exc:
        sys.exit(f"kernattn: error: {exc}")


def overrides_file(sources: list[tuple[str, dict]], folder: str = ".snakemake/kernattn") -> str | None:
    """Write the merged overrides where every job's `kernattn` reads them (named by their
    content, so concurrent parses write the same file); None when there are none."""
    merged: dict = {}
    for source, over in sources:
        merged = deep_merge(merged, nest_dotted(over, source))
    if not merged:
        return None
    text = yaml.safe_dump(merged, sort_keys=True)
    path = Path(folder) / f"overrides-{hashlib.sha256(text.encode()).hexdigest()[:12]}.yaml"
    if not path.is_file() or path.read_text() != text:
        atomic_write_text(path, text)
    return str(path)


def scale_args(params: Params, params_file: str, overrides: str | None = None) -> str:
    """The options every stage command takes."""
    args = f"--params {params_file} --scale {params.scale}"
    return f"{args} --overrides {overrides}" if overrides else args

