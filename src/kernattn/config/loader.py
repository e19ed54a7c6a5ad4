"""Reading params.yaml and its overrides into one typed Params, every step validated.

Documents. The params file and every override source (Snakemake's --configfile files, its
--config, a mapping or list given to load_params, a command's `--overrides FILE`) have one
shape, the file's: sections, `scales: {name: sections}` and `scale`. A source may hold any
part of it, a full copy of the file included; a key the file does not take is an error.

Precedence, lowest first:
  1. the params file's sections (the paper scale's values);
  2. the file's scales.<scale>, deep-merged over them;
  3. each source in order (load_params' list in order; under Snakemake the --configfile
     files as given, then --config; a command's `--overrides FILE`, which is what the
     Snakefile hands each job, is its one source: params_from_args). A source is resolved as
     the file is (its own scales.<scale> over its own sections), and that merged over 1-2
     and the sources before it.
Mappings merge key by key; lists and values are replaced. So `--config 'train={lr: 0.5}'`
wins over the file's scales.tiny.train.lr; a full copy of the file as a source changes
nothing (resolved at tiny it is the file at tiny); and a copy with one value changed changes
what the same edit of params.yaml would: a value under the copy's scales.tiny changes the
tiny scale, a top-level one every scale that does not set that key itself.

The scale: the `scale` argument (kernattn --scale), else the last source that names one
(`--config scale=micro` after a configfile's `scale`), else KERNATTN_SCALE, else the file's
`scale`, else paper. It is paper or a name under `scales` of the file or of a source (a
source may add a scale: the defaults, then its overrides).

Validation: every key of a document is checked first, and one error names all its unknown
keys and the document (the file's path or `--config`). Then every scale of the params file is
built and cross-checked, and after each source the chosen scale and every scale that source
names, so that a bad value's error names its source. Params.changes keeps what the sources
changed of the file at the chosen scale: the overrides file Snakemake hands every job.

Nothing in the environment adds a source: a command passes its `--overrides FILE` to
load_params itself (params_from_args), and to the processes it starts that read params
(Params.overrides: the file, which they are given as an argument or in their spec).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from ..errors import ParamsError
from . import char, common, lm, studies, vision  # submodules of this package (not its __init__)
from .schema import build, deep_merge, fill_placeholders, unknown_keys, unknown_keys_error
from .unit_sections import unit_sections
from .yaml_files import nest_dotted, read_yaml

SCALE_ENV = "KERNATTN_SCALE"


@dataclass(frozen=True)
class Params:
    scale: str
    data: char.DataParams
    model: char.ModelParams
    train: char.TrainParams
    tracking: common.TrackingParams
    matrix: char.MatrixParams
    report: common.ReportParams
    analysis: char.AnalysisParams
    bench: common.BenchParams
    vision: vision.VisionParams
    lm: lm.LMParams
    studies: studies.StudiesParams
    datasets: common.DatasetsParams = field(default_factory=common.DatasetsParams)
    path: str = "params.yaml"
    plugins: tuple[str, ...] = ()  # the attention plugins loaded (attention/plugins.py), as their sources
    raw: dict = field(default_factory=dict, compare=False, repr=False)
    # What the override sources changed of the params file at this scale, in the file's
    # shape: as the one source over the file at this scale, it gives these params.
    changes: dict = field(default_factory=dict, compare=False, repr=False)
    # The `--overrides FILE` these params were loaded with (params_from_args), or None: what a
    # process this one starts must be given to read the same params.
    overrides: str | None = field(default=None, compare=False)
    # The sections a unit declares in its own package (unit_sections): read as attributes,
    # `params.<section>`, like the sections above.
    units: dict = field(default_factory=dict, repr=False)

    def __getattr__(self, name: str):
        units = self.__dict__.get("units") or {}
        if name in units:
            return units[name]
        raise AttributeError(f"{type(self).__name__} has no section or field {name!r}")

    def digest(self) -> str:
        """sha256 (first 12 hex) of the resolved params: the provenance the report shows."""
        blob = json.dumps(self.raw, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


BUILT_IN = {
    "data": char.DataParams,
    "model": char.ModelParams,
    "train": char.TrainParams,
    "tracking": common.TrackingParams,
    "matrix": char.MatrixParams,
    "report": common.ReportParams,
    "analysis": char.AnalysisParams,
    "bench": common.BenchParams,
    "vision": vision.VisionParams,
    "lm": lm.LMParams,
    "studies": studies.StudiesParams,
    "datasets": common.DatasetsParams,
}


UNIT_SECTIONS = unit_sections(BUILT_IN)
SECTIONS = {**BUILT_IN, **{name: cls for name, (cls, _check) in UNIT_SECTIONS.items()}}

Overrides = Union[dict, "list[tuple[str, dict]]", None]
# what params.yaml and every override source may hold; `plugins`: attention variants of your own
# (attention/plugins.py), paths relative to the file naming them, or module names
TOP_KEYS = (*SECTIONS, "scale", "scales", "plugins")


@dataclass(frozen=True)
class Document:
    """The params file or one override source, in the file's shape: sections, `scales` and
    `scale`; a source may hold any part of it, a full copy of the file included."""

    source: str  # the file's path or `--config`: what an error names
    sections: dict
    scales: dict
    scale: str | None = None
    plugins: tuple[str, ...] = ()  # resolved: absolute paths, or module names

    def at(self, scale: str) -> dict:
        """Its sections at `scale`: its own scales.<scale> deep-merged over its sections."""
        return deep_merge(self.sections, self.scales.get(scale) or {})


def load_params(path: str | os.PathLike = "params.yaml", scale: str | None = None,
                overrides: Overrides = None) -> Params:
    """Read, merge the chosen scale, apply the overrides, validate. `overrides` is a mapping
    in params.yaml's shape (dotted keys such as "train.lr" allowed) or a list of (source,
    mapping) pairs applied in order; an error names the source it came from. Raises
    ParamsError (one line) on any problem. The precedence is the module's docstring."""
    path = Path(path)
    base = document(str(path), read_yaml(path, "params file (run from the repository root, or pass --params)"))
    base = dataclasses.replace(base, sections={k: base.sections.get(k) or {} for k in SECTIONS})
    sources = [document(source, over) for source, over in _sources(overrides)]
    loaded = _load_plugins([base, *sources])
    chosen = _choose(scale, base, sources)
    params = _check_file(base, chosen)
    merged = _check_sources(base, sources, chosen)
    changes = _changed(base.at(chosen), merged)
    if chosen != "paper" and chosen not in base.scales and changes:
        changes["scales"] = {chosen: {}}  # a scale only a source defines: `changes` must name it
    if added := [p for doc in sources for p in doc.plugins if p not in base.plugins]:
        changes["plugins"] = list(dict.fromkeys(added))  # a job's overrides file loads them too
    if sources:
        params = _params(merged, chosen, path)
    params = dataclasses.replace(params, plugins=loaded, raw={**params.raw, "plugins": list(loaded)}) \
        if loaded else params
    return dataclasses.replace(params, changes=changes) if changes else params


