"""Report stage: the trained runs beside the papers' claims, as one self-contained HTML folder.

    kernattn report --params params.yaml [--scale S] [--out DIR] [--bench-dir DIR ...]

This module is the page only, above every unit it assembles; the verdict library it judges
the claims with is kernattn.report, below the units. Its parts are modules of one shape
(report/part.py): each unit's
parts (kernattn.units.UNITS: the tracks', the studies', the benchmarks'), then the page's own
(PAGE_PARTS: the cost plan). Each part reads its own inputs, writes its
figures and tables, returns its template's context and judges the claims of the kinds it
owns; a track's part says what it reads (tracks.<t>.stages owns where its files live). A
track's run that is missing or unreadable is an error naming the file and the command that
makes it (the report never drops a run silently); an analysis or study that is missing is a
warning naming its command. The page: paper_numbers.yaml (kernattn/report/: the papers'
claims and numbers; every verdict rule is in report/verdicts/) loaded and checked against the claim
kinds the parts own, the summary table of every claim, the table of contents, the header and
provenance (the union of what the parts say of their runs), render, atomic write.

Writes `<report.out_dir>/` (default report/):
    index.html           read from the top down: what held, one table per document (each
                         claim with its verdict's badge, effect, interval and scale, the full
                         reasoning folded under it: report/summary.py), the forest plots of the
                         claims' effects (report/forest.py), the rules and the whole summary
                         table (rows = tables/claims.csv) folded, a table of contents, then one
                         numbered part per part module (page_parts), then provenance
    assets/*.png         the figures (matplotlib, Agg), one colour per matrix row (palette.py);
                         assets/forest-<family>.png the forest plots
    tables/*.csv         every table of the page, as CSV (claims.csv and claims-pairs.csv here);
                         claims-summary.json: the verdicts counted, in all and per document
The folder is filled under a temporary name next to it and then renamed into place, so it
is either complete or absent. The path of index.html is printed at the end.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Callable

import yaml

from ..config import Params, ParamsError, params_from_args
from ..tracks import TRACKS, track_module
from ..units import UNITS
from ..report import forest, shipped, summary, unit_tests, verdicts
from ..report.claims import ClaimResult, pairs_frame, summary_frame
from ..report.part import ClaimKind, ReportContext, ReportError, merge, num
from ..yaml_text import safe_load

DEFAULT_BENCH_DIRS = ("results/cpu", "results/gpu")
# the page's own parts, after the units': (key, module, template): the cost plan, then what it cost
PAGE_PARTS = (("plan", "kernattn.page.plan", "plan.html.j2"), ("timing", "kernattn.page.timing", "timing.html.j2"))
# The page's own claims: kr-blog's and gpa-short's properties of the attention library that the
# test suite checks (report/unit_tests.py reads its record; their note sits under the summary,
# section "blog"); no part has results for them.
PAGE_CLAIM_KINDS = {"unit_test": ClaimKind("blog", ("test",))}
PROVENANCE = ("part-provenance", "Provenance", (("provenance", "Corpus, software, tracking and every run"),))


# ----------------------------------------------------------------------------- stage
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The report's own options (kernattn.cli gives every stage --params and --scale)."""
    parser.add_argument("--out", default=None, help="report folder (default: params report.out_dir)")
    parser.add_argument("--bench-dir", action="append", default=None, metavar="DIR",
                        help="folder of benchmark CSVs to show (repeatable; default: "
                             + " and ".join(DEFAULT_BENCH_DIRS) + ")")


def run(args: argparse.Namespace) -> int:
    from ..errors import UsageError

    try:
        params = params_from_args(args)
        index = build_report(params, params_file=args.params, out_dir=args.out,
                             bench_dirs=args.bench_dir or DEFAULT_BENCH_DIRS)
    except (ParamsError, ReportError) as exc:
        raise UsageError(str(exc)) from None
    print(index)
    return 0


def build_report(params: Params, *, params_file: str | os.PathLike = "params.yaml",
                 out_dir: str | os.PathLike | None = None,
                 bench_dirs: tuple[str, ...] | list[str] = DEFAULT_BENCH_DIRS,
                 paper_numbers: str | os.PathLike | None = None,
                 now: datetime | None = None) -> Path:
    """Build the report folder; returns the path of its index.html."""
    out = Path(out_dir if out_dir is not None else params.report.out_dir)
    parts = page_parts()
    papers = load_paper_numbers(paper_numbers, parts)
    now = now or datetime.now(timezone.utc)

    def fill(folder: Path) -> None:
        ctx = ReportContext(params, str(params_file), folder, papers, tuple(bench_dirs))
        ctx.assets.mkdir()
        ctx.tables.mkdir()
        sections = {p.key: p.module.section(ctx) for p in parts}
        claims = judge_claims(ctx, parts, sections)
        summary_frame(claims).to_csv(ctx.tables / "claims.csv", index=False)
        pairs_frame(claims).to_csv(ctx.tables / "claims-pairs.csv", index=False)
        (ctx.tables / "claims-summary.json").write_text(json.dumps(summary.tally(claims), indent=1))
        forests = forest.write_figures(claims, ctx.papers, ctx.assets)
        context = page_context(ctx, parts, sections, claims, now, forests)
        (folder / "index.html").write_text(render(context), encoding="utf-8")

    write_atomically(out, fill)
    return out / "index.html"


