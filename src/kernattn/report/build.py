"""Report stage: the trained runs beside the papers' claims, as one self-contained HTML folder.

    kernattn report --params params.yaml [--scale S] [--out DIR] [--bench-dir DIR ...]

Reads, for every run of the scale's matrix (kernattn.config.run_matrix), the training
stage's `<train.out_dir>/<run_id>/final.json` and `metrics.jsonl`; the corpus provenance
`<data.out_dir>/meta.json` if present; the benchmark CSVs `results/cpu/*.csv` and
`results/gpu/*.csv` if present (`--bench-dir` to look elsewhere). A run of the matrix whose
final.json or metrics.jsonl is missing, unreadable, trained at another scale or lacking a
key is an error naming the file and the `kernattn train` command that produces it: the
report never drops a run silently.

Also reads the GPA analyses (kernattn analyze-corpus / analyze-gpa; report/gpa.py), shown
as warnings naming the command when missing.

Writes `<report.out_dir>/` (default report/):
    index.html           read from the top down: a summary table of every claim of the four
                         documents (paper, where, the paper's number, ours with its interval,
                         the verdict at this scale; rows = tables/claims.csv), a table of
                         contents, then one numbered part per track (char GPT / GPA: main
                         table, curves, claims pair by pair, setup, kernel-bank readings;
                         LM; vision), benchmarks, provenance (OUTLINE)
    assets/*.png         the figures (matplotlib, Agg), one colour per matrix row (palette.py)
    tables/*.csv         every table of the page, as CSV
The folder is filled under a temporary name next to it and then renamed into place, so it
is either complete or absent. The path of index.html is printed at the end.

The claims and the papers' numbers live in paper_numbers.yaml (next to this module); the
statistics and every verdict rule in stats.py; the claims are judged in claims.py (char
track), lm.py and vision.py (seed 003).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import numbers
import os
import shutil
import subprocess
import tempfile
import textwrap
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import yaml

from ..config import Params, ParamsError, RunSpec, load_params, run_matrix
from . import bench_models, stats
from . import claims as claims_mod
from ..tracks.char import report_gpa as gpa
from ..tracks.vision import report as vision
from .palette import row_colors
from ..tracks.lm import report as lm_report
from . import studies as studies_report

HELP = "render report/index.html: results beside the papers' claims, with 95% intervals over seeds"

DEFAULT_BENCH_DIRS = ("results/cpu", "results/gpu")

# The contract with the training stage: keys final.json must have.
FINAL_KEYS = (
    "run_id", "row", "seed", "variant", "options", "label", "source", "val_loss", "val_bpc",
    "train_loss", "n_params", "extra_params", "tokens_seen", "steps", "wall_s", "tokens_per_s",
    "device", "mlflow_run_id", "tracking_uri", "git_commit", "params_digest", "scale",
)
BENCH_COLUMNS = (
    "variant", "options", "label", "impl", "causal", "window", "B", "H", "d_head", "N", "dtype",
    "device", "torch_version", "threads", "repeats", "median_ms", "min_ms", "tokens_per_s",
    "peak_mib", "timestamp",
)
RATIO_COLUMNS = ("comparison", "label", "impl", "baseline_label", "baseline_impl", "N", "metric",
                 "value", "target", "meets_target", "device", "dtype", "timestamp")


class ReportError(ValueError):
    """An input the report cannot use; one line naming the file and the fix."""


# ----------------------------------------------------------------------------- stage
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default="params.yaml", help="params file (default params.yaml)")
    parser.add_argument("--scale", default=None, help="scale to use (default: the file's `scale`)")
    parser.add_argument("--out", default=None, help="report folder (default: params report.out_dir)")
    parser.add_argument("--bench-dir", action="append", default=None, metavar="DIR",
                        help="folder of benchmark CSVs to show (repeatable; default: "
                             + " and ".join(DEFAULT_BENCH_DIRS) + ")")


def run(args: argparse.Namespace) -> int:
    from ..errors import UsageError

    try:
        params = load_params(args.params, args.scale)
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
    params_file = str(params_file)
    out = Path(out_dir if out_dir is not None else params.report.out_dir)
    papers = load_paper_numbers(paper_numbers)
    runs = load_runs(params, params_file)
    runs_df = runs_table(runs, params)
    main_df = main_table(params, runs_df)
    main_df = add_curve_columns(main_df, runs, papers)
    meta_path = Path(params.data.out_dir) / "meta.json"
    meta = _read_meta(meta_path)
    bench = bench_tables(bench_dirs)
    context = page_context(params, params_file, papers, runs, runs_df, main_df, [], meta,
                           meta_path, bench, now or datetime.now(timezone.utc))

    def fill(folder: Path) -> None:
        (folder / "assets").mkdir()
        (folder / "tables").mkdir()
        context["figures"] = plot_figures(folder / "assets", params, papers, runs, main_df)
        context["gpa"] = gpa.section(folder, params, params_file, papers, runs, main_df)
        context["bench_models"] = bench_models.section(folder, params)
        context["vision"] = vision.section(folder, params)  # GKA on vision (issue 5)
        context["lm"] = lm_report.section(folder, params)
        context["studies"] = studies_report.section(folder, params, papers)  # what exists (issue 17)
        claims = evaluate_claims(papers, params, runs_df, context["lm"], context["vision"], context["studies"])
        context["claims"] = claims
        context["summary"] = claims_csv(claims)
        main_df.to_csv(folder / "tables" / "main.csv", index=False)
        runs_df.drop(columns=["mlflow_url"]).to_csv(folder / "tables" / "runs.csv", index=False)
        context["summary"].to_csv(folder / "tables" / "claims.csv", index=False)
        claims_mod.pairs_frame(claims).to_csv(folder / "tables" / "claims-pairs.csv", index=False)
        context["setup_table"].to_csv(folder / "tables" / "setup.csv", index=False)
        for b in bench:
            for name, df in b["csv"].items():
                df.to_csv(folder / "tables" / name)
        for name, df in studies_report.tables(context["studies"]).items():
            df.to_csv(folder / "tables" / name, index=False)
        context["tables"] = sorted(p.name for p in (folder / "tables").iterdir())
        (folder / "index.html").write_text(render(context), encoding="utf-8")

    write_atomically(out, fill)
    return out / "index.html"


# ----------------------------------------------------------------------------- inputs
def load_paper_numbers(path: str | os.PathLike | None = None) -> dict:
    if path is None:
        text = resources.files(__package__).joinpath("paper_numbers.yaml").read_text(encoding="utf-8")
        where = "kernattn/report/paper_numbers.yaml"
    else:
        text, where = Path(path).read_text(encoding="utf-8"), str(path)
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ReportError(f"{where}: YAML syntax error: {str(exc).splitlines()[0]}") from None
    doc.setdefault("papers", {})
    doc.setdefault("figures", [])
    doc.setdefault("claims", [])
    doc.setdefault("setup", {"values": {}})
    doc.setdefault("interpretability", {})
    for i, claim in enumerate(doc["claims"]):
        kind = claim.get("kind")
        need = claims_mod.NEEDS.get(kind)
        if need is None:
            raise ReportError(f"{where}: claims[{i}].kind must be one of {', '.join(claims_mod.NEEDS)}; "
                              f"got {kind!r}")
        for key in ("id", "paper", "where", "statement", *need):
            if key not in claim:
                raise ReportError(f"{where}: claims[{i}] ({claim.get('id', '?')}) lacks key {key!r}")
        claim.setdefault("quote", "")
        claim.setdefault("note", "")
    return doc


def train_command(params_file: str, params: Params, run_id: str) -> str:
    return f"kernattn train --params {params_file} --scale {params.scale} --run {run_id}"


@dataclass
class Run:
    spec: RunSpec
    final: dict
    metrics: pd.DataFrame  # the val rows of metrics.jsonl: step, loss, bpc, ...
    folder: Path
    command: str
    extra: dict = field(default_factory=dict)


def load_runs(params: Params, params_file: str) -> list[Run]:
    """final.json + metrics.jsonl of every run of the matrix; ReportError naming what is wrong."""
    out = []
    for spec in run_matrix(params):
        folder = Path(params.train.out_dir) / spec.run_id
        cmd = train_command(params_file, params, spec.run_id)
        final_path = folder / "final.json"
        fix = f"; produce it with: {cmd}"
        if not final_path.is_file():
            raise ReportError(f"{final_path}: missing: run {spec.run_id} (scale {params.scale}) has not "
                              f"finished{fix}")
        try:
            final = json.loads(final_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ReportError(f"{final_path}: unreadable ({str(exc).splitlines()[0]}){fix}") from None
        if not isinstance(final, dict):
            raise ReportError(f"{final_path}: expected a JSON object{fix}")
        for key in FINAL_KEYS:
            if key not in final:
                raise ReportError(f"{final_path}: lacks key {key!r} (run {spec.run_id}){fix}")
        if final["run_id"] != spec.run_id:
            raise ReportError(f"{final_path}: holds run {final['run_id']!r}, not {spec.run_id!r}{fix}")
        if final["scale"] != params.scale:
            raise ReportError(f"{final_path}: run {spec.run_id} was trained at scale {final['scale']!r}, "
                              f"not {params.scale!r}; retrain it with: {cmd}")
        val = final["val_loss"]
        if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
            raise ReportError(f"{final_path}: val_loss must be a finite number, got {val!r} "
                              f"(run {spec.run_id}){fix}")
        metrics = _read_metrics(folder / "metrics.jsonl", fix)
        out.append(Run(spec, final, metrics, folder, cmd))
    return out


def _read_metrics(path: Path, fix: str) -> pd.DataFrame:
    if not path.is_file():
        raise ReportError(f"{path}: missing{fix}")
    records = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ReportError(f"{path}:{lineno}: not JSON ({exc.msg}){fix}") from None
            if not isinstance(rec, dict) or "step" not in rec or "split" not in rec or "loss" not in rec:
                raise ReportError(f"{path}:{lineno}: expected an object with step, split and loss{fix}")
            records.append(rec)
    df = pd.DataFrame.from_records(records, columns=None if records else ["step", "split", "loss"])
    val = df[df["split"] == "val"].copy()
    val["step"] = val["step"].astype(int)
    val["loss"] = val["loss"].astype(float)
    return val.sort_values("step").reset_index(drop=True)


def _read_meta(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path}: unreadable ({str(exc).splitlines()[0]}); rebuild it with: kernattn prepare")
    return meta if isinstance(meta, dict) else {"value": meta}


def _flatten(d: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(d, dict):
        out = []
        for k, v in d.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(d, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in d):
            return [(prefix, "\n".join(map(str, d)))]
        out = []
        for i, v in enumerate(d):
            out += _flatten(v, f"{prefix}[{i}]")
        return out
    return [(prefix, "—" if d is None else str(d))]


# ----------------------------------------------------------------------------- tables
def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
        return None
    return float(v)


def _mean(values) -> float | None:
    vals = [x for x in (_num(v) for v in values) if x is not None]
    return sum(vals) / len(vals) if vals else None


def _unique(values):
    vals = list(dict.fromkeys(v for v in values if v is not None))
    return vals[0] if len(vals) == 1 else (None if not vals else vals)


def mlflow_url(mlflow_ui: str | None, mlflow_run_id: str | None) -> str | None:
    """Link to a run in the MLflow UI. MLflow's UI (3.x) routes `#/runs/<run_id>` to the run
    page (its DirectRunPage looks the experiment up), so no experiment id is needed."""
    if not mlflow_ui or not mlflow_run_id:
        return None
    return f"{mlflow_ui.rstrip('/')}/#/runs/{mlflow_run_id}"


def options_text(variant: str, options: dict) -> str:
    if not options:
        return variant
    return f"{variant}(" + ", ".join(f"{k}={v}" for k, v in options.items()) + ")"


def runs_table(runs: list[Run], params: Params) -> pd.DataFrame:
    """One line per run (matrix order)."""
    recs = []
    for r in runs:
        f = r.final
        recs.append({
            "run_id": r.spec.run_id, "row": r.spec.row, "seed": r.spec.seed,
            "label": r.spec.label, "source": r.spec.source,
            "variant": r.spec.variant, "options": json.dumps(r.spec.options, sort_keys=True),
            "val_loss": float(f["val_loss"]), "val_bpc": _num(f["val_bpc"]),
            "train_loss": _num(f["train_loss"]), "n_params": f["n_params"],
            "extra_params": f["extra_params"], "tokens_seen": f["tokens_seen"], "steps": f["steps"],
            "wall_s": _num(f["wall_s"]), "tokens_per_s": _num(f["tokens_per_s"]),
            "device": f["device"], "git_commit": f["git_commit"], "params_digest": f["params_digest"],
            "scale": f["scale"], "mlflow_run_id": f["mlflow_run_id"], "tracking_uri": f["tracking_uri"],
            "torch_version": f.get("torch_version"),
            "mlflow_url": mlflow_url(params.report.mlflow_ui, f["mlflow_run_id"]),
            "command": r.command,
        })
    return pd.DataFrame.from_records(recs)


MAIN_COLUMNS = ["row", "label", "source", "variant_options", "n_seeds", "val_mce_mean", "val_mce_ci_half",
                "val_mce_ci_lo", "val_mce_ci_hi", "val_mce_sd", "val_bpc_mean", "n_params", "extra_params",
                "tokens_seen_mean", "steps", "wall_s_mean", "tokens_per_s_mean", "run_ids", "mlflow_run_ids"]


def main_table(params: Params, runs_df: pd.DataFrame) -> pd.DataFrame:
    """One line per row of the matrix (params order): mean and 95% interval over seeds."""
    recs = []
    order = [r.name for r in params.matrix.rows]
    for name in order:
        g = runs_df[runs_df["row"] == name]
        if g.empty:
            continue
        ci = stats.mean_ci(g["val_loss"].tolist())
        first = g.iloc[0]
        recs.append({
            "row": name, "label": first["label"], "source": first["source"],
            "variant_options": options_text(first["variant"], json.loads(first["options"])),
            "n_seeds": ci.n, "val_mce_mean": ci.mean, "val_mce_ci_half": ci.half,
            "val_mce_ci_lo": ci.lo, "val_mce_ci_hi": ci.hi, "val_mce_sd": ci.sd,
            "val_bpc_mean": _mean(g["val_bpc"]),
            "n_params": _unique(g["n_params"]), "extra_params": _unique(g["extra_params"]),
            "tokens_seen_mean": _mean(g["tokens_seen"]), "steps": _unique(g["steps"]),
            "wall_s_mean": _mean(g["wall_s"]), "tokens_per_s_mean": _mean(g["tokens_per_s"]),
            "run_ids": " ".join(g["run_id"]),
            "mlflow_run_ids": " ".join(str(x) for x in g["mlflow_run_id"] if x),
        })
    return pd.DataFrame.from_records(recs, columns=MAIN_COLUMNS)


ClaimResult = claims_mod.ClaimResult  # kept importable from here


def evaluate_claims(papers: dict, params: Params, runs_df: pd.DataFrame, lm_ctx: dict | None = None,
                    vision_ctx: dict | None = None, studies_ctx: dict | None = None) -> list[ClaimResult]:
    """Every claim of paper_numbers.yaml judged, in file order (claims.py, lm.py, vision.py,
    studies.py)."""
    char = {id(r.claim): r for r in claims_mod.evaluate_char_claims(papers, params, runs_df)}
    lm_claims = [c for c in papers["claims"] if c["kind"].startswith("lm_")]
    vis_claims = [c for c in papers["claims"] if c["kind"].startswith("vision_")]
    other = {}
    if lm_ctx is not None:
        other.update({id(r.claim): r for r in lm_report.claims(lm_ctx, lm_claims, params.scale)})
    if vision_ctx is not None:
        other.update({id(r.claim): r for r in vision.claims(vision_ctx, vis_claims, params.scale)})
    study_claims = [c for c in papers["claims"] if c["kind"].startswith("study_")]
    other.update({id(r.claim): r for r in studies_report.claims(studies_ctx, study_claims, params.scale)})
    out = []
    for c in papers["claims"]:
        res = char.get(id(c)) or other.get(id(c))
        out.append(res or ClaimResult(c, stats.NOT_RUN, scale=params.scale, ours="—",
                                      detail="its section was not built"))
    return out


def claims_csv(claims: list[ClaimResult]) -> pd.DataFrame:
    """tables/claims.csv: one row per claim, the summary table's rows."""
    return claims_mod.summary_frame(claims)