def document(source: str, doc: Any) -> Document:
    """A mapping in params.yaml's shape, its keys checked first: every unknown key of it
    (sections, scales, nested entries) in one error."""
    if not isinstance(doc, dict):
        raise ParamsError(f"{source}: expected a mapping of {', '.join(TOP_KEYS)} at the top level, got {doc!r}")
    if unknown := _unknown(doc):
        raise unknown_keys_error(source, unknown)
    scales = doc.get("scales") or {}
    if not isinstance(scales, dict):
        raise ParamsError(f"{source}: 'scales' must be a mapping of scale name -> overrides, got {scales!r}")
    for name, over in scales.items():
        if over is not None and not isinstance(over, dict):
            raise ParamsError(f"{source}: scales.{name} must be a mapping of overrides, got {over!r}")
    scale = doc.get("scale")
    if scale is not None and not isinstance(scale, str):
        raise ParamsError(f"{source}: scale must be the name of a scale, got {scale!r}")
    sections = {k: {} if v is None else v for k, v in doc.items() if k in SECTIONS}
    return Document(source, sections, {str(name): over or {} for name, over in scales.items()}, scale,
                    _plugin_sources(source, doc.get("plugins")))


def _plugin_sources(source: str, plugins: Any) -> tuple[str, ...]:
    """A document's `plugins:`, each path made absolute against the document's folder (the
    current folder for a source that is not a file: --config, a mapping)."""
    if plugins is None:
        return ()
    if isinstance(plugins, str):
        plugins = [plugins]
    if not isinstance(plugins, list) or not all(isinstance(p, str) and p.strip() for p in plugins):
        raise ParamsError(f"{source}: plugins must be a list of .py paths or module names, got {plugins!r}")
    from ..attention.plugins import is_path

    folder = Path(source).parent if Path(source).is_file() else Path(".")
    return tuple(str((folder / p).resolve()) if is_path(p) else p for p in plugins)