# ----------------------------------------------------------------------------- parts
@dataclass(frozen=True)
class Part:
    key: str                               # its context's name in the templates
    module: ModuleType                     # section(ctx), claims(ctx, section), OUTLINE, CLAIM_KINDS
    template: str
    provenance_template: str | None = None

    @property
    def id(self) -> str:
        return self.module.OUTLINE[0]


def page_parts() -> list[Part]:
    """The parts in page order: each unit's (kernattn.units.UNITS order), then PAGE_PARTS. A
    unit's templates are "<unit>/<template>" (they sit beside its modules: `render`)."""
    units = [Part(part.key, u.module(part.module), f"{u.name}/{part.template}",
                  part.provenance and f"{u.name}/{part.provenance}") for u in UNITS for part in u.parts]
    own = [Part(key, importlib.import_module(module), template) for key, module, template in PAGE_PARTS]
    return units + own


def page_outline(parts: list[Part] | None = None) -> list[tuple]:
    """(id, title, [(section id, title), ...]) of every part of the page, in reading order."""
    return [p.module.OUTLINE for p in (parts if parts is not None else page_parts())] + [PROVENANCE]


def claim_kinds(parts: list[Part]) -> dict[str, ClaimKind]:
    """Every claim kind the page judges: its own and each part's (a kind has one owner)."""
    kinds = dict(PAGE_CLAIM_KINDS)
    for p in parts:
        for kind, spec in p.module.CLAIM_KINDS.items():
            if kind in kinds:
                raise ValueError(f"claim kind {kind!r} is claimed twice (part {p.key})")
            kinds[kind] = spec
    return kinds


def judge_claims(ctx: ReportContext, parts: list[Part], sections: dict[str, dict]) -> list[ClaimResult]:
    """Every claim of paper_numbers.yaml judged by the part that owns its kind, in file order."""
    where = Path(ctx.params_file).resolve().parent / unit_tests.UNIT_TESTS
    record = unit_tests.read_junit(where)
    judged = {id(c): unit_tests.judge(c, ctx.scale, record) for c in ctx.claims_of(PAGE_CLAIM_KINDS)}
    for p in parts:
        judged.update((id(r.claim), r) for r in p.module.claims(ctx, sections[p.key]))
    return [judged.get(id(c)) or ClaimResult(c, verdicts.NOT_RUN, scale=ctx.scale, ours="—",
                                             detail="its section was not built")
            for c in ctx.papers["claims"]]


# ----------------------------------------------------------------------------- inputs
def load_paper_numbers(path: str | os.PathLike | None = None, parts: list[Part] | None = None) -> dict:
    """paper_numbers.yaml (or `path`), each claim checked against its kind (one the page or a
    part owns) and given its kind's section unless it names one."""
    kinds = claim_kinds(parts if parts is not None else page_parts())
    if path is None:
        text, where = shipped.paper_numbers_text(), shipped.WHERE
    else:
        text, where = Path(path).read_text(encoding="utf-8"), str(path)
    try:
        doc = safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ReportError(f"{where}: YAML syntax error: {str(exc).splitlines()[0]}") from None
    doc.setdefault("papers", {})
    doc.setdefault("claims", [])
    if path is not None:  # another file's claims, judged under the shipped file's pre-registered rules
        rules = load_paper_numbers(None, parts)
        for key in ("judged_loss", "gates", "stability", "budget_sweep", "gka_identity"):
            doc.setdefault(key, rules[key])
    for i, claim in enumerate(doc["claims"]):
        kind = kinds.get(claim.get("kind"))
        if kind is None:
            raise ReportError(f"{where}: claims[{i}].kind must be one of {', '.join(kinds)}; "
                              f"got {claim.get('kind')!r}")
        for key in ("id", "paper", "where", "statement", *kind.needs):
            if key not in claim:
                raise ReportError(f"{where}: claims[{i}] ({claim.get('id', '?')}) lacks key {key!r}")
        claim.setdefault("quote", "")
        claim.setdefault("note", "")
        claim.setdefault("section", kind.section)
    return doc


# ----------------------------------------------------------------------------- page
def _fmt(x, nd: int = 4) -> str:
    v = num(x)
    return "—" if v is None else f"{v:.{nd}f}"


def _fmt_int(x) -> str:
    v = num(x)
    if v is None:
        return "—" if x is None else str(x)
    return f"{round(v):,}"


def _fmt_dur(x) -> str:
    v = num(x)
    if v is None:
        return "—"
    if v < 120:
        return f"{v:.1f} s"
    if v < 7200:
        return f"{v / 60:.1f} min"
    return f"{v / 3600:.2f} h"


