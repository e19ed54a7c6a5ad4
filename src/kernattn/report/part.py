"""What a report part is: the one shape every part of the page has, and what the page hands it.

A report part is a module with

    OUTLINE = (part_id, title, ((section_id, title), ...))
        its headings, in reading order; the page numbers them and builds its table of contents
        from them (a section id is also the anchor a claim's summary row links to)
    CLAIM_KINDS = {kind: ClaimKind(section, needs), ...}
        the claim kinds of paper_numbers.yaml it judges, where their summary rows link to and the
        keys a claim of that kind must have; a kind belongs to one part
    section(ctx: ReportContext) -> dict
        reads its inputs, writes its figures into ctx.assets and its tables into ctx.tables,
        and returns its template's context; it may hold "provenance": a Provenance
    claims(ctx: ReportContext, section: dict) -> list[ClaimResult]
        one result per claim of ctx.claims_of(CLAIM_KINDS), judged on what `section` returned

and a template. Each unit of kernattn.units.UNITS names its parts: a track's is
kernattn.tracks.<t>.report with `report.html.j2` next to it (rendered as "<t>/report.html.j2",
its context under the name <t>) and `provenance.html.j2` (its lines at the end of the page's
provenance section); each study's is kernattn.studies.<study>.report, the benchmarks' is
kernattn.bench.report. The parts stand on the page in UNITS order, then the
page's own (build.PAGE_PARTS: the cost plan).

Besides its own context a part's template sees the page's: scale, params, params_file,
is_paper, heads (the numbered headings by id), level (of the intervals) and claims (every
ClaimResult, in file order; a part's template shows its own by `section`).
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..config import Params


class ReportError(ValueError):
    """An input the report cannot use; one line naming the file and the fix."""


@dataclass(frozen=True)
class ClaimKind:
    section: str                  # the section id a claim of this kind links to, unless it names one
    needs: tuple[str, ...] = ()   # the keys a claim of this kind must have (beyond id, paper, where, statement)


@dataclass(frozen=True)
class ReportContext:
    """What every part is given: built once per report by build.py."""

    params: Params
    params_file: str      # as given on the command line (it is quoted in the commands the page prints)
    folder: Path          # the report folder being filled (under a temporary name until it is complete)
    papers: dict          # paper_numbers.yaml, checked: its claims and each part's numbers
    bench_dirs: tuple[str, ...] = ()

    @property
    def scale(self) -> str:
        return self.params.scale

    @property
    def assets(self) -> Path:
        return self.folder / "assets"

    @property
    def tables(self) -> Path:
        return self.folder / "tables"

    @property
    def mlflow_ui(self) -> str | None:
        return self.params.report.mlflow_ui

    def mlflow_url(self, mlflow_run_id: str | None) -> str | None:
        """Link to a run in the MLflow UI. MLflow's UI (3.x) routes `#/runs/<run_id>` to the run
        page (its DirectRunPage looks the experiment up), so no experiment id is needed."""
        if not self.mlflow_ui or not mlflow_run_id:
            return None
        return f"{self.mlflow_ui.rstrip('/')}/#/runs/{mlflow_run_id}"

    def mlflow_ids(self, final: dict, run_dir: str | Path) -> dict:
        """A finished run's MLflow ids: final.json's (live tracking), else what the DAG's sync_mlflow
        stage recorded for its folder (tracking.live false), else none."""
        if final.get("mlflow_run_id"):
            return {k: final.get(k) for k in ("mlflow_run_id", "mlflow_experiment_id", "tracking_uri")}
        return self._synced.get(str(run_dir), {})

    @functools.cached_property
    def _synced(self) -> dict[str, dict]:
        """The scale's sync record, read once per report (every run of every track looks it up)."""
        from ..tracking.client import read_synced

        return read_synced(self.scale)

    def claims_of(self, kinds: Iterable[str]) -> list[dict]:
        """The claims of paper_numbers.yaml of these kinds, in file order."""
        kinds = set(kinds)
        return [c for c in self.papers["claims"] if c["kind"] in kinds]


def num(v) -> float | None:
    """A finite real number as a float, else None (a table cell the page prints as —)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
        return None
    return float(v)


def flatten(d: Any, prefix: str = "") -> list[tuple[str, str]]:
    """A JSON document as (dotted key, text) lines; a list of scalars is one line a value."""
    if isinstance(d, dict):
        out = []
        for k, v in d.items():
            out += flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(d, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in d):
            return [(prefix, "\n".join(map(str, d)))]
        out = []
        for i, v in enumerate(d):
            out += flatten(v, f"{prefix}[{i}]")
        return out
    return [(prefix, "—" if d is None else str(d))]


@dataclass
class Input:
    """A data set's provenance file, shown in the page's provenance section."""

    title: str
    path: str
    doc: dict | None      # its contents; None: missing
    command: str          # what makes it

    @property
    def entries(self) -> list[tuple[str, str]] | None:
        return None if self.doc is None else flatten(self.doc)


@dataclass
class Provenance:
    """Where a part's results come from. The page's header and provenance section show the
    union over the parts, in page order."""

    summary: str = ""     # the scale in a line (the header's "scale" entry)
    commits: list[str] = field(default_factory=list)         # git commits the runs were trained at
    devices: list[str] = field(default_factory=list)
    torch_versions: list[str] = field(default_factory=list)
    tracking_uris: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)           # runs trained under another params digest
    inputs: list[Input] = field(default_factory=list)


def merge(provenances: Iterable[Provenance]) -> Provenance:
    """One Provenance: each list the union in order, the summaries joined."""
    provenances = list(provenances)

    def union(name: str) -> list:
        return list(dict.fromkeys(x for p in provenances for x in getattr(p, name)))
    return Provenance(summary="; ".join(p.summary for p in provenances if p.summary),
                      inputs=[i for p in provenances for i in p.inputs],
                      **{name: union(name) for name in ("commits", "devices", "torch_versions", "tracking_uris",
                                                        "stale")})