def _load_plugins(docs: list[Document]) -> tuple[str, ...]:
    """Load every document's plugins and KERNATTN_PLUGINS's, before any row is validated
    (a row may name a plugin's variant); the loaded sources, in order."""
    from ..attention import PluginError, plugins

    loaded = []
    for doc in docs:
        try:
            loaded += [p.source for p in plugins.load(doc.plugins)]
        except PluginError as exc:
            raise ParamsError(f"{doc.source}: plugins: {exc}") from None
    try:
        loaded += [p.source for p in plugins.load_env()]
    except PluginError as exc:
        raise ParamsError(f"{plugins.ENV}: {exc}") from None
    return tuple(dict.fromkeys(loaded))


def _unknown(doc: dict) -> list:
    """Every key of `doc` params.yaml does not have: at the top, in a section, in a scale."""
    found = [(key, "", list(TOP_KEYS)) for key in doc if key not in TOP_KEYS]
    found += _unknown_in_sections(doc, "")
    scales = doc.get("scales")
    for name, over in (scales.items() if isinstance(scales, dict) else ()):
        if isinstance(over, dict):
            where = f"scales.{name}"
            found += [(f"{where}.{key}", where, list(SECTIONS)) for key in over if key not in SECTIONS]
            found += _unknown_in_sections(over, f"{where}.")
    return found


def _unknown_in_sections(doc: dict, prefix: str) -> list:
    return [u for section, cls in SECTIONS.items() if section in doc
            for u in unknown_keys(cls, doc[section], prefix + section)]


def _choose(scale: str | None, base: Document, sources: list[Document]) -> str:
    """The scale: the argument, else the last source naming one, else KERNATTN_SCALE, else
    the file's `scale`, else paper; paper or a name under `scales` of the file or a source."""
    named = [doc for doc in sources if doc.scale]
    if scale:
        chosen, by = scale, base.source
    elif named:
        chosen, by = named[-1].scale, named[-1].source
    else:
        chosen, by = os.environ.get(SCALE_ENV) or base.scale or "paper", base.source
    known = {"paper", *base.scales, *(name for doc in sources for name in doc.scales)}
    if chosen not in known:
        raise ParamsError(f"{by}: unknown scale {chosen!r}; allowed: {', '.join(sorted(known))}")
    return chosen


def _check_file(base: Document, chosen: str) -> Params:
    """Every scale of the params file built and cross-checked, not only the chosen one: a
    typo in `paper` must not wait for the day someone runs at paper scale. paper first: a bad
    key in the base sections is reported as such, not as some scale's. Returns the chosen."""
    params = None
    for name in ["paper", *sorted(set(base.scales) - {"paper"})]:
        built = _built(base.at(name), name, base.source, "" if name == "paper" else f"scales.{name} -> ")
        _checked(built, f"{base.source}: scale {name}: " if name == chosen else
                 f"{base.source}: " if name == "paper" else f"{base.source}: scales.{name} -> ")
        if name == chosen:
            params = built
    return params if params is not None else _params(base.at(chosen), chosen, base.source)