def outline(parts: list[Part]) -> tuple[list[dict], dict[str, str]]:
    """(table of contents, heading text by id), numbered: parts 1..n, sections 1.1, 1.2, ..."""
    toc = [{"id": "summary", "title": "What held: every claim and its verdict", "children": []}]
    heads = {"summary": "What held: every claim and its verdict",
             "blog": "gpa-short and kr-blog: claims checked by the test suite, not by runs"}
    for i, (pid, ptitle, sections) in enumerate(page_outline(parts), 1):
        heads[pid] = f"{i}. {ptitle}"
        children = []
        for j, (sid, stitle) in enumerate(sections, 1):
            heads[sid] = f"{i}.{j} {stitle}"
            children.append({"id": sid, "title": heads[sid]})
        toc.append({"id": pid, "title": heads[pid], "children": children})
    return toc, heads


def _verdict_class(v: str) -> str:
    """The css class of a verdict (its badge's: one rule for the summary and the parts)."""
    return summary.verdict_badge(v)[1]


def _git_head(cwd: Path) -> str | None:
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (res.stdout.strip() or None) if res.returncode == 0 else None


def _torch_version() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def page_context(ctx: ReportContext, parts: list[Part], sections: dict[str, dict], claims: list[ClaimResult],
                 now: datetime, forests: list[dict] | None = None) -> dict:
    """The page template's context: the page's own names, and each part's section under its key;
    `forests`: the forest plots forest.write_figures drew."""
    params = ctx.params
    toc, heads = outline(parts)
    return {
        **sections,
        "params": params, "params_file": ctx.params_file, "digest": params.digest(), "scale": params.scale,
        "is_paper": params.scale == verdicts.PAPER_SCALE,
        "generated": now.isoformat(timespec="seconds"),
        "report_commit": _git_head(Path(ctx.params_file).resolve().parent), "torch_here": _torch_version(),
        "provenance": merge(s["provenance"] for s in sections.values() if "provenance" in s),
        "claims": claims, "documents": summary.documents(claims, ctx.papers), "forests": forests or [],
        "mlflow_ui": ctx.mlflow_ui, "experiments": experiment_links(ctx),
        "level": verdicts.LEVEL, "min_seeds": verdicts.MIN_SEEDS, "toc": toc, "heads": heads,
        "parts": parts, "tables": sorted(p.name for p in ctx.tables.iterdir()), "zip": zip,
        "variants": variant_legend(params),
    }


def variant_legend(params) -> list[dict]:
    """`kernattn variants`' entry of every registered variant a row of the scale names, in the
    registry's order (a track's alias of a variant, deit or base, is the variant's own row)."""
    from ..attention import available
    from ..config.variants import describe_variant

    named = {r.variant for t in TRACKS for r in track_module(t, "stages").runs(params)}
    return [describe_variant(n) for n in available() if n in named]


def experiment_links(ctx: ReportContext) -> list[dict]:
    """[{id, url}] of every MLflow experiment the scale's finished runs were logged to, in
    TRACKS order: their runs pages in the UI's Model training view (MLflow 3's UI opens in its
    GenAI view otherwise). Runs trained before final.json recorded the id are left out."""
    from ..tracking.client import experiment_runs_url

    ids: dict[str, None] = {}
    for t in TRACKS:
        stages = track_module(t, "stages")
        for run in stages.runs(ctx.params):
            path = Path(stages.final_output(ctx.params, run.run_id))
            try:
                exp = ctx.mlflow_ids(json.loads(path.read_text()), path.parent).get("mlflow_experiment_id")
            except (OSError, ValueError):
                continue  # a missing run is the track's part to report, with its command
            if exp:
                ids.setdefault(str(exp))
    return [{"id": i, "url": experiment_runs_url(ctx.mlflow_ui, i) if ctx.mlflow_ui else None} for i in ids]


def render(context: dict) -> str:
    import jinja2

    # the page's templates (templates/), the verdict library's, and each unit's as "<unit>/..."
    units = jinja2.PrefixLoader({u.name: jinja2.PackageLoader(u.package, "") for u in UNITS})
    loader = jinja2.ChoiceLoader([jinja2.PackageLoader(__package__, "templates"),
                                  jinja2.PackageLoader("kernattn.report", "templates"), units])
    env = jinja2.Environment(loader=loader, autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(fmt=_fmt, fmt_int=_fmt_int, fmt_dur=_fmt_dur, verdict_class=_verdict_class,
                       at_scale=verdicts.at_scale,
                       num=lambda x: "" if num(x) is None else repr(float(x)))
    return env.get_template("index.html.j2").render(**context)


# ----------------------------------------------------------------------------- output
def write_atomically(out: Path, fill: Callable[[Path], None]) -> None:
    """Fill a temporary folder next to `out`, then swap it into place (complete or absent)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ReportError(f"{out}: exists and is not a folder; remove it or pass --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        fill(tmp)
        os.chmod(tmp, 0o755)
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
        try:
            os.replace(tmp, out)
        except OSError:
            if old is not None:
                os.replace(old / out.name, out)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)

