"""The char track's runs as the report reads them: every run's final.json and metrics.jsonl
(a run of the matrix that is missing, unreadable, trained at another scale or lacking a key
is a ReportError naming the file and the `kernattn train` command that produces it: the
report never drops a run silently), then the tables of its part: one line per run, one per
row of the matrix (mean and 95% interval over seeds, with the mean validation curve's best
and final points), and the papers' setup beside ours.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import stages
from ...config import Params, RunSpec
from ...report import stats
from ...report.part import ReportContext, ReportError, num


# The contract with the training stage: keys final.json must have.
FINAL_KEYS = (
    "run_id", "row", "seed", "variant", "options", "label", "source", "val_loss", "val_bpc",
    "train_loss", "n_params", "extra_params", "tokens_seen", "steps", "wall_s", "tokens_per_s",
    "device", "mlflow_run_id", "tracking_uri", "git_commit", "params_digest", "scale",
)


def train_command(params_file: str, params: Params, run_id: str) -> str:
    return f"kernattn train --params {params_file} --scale {params.scale} --run {run_id}"


@dataclass
class Run:
    spec: RunSpec
    final: dict
    metrics: pd.DataFrame  # the val rows of metrics.jsonl: step, loss, bpc, ...
    folder: Path
    command: str


def load_runs(params: Params, params_file: str) -> list[Run]:
    """final.json + metrics.jsonl of every run of the matrix; ReportError naming what is wrong."""
    out = []
    for spec in stages.runs(params):
        folder = stages.run_dir(params, spec.run_id)
        cmd = train_command(params_file, params, spec.run_id)
        final_path = Path(stages.final_output(params, spec.run_id))
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


def read_meta(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path}: unreadable ({str(exc).splitlines()[0]}); rebuild it with: kernattn prepare")
    return meta if isinstance(meta, dict) else {"value": meta}


def _unique(values):
    vals = list(dict.fromkeys(v for v in values if v is not None))
    return vals[0] if len(vals) == 1 else (None if not vals else vals)


def options_text(variant: str, options: dict) -> str:
    if not options:
        return variant
    return f"{variant}(" + ", ".join(f"{k}={v}" for k, v in options.items()) + ")"


def best_loss(run: Run) -> float:
    """The run's lowest validation loss: of its evaluations during training and its final one."""
    return float(min([float(run.final["val_loss"]), *run.metrics["loss"].tolist()]))


def gka_records(params: Params, runs_df: pd.DataFrame) -> list:
    """(run id, report.verdicts.stability.TrainRecord) of every char GKA run the scale has: the matrix's
    GKA rows and the GKA-init study's char runs (the runs its summary.json lists, where the study
    ran at this scale). "GKA trains stably" reads every one: at small the matrix trains no GKA
    row, and the study's 24 char runs are where GKA trained."""
    from ...report.verdicts import stability
    from ...studies.common import summary_path
    from ...studies.gka_init.stages import STUDY, gka_run_dir
    from ...studies.report_common import read_summary

    gka = {r.name for r in params.matrix.rows if r.variant == "gka"}
    folders = [(rid, stages.run_dir(params, rid)) for rid, row in zip(runs_df["run_id"], runs_df["row"]) if row in gka]
    summary = read_summary(summary_path(params, STUDY))
    if summary is not None and summary.get("scale") == params.scale:
        folders += [(r["run_id"], gka_run_dir(params) / r["run_id"]) for r in summary.get("runs", [])
                    if r.get("track", "char") == "char"]
    return [(rid, stability.read_record(folder / "metrics.jsonl")) for rid, folder in folders]


def val_curves(runs: list[Run]) -> dict[str, tuple[list[int], list[float]]]:
    """run id -> (steps, validation losses) of its evaluations: what the convergence gate reads."""
    return {r.spec.run_id: (r.metrics["step"].tolist(), r.metrics["loss"].tolist()) for r in runs}


def runs_table(runs: list[Run], ctx: ReportContext) -> pd.DataFrame:
    """One line per run (matrix order)."""
    recs = []
    for r in runs:
        # live tracking: final.json's MLflow ids; tracking.live false: what the DAG's sync_mlflow recorded
        f = {**r.final, **ctx.mlflow_ids(r.final, stages.run_dir(ctx.params, r.spec.run_id))}
        recs.append({
            "run_id": r.spec.run_id, "row": r.spec.row, "seed": r.spec.seed,
            "label": r.spec.label, "source": r.spec.source,
            "variant": r.spec.variant, "options": json.dumps(r.spec.options, sort_keys=True),
            "val_loss": float(f["val_loss"]), "best_val_loss": best_loss(r), "val_bpc": num(f["val_bpc"]),
            "train_loss": num(f["train_loss"]), "n_params": f["n_params"],
            "extra_params": f["extra_params"], "tokens_seen": f["tokens_seen"], "steps": f["steps"],
            "wall_s": num(f["wall_s"]), "tokens_per_s": num(f["tokens_per_s"]),
            "device": f["device"], "git_commit": f["git_commit"], "params_digest": f["params_digest"],
            "scale": f["scale"], "mlflow_run_id": f.get("mlflow_run_id"), "tracking_uri": f.get("tracking_uri"),
            "torch_version": f.get("torch_version"),
            # issue 37: the last evaluation's own sampling error (whole split), what the lr factor speeds up
            "val_loss_se": f.get("val_loss_se"), "val_windows": f.get("val_windows"),
            "n_variant_params": f.get("n_variant_params"), "variant_lr_scale": f.get("variant_lr_scale"),
            "mlflow_url": ctx.mlflow_url(f.get("mlflow_run_id")),
            "command": r.command,
        })
    return pd.DataFrame.from_records(recs)


# A run without a reading is a blank cell of runs_table (None from num, NaN in the frame): left out.
_mean = functools.partial(stats.mean_of, skip_nonfinite=True)

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


def curves(runs: list[Run], row: str) -> pd.DataFrame | None:
    """step x seed validation loss of one row -> columns mean, min, max (index step)."""
    frames = {r.spec.seed: r.metrics.set_index("step")["loss"] for r in runs
              if r.spec.row == row and not r.metrics.empty}
    if not frames:
        return None
    wide = pd.DataFrame({s: f[~f.index.duplicated(keep="last")] for s, f in frames.items()}).sort_index()
    return pd.DataFrame({"mean": wide.mean(axis=1), "min": wide.min(axis=1), "max": wide.max(axis=1),
                         "n": wide.count(axis=1)})


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
    extra = pd.DataFrame([curve_stats(curves(runs, row), target) for row in main_df["row"]],
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