def curve_stats(curve: pd.DataFrame | None, target: float | None) -> dict:
    """Best and final point of a mean validation curve, and the first step at or below `target`."""
    if curve is None or curve.empty:
        return {"best_val_mce": None, "best_step": None, "final_step": None, "reach_step": None}
    mean = curve["mean"]
    reached = mean[mean <= target] if target is not None else mean.iloc[:0]
    return {"best_val_mce": float(mean.min()), "best_step": int(mean.idxmin()), "final_step": int(mean.index[-1]),
            "reach_step": int(reached.index[0]) if len(reached) else None}


def add_curve_columns(main_df: pd.DataFrame, runs: list[Run], papers: dict) -> pd.DataFrame:
    """Per row: best and final validation MCE of the mean curve over seeds (with steps), and the
    step at which it first reaches the baseline row's final mean validation MCE."""
    baseline = (papers.get("curves") or {}).get("baseline")
    target = main_df.loc[main_df["row"] == baseline, "val_mce_mean"]
    target = float(target.iloc[0]) if len(target) else None
    extra = pd.DataFrame([curve_stats(_curves(runs, row), target) for row in main_df["row"]],
                         columns=["best_val_mce", "best_step", "final_step", "reach_step"], index=main_df.index)
    out = pd.concat([main_df, extra], axis=1)
    out["baseline_row"] = baseline if target is not None else None
    for col in ("best_step", "final_step", "reach_step"):
        out[col] = out[col].astype("Int64")
    return out