def _check_sources(base: Document, sources: list[Document], chosen: str) -> dict:
    """The sections at `chosen` with every source applied, checked after each source (the
    chosen scale and every scale the source names), so that an error names its source."""
    for i, doc in enumerate(sources):
        upto = [base, *sources[: i + 1]]
        for name in [chosen, *sorted(set(doc.scales) - {chosen})]:
            prefix = "" if name == chosen else f"scales.{name} -> "
            built = _built(_resolve(upto, name), name, doc.source, prefix)
            _checked(built, f"{doc.source}: scale {name}: " if name == chosen else f"{doc.source}: {prefix}")
    return _resolve([base, *sources], chosen)


def _resolve(docs: list[Document], scale: str) -> dict:
    """The sections at `scale`: each document resolved at it (its scales.<scale> over its
    sections), merged over the ones before."""
    merged: dict = {}
    for doc in docs:
        merged = deep_merge(merged, doc.at(scale))
    return merged


def _changed(old: dict, new: dict) -> dict:
    """What of `new` differs from `old`, mappings compared key by key: merged over `old`, it
    gives `new` back (the overrides file a Snakemake job gets holds only what changed)."""
    out = {}
    for key, value in new.items():
        if key not in old:
            out[key] = value
        elif isinstance(value, dict) and isinstance(old[key], dict):
            if sub := _changed(old[key], value):
                out[key] = sub
        elif value != old[key]:
            out[key] = value
    return out


def _built(merged: dict, scale: str, source: str, prefix: str) -> Params:
    """_params with `prefix` (the scale's `scales.<name> -> `) after the source in an error."""
    try:
        return _params(merged, scale, source)
    except ParamsError as exc:
        raise ParamsError(str(exc).replace(f"{source}: ", f"{source}: {prefix}", 1)) from None


def _params(merged: dict, scale: str, where) -> Params:
    built = {sec: build(cls, merged[sec], sec, where) for sec, cls in SECTIONS.items()}
    # {corpus} (data.corpus, checked to be a plain name) may appear in any section's paths and
    # names, e.g. data.out_dir and tracking.experiment
    sections = {sec: fill_placeholders(section, scale=scale, corpus=built["data"].corpus)
                for sec, section in built.items()}
    own = {sec: sections.pop(sec) for sec in UNIT_SECTIONS}
    return Params(scale=scale, path=str(where), raw={"scale": scale, **merged}, units=own, **sections)


def _checked(params: Params, where: str) -> Params:
    """Every cross-key check, with `where` (file and scale) leading the message."""
    char.check(params, where)
    _check_datasets(params, where)
    params.vision.check(where)
    lm.check(params.lm, where)
    studies.check(params, where)
    for name, (_cls, check) in UNIT_SECTIONS.items():
        if check is not None:
            check(getattr(params, name), where)
    return params


def _check_datasets(params: Params, where: str) -> None:
    """Every data set a key names is one of the catalogue's."""
    from ..datasets import catalogue

    known = catalogue.load()
    for key, name in (("data.dataset", params.data.dataset), ("lm.dataset", params.lm.dataset),
                      ("lm.eval_set", params.lm.eval_set)):
        if name and name not in known:
            raise ParamsError(f"{where}{key}: unknown data set {name!r}; the catalogue has "
                              f"{', '.join(sorted(known))} (`kernattn data list`)")


def _sources(overrides: Overrides) -> list[tuple[str, dict]]:
    """The overrides as (source, nested mapping) pairs, in order."""
    if overrides is None:
        pairs = []
    elif isinstance(overrides, dict):
        pairs = [("overrides", overrides)]
    else:
        pairs = list(overrides)
    return [(source, nest_dotted(over, source)) for source, over in pairs]


def overrides_sources(path: str | os.PathLike | None) -> list[tuple[str, dict]]:
    """A `--overrides FILE` as load_params' sources: [(FILE, its mapping)], [] without one. A
    missing or bad file is one line naming it."""
    if not path:
        return []
    return [(str(path), read_yaml(Path(path), "overrides file (--overrides)"))]


def params_from_args(args) -> Params:
    """A command's params: its --params file at its --scale (a command without --scale: the
    file's own) with its --overrides file applied; Params.overrides names that file, so that
    a process the command starts can be given it."""
    params = load_params(args.params, getattr(args, "scale", None), overrides_sources(args.overrides))
    return dataclasses.replace(params, overrides=str(args.overrides)) if args.overrides else params