def epochs_rows(papers: dict, params: Params, meta: dict | None) -> list[dict]:
    """The papers' "4 epochs" read two ways, for the paper's setup and ours: passes over the
    training split's window start positions (steps x batch / (n_train - context)) and over its
    characters (steps x batch x context / n_train)."""
    ep = papers.get("epochs")
    n_chars = (meta or {}).get("n_chars") or papers.get("setup", {}).get("values", {}).get("data.n_chars")
    if not ep or not n_chars:
        return []
    val = float(papers.get("setup", {}).get("values", {}).get("data.val_fraction", 0.1))

    def both(steps, batch, context, n_train):
        return steps * batch / (n_train - context), steps * batch * context / n_train

    sv = papers["setup"]["values"]
    paper = both(sv["train.max_steps"], sv["train.batch_size"], sv["model.context"], sv["data.n_chars"] * (1 - val))
    t, m = params.train, params.model
    ours = both(t.max_steps, t.batch_size, m.context, float((meta or {}).get("n_train") or n_chars * (1 - val)))
    return [{"setting": "epochs over window starts (steps x batch / training windows)",
             "paper": f"{ep['paper_value']} (stated); {paper[0]:.1f} computed", f"ours ({params.scale})": f"{ours[0]:.2f}"},
            {"setting": "epochs over characters (steps x batch x context / training characters)",
             "paper": f"{paper[1]:,.0f} computed", f"ours ({params.scale})": f"{ours[1]:,.2f}"}]


def setup_table(papers: dict, params: Params, meta: dict | None) -> pd.DataFrame:
    recs = []
    for key, paper_value in (papers.get("setup", {}).get("values") or {}).items():
        section, _, name = key.partition(".")
        ours = getattr(getattr(params, section, None), name, None)
        if ours is None and section == "data" and meta:
            ours = meta.get(name)
        recs.append({"setting": key, "paper": paper_value, f"ours ({params.scale})": ours})
    recs += epochs_rows(papers, params, meta)
    cols = ["setting", "paper", f"ours ({params.scale})"]
    return pd.DataFrame([[r[c] for c in cols] for r in recs], columns=cols, dtype=object)


def _fmt_value(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def bench_tables(dirs) -> list[dict]:
    """One entry per benchmark CSV found: pivots (label x N) of the fast rows, or the ratio table."""
    out = []
    for d in dirs:
        for path in sorted(Path(d).glob("*.csv")):
            entry = {"path": str(path), "note": "", "tables": [], "csv": {}, "info": {}}
            try:
                df = pd.read_csv(path)
            except (OSError, ValueError, pd.errors.ParserError) as exc:
                entry["note"] = f"unreadable: {str(exc).splitlines()[0]}"
                out.append(entry)
                continue
            cols = set(df.columns)
            if set(BENCH_COLUMNS) <= cols:
                entry["kind"] = "bench"
                fast = df[df["impl"] == "fast"]
                entry["info"] = {k: ", ".join(str(v) for v in dict.fromkeys(df[k].dropna()))
                                 for k in ("device", "torch_version", "dtype", "threads", "B", "H", "d_head",
                                           "causal", "repeats")}
                index = "label" if fast.groupby("label")["dtype"].nunique().max() <= 1 else ["label", "dtype"]
                for value, title in (("median_ms", "median time per training step (ms), fast path"),
                                     ("peak_mib", "peak memory of one step (MiB), fast path")):
                    pv = fast.pivot_table(index=index, columns="N", values=value, aggfunc="median", sort=False)
                    pv.columns = [f"N={c}" for c in pv.columns]
                    entry["tables"].append({"title": title, "html": pv.to_html(
                        float_format=lambda x: f"{x:,.2f}", na_rep="—", border=0, classes="num-table")})
                    entry["csv"][f"bench-{path.stem}-{value}.csv"] = pv
            elif set(RATIO_COLUMNS) <= cols:
                entry["kind"] = "ratios"
                show = df[["comparison", "label", "baseline_label", "N", "metric", "value", "target",
                           "meets_target", "device"]]
                entry["tables"].append({"title": "ratios against their targets", "html": show.to_html(
                    index=False, float_format=lambda x: f"{x:,.3f}", na_rep="—", border=0,
                    classes="num-table")})
                entry["csv"][f"bench-{path.stem}.csv"] = show.set_index("comparison")
            else:
                entry["note"] = "not a benchmark CSV (columns: " + ", ".join(map(str, df.columns)) + ")"
            out.append(entry)
    return out


# ----------------------------------------------------------------------------- figures
def _curves(runs: list[Run], row: str) -> pd.DataFrame | None:
    """step x seed validation loss of one row -> columns mean, min, max (index step)."""
    frames = {r.spec.seed: r.metrics.set_index("step")["loss"] for r in runs
              if r.spec.row == row and not r.metrics.empty}
    if not frames:
        return None
    wide = pd.DataFrame({s: f[~f.index.duplicated(keep="last")] for s, f in frames.items()}).sort_index()
    return pd.DataFrame({"mean": wide.mean(axis=1), "min": wide.min(axis=1), "max": wide.max(axis=1),
                         "n": wide.count(axis=1)})


def _new_figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _draw_curves(ax, runs, rows_colors: dict[str, str | None], labels: dict[str, str]) -> int:
    drawn = 0
    for row, color in rows_colors.items():
        c = _curves(runs, row)
        if c is None:
            continue
        n = int(c["n"].max())
        # a marker on every evaluated step: how many points the curve rests on shows
        line, = ax.plot(c.index, c["mean"], color=color, lw=1.6, marker="o", ms=2.5,
                        label=f"{labels.get(row, row)} (n={n})")
        if n > 1:
            ax.fill_between(c.index, c["min"], c["max"], color=line.get_color(), alpha=0.2, lw=0)
        drawn += 1
    ax.set_xlabel("step")
    ax.set_ylabel("validation MCE (nats/char)")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    return drawn


def plot_figures(assets: Path, params: Params, papers: dict, runs: list[Run], main_df: pd.DataFrame) -> list[dict]:
    """Writes the PNGs; returns [{file, title, caption}] for the page."""
    labels = {r.spec.row: r.spec.label for r in runs}
    present = [r.name for r in params.matrix.rows if r.name in labels]
    colours = row_colors(params)  # one colour per row in every figure
    figures = []
    shade = "shaded: min-max over seeds"

    panels = [f for f in papers.get("figures", []) if any(row in labels for row in f["rows"])]
    if panels:
        fig = _new_figure(5.5 * len(panels), 4.2)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, spec in zip(axes, panels):
            _draw_curves(ax, runs, {row: colours[row] for row in spec["rows"] if row in labels}, labels)
            ax.set_title(textwrap.fill(spec["title"] + f" [scale {params.scale}]", 62), fontsize=9)
        fig.savefig(assets / "val_curves_papers.png", dpi=110)
        missing = {f["id"]: [r for r in f["rows"] if r not in labels] for f in panels}
        miss_txt = "; ".join(f"{k}: {', '.join(v)} not run" for k, v in missing.items() if v)
        figures.append({"file": "assets/val_curves_papers.png",
                        "title": "The papers' Figure 2, redrawn from our runs",
                        "caption": "Validation mean cross-entropy vs training step, mean over seeds "
                                   f"({shade}), in the report's colour for each row (the same in every "
                                   "figure; the papers' own colours differ between 000 and 001). " + (miss_txt + "." if miss_txt else "")})

    fig = _new_figure(8, 4.8)
    ax = fig.subplots()
    _draw_curves(ax, runs, {row: colours[row] for row in present}, labels)
    ax.set_title(f"All rows of the matrix [scale {params.scale}]", fontsize=10)
    fig.savefig(assets / "val_curves_all.png", dpi=110)
    figures.append({"file": "assets/val_curves_all.png", "title": "Every row",
                    "caption": f"Validation mean cross-entropy vs step, mean over seeds ({shade})."})

    fig = _new_figure(8, 0.9 + 0.38 * len(main_df))
    ax = fig.subplots()
    ys = list(range(len(main_df)))[::-1]
    for y, (_, r) in zip(ys, main_df.iterrows()):
        err = None if pd.isna(r["val_mce_ci_half"]) else [[r["val_mce_ci_half"]], [r["val_mce_ci_half"]]]
        ax.errorbar([r["val_mce_mean"]], [y], xerr=err, fmt="o", color=colours[r["row"]], capsize=3)
        seeds = runs_values(runs, r["row"])
        ax.plot(seeds, [y] * len(seeds), "x", color="tab:gray", ms=5)
    ax.set_yticks(ys)
    ax.set_yticklabels(main_df["label"], fontsize=8)
    ax.set_xlabel("final validation MCE (nats/char)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"Final validation MCE: mean ± 95% CI (x: seeds) [scale {params.scale}]", fontsize=10)
    fig.savefig(assets / "val_mce_ci.png", dpi=110)
    figures.append({"file": "assets/val_mce_ci.png", "title": "Final validation loss with intervals",
                    "caption": "Dot: mean over seeds; bar: 95% Student t interval (none for one seed); "
                               "crosses: the seeds."})
    return figures


def runs_values(runs: list[Run], row: str) -> list[float]:
    return [float(r.final["val_loss"]) for r in runs if r.spec.row == row]


# ----------------------------------------------------------------------------- page
def _fmt(x, nd: int = 4) -> str:
    v = _num(x)
    return "—" if v is None else f"{v:.{nd}f}"


def _fmt_int(x) -> str:
    v = _num(x)
    if v is None:
        return "—" if x is None else str(x)
    return f"{round(v):,}"


def _fmt_dur(x) -> str:
    v = _num(x)
    if v is None:
        return "—"
    if v < 120:
        return f"{v:.1f} s"
    if v < 7200:
        return f"{v / 60:.1f} min"
    return f"{v / 3600:.2f} h"


# The page's parts and sections, in reading order: (id, title, [(id, title), ...]). The table
# of contents, the headings and their numbers all come from here.
OUTLINE = (
    ("part-char", "Char-level GPT with GPA kernel banks (seeds 000 and 001)", (
        ("main", "Validation loss per configuration"),
        ("figures", "Validation curves"),
        ("claims", "The papers' claims, pair by pair, and the setup"),
        ("gpa-banks", "GPA kernel banks: shapes at initialisation and after training (seed 001, Section 3.1, Figures 3 and 4)"),
        ("gpa-bump", "The bump and the newline histogram (seed 001, Section 3.2, Figure 5)"),
        ("gpa-heads", "Redundant heads: is a weak bank a head that can go? (seed 001, Sections 3.1 and 4)"),
        ("gpa-bank-size", "Bank-size ablation: validation loss against M (the reviewers' request)"))),
    ("part-lm", "Language modelling: nanochat GPT (seed 003, Section 5)", (
        ("lm", "Baseline vs GKA-LM: Tables 6-8"),)),
    ("part-vision", "Vision: DeiT-style ViTs (seed 003, Sections 4 and 7)", (
        ("vision", "GKA on vision: counts, top-1 and attention maps"),)),
    ("part-studies", "Studies: the experiments the papers leave open (issue 17)", (
        ("study-wrap", "Does the bump follow the line width? The line-wrap counterfactual (seed 001, Section 3.2)"),
        ("study-gka-init", "GKA's bandwidth at initialisation (seed 003 gives none)"),
        ("study-prune", "Removing a weak head, then fine-tuning (seed 001, Sections 3.1 and 4)"))),
    ("part-bench", "Benchmarks", (
        ("bench", "Attention kernels: speed and memory"),
        ("bench-models", "Whole models: throughput, memory and MFU (GKA paper Table 4)"))),
    ("part-provenance", "Provenance", (
        ("provenance", "Corpus, software, tracking and every run"),)),
)


def outline() -> tuple[list[dict], dict[str, str]]:
    """(table of contents, heading text by id), numbered: parts 1..n, sections 1.1, 1.2, ..."""
    toc = [{"id": "summary", "title": "Summary: every claim and its verdict", "children": []}]
    heads = {"summary": "Summary: every claim and its verdict",
             "blog": "Seed 002: claims checked by the test suite, not by runs"}
    for i, (pid, ptitle, sections) in enumerate(OUTLINE, 1):
        heads[pid] = f"{i}. {ptitle}"
        children = []
        for j, (sid, stitle) in enumerate(sections, 1):
            heads[sid] = f"{i}.{j} {stitle}"
            children.append({"id": sid, "title": heads[sid]})
        toc.append({"id": pid, "title": heads[pid], "children": children})
    return toc, heads


def _verdict_class(v: str) -> str:
    v = stats.base_verdict(v)
    if v.startswith(stats.BY_CONSTRUCTION):
        return "ok"
    if v.startswith(stats.REPRODUCED):
        return "ok"
    if v.startswith(stats.CONTRADICTED):
        return "bad"
    if v.startswith((stats.NOT_RUN, stats.NOT_COMPARABLE, stats.NOT_MEASURED)):
        return "na"
    return "unk"


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


def page_context(params, params_file, papers, runs, runs_df, main_df, claims, meta, meta_path, bench, now) -> dict:
    digest = params.digest()
    stale = [r for r, d in zip(runs_df["run_id"], runs_df["params_digest"]) if d != digest]
    rows = []
    for _, r in main_df.iterrows():
        g = runs_df[runs_df["row"] == r["row"]]
        rows.append({
            **{k: (None if v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v) for k, v in r.items()},
            "sources": _sources(r["source"], papers),
            "seeds": [{"run_id": s["run_id"], "seed": s["seed"], "url": s["mlflow_url"],
                       "mlflow_run_id": s["mlflow_run_id"], "val_loss": s["val_loss"]} for _, s in g.iterrows()],
        })
    commits = list(dict.fromkeys(str(c) for c in runs_df["git_commit"] if c))
    torch_versions = list(dict.fromkeys(str(v) for v in runs_df["torch_version"] if v))
    setup = setup_table(papers, params, meta)
    m = params.model
    t = params.train
    return {
        "params": params, "params_file": params_file, "digest": digest, "scale": params.scale,
        "is_paper": params.scale == "paper",
        "scale_summary": (f"{m.n_layer} layers x {m.n_head} heads, d={m.d_model}, context {m.context}; "
                          f"{t.max_steps:,} steps of batch {t.batch_size}; seeds "
                          f"{', '.join(map(str, params.matrix.seeds))}"),
        "generated": now.isoformat(timespec="seconds"),
        "report_commit": _git_head(Path(params_file).resolve().parent),
        "run_commits": commits,
        "devices": list(dict.fromkeys(str(d) for d in runs_df["device"])),
        "torch_versions": torch_versions, "torch_here": _torch_version(),
        "stale": stale, "rows": rows, "runs": runs_df.to_dict("records"), "claims": claims,
        "papers": papers.get("papers", {}),
        "meta": _flatten(meta) if meta is not None else None, "meta_path": str(meta_path),
        "setup_table": setup,
        "setup_html": setup.map(_fmt_value).to_html(index=False, border=0, classes="num-table"),
        "setup_source": papers.get("setup", {}).get("source", ""),
        "bench": bench, "mlflow_ui": params.report.mlflow_ui,
        "tracking_uris": list(dict.fromkeys(str(u) for u in runs_df["tracking_uri"] if u)),
        "level": stats.LEVEL, "toc": outline()[0], "heads": outline()[1],
        "figures": [], "tables": [], "bench_models": {"entries": [], "paper_source": "", "command": ""},
        "studies": {}, "zip": zip,
    }


def _sources(source: str, papers: dict) -> list[dict]:
    out = []
    for part in str(source).replace(",", "/").split("/"):
        part = part.strip()
        paper = papers.get("papers", {}).get(part)
        out.append({"id": part, "title": paper["title"] if paper else ""})
    return out


def render(context: dict) -> str:
    import jinja2

    # the page's templates, and each track's own as "<track>/report.html.j2"
    tracks = jinja2.PrefixLoader({t: jinja2.PackageLoader(f"kernattn.tracks.{t}", "") for t in ("lm", "vision")})
    loader = jinja2.ChoiceLoader([jinja2.PackageLoader(__package__, "templates"), tracks])
    env = jinja2.Environment(loader=loader, autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(fmt=_fmt, fmt_int=_fmt_int, fmt_dur=_fmt_dur, verdict_class=_verdict_class,
                       at_scale=stats.at_scale,
                       num=lambda x: "" if _num(x) is None else repr(float(x)))
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

