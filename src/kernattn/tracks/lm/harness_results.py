"""The harness's results of one kernattn LM run, into the run's own MLflow run.

`kernattn lm-eval run` (harness_cli) writes the harness's results JSON beside the run's own
evaluation; `log(run_folder, output_path)` then adds its scores to the MLflow run that trained
it (final.json's mlflow_run_id at its tracking_uri), the way the run's own metrics are there:

- one metric per task and measure, `lm_eval/<task>/<measure>` (the harness's "acc,none" is
  `acc`; a filter other than "none" is appended: `exact_match_strict-match`), its standard
  error beside it (`acc_stderr`), at the run's last step;
- the results JSON itself as an artifact under `lm-eval/`.

Best effort, as training's tracking is: a run trained without tracking, or a store that cannot
be reached, gets one warning, and the results stay in their folder."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

PREFIX = "lm_eval"
ARTIFACT_DIR = "lm-eval"


def newest_results(output_path: Path) -> Path | None:
    """The newest `results_*.json` the harness wrote under `output_path` (it adds a folder per model)."""
    found = sorted(Path(output_path).rglob("results_*.json"), key=lambda f: f.stat().st_mtime)
    return found[-1] if found else None


def metrics_of(results: dict) -> dict[str, float]:
    """{`lm_eval/<task>/<measure>`: value} for every numeric score of the harness's results."""
    out = {}
    for task, scores in sorted((results.get("results") or {}).items()):
        for key, value in scores.items():
            measure, _, filt = key.partition(",")
            if not filt or isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                continue   # "alias", "N/A" stderrs, NaN
            name = measure if filt == "none" else f"{measure}_{filt}"
            out[f"{PREFIX}/{task}/{name}"] = float(value)
    return out


def log(run_folder: Path, output_path: Path, warn: Callable[[str], None] = print) -> str | None:
    """Log the newest harness results under `output_path` to `run_folder`'s MLflow run; returns
    the MLflow run id, or None (and one warning) when there is nothing to log it to."""
    final = json.loads((Path(run_folder) / "final.json").read_text())
    run_id, uri = final.get("mlflow_run_id"), final.get("tracking_uri")
    results_file = newest_results(output_path)
    if results_file is None:
        warn(f"kernattn lm-eval: no results_*.json under {output_path}; nothing logged to MLflow")
        return None
    if not run_id or not uri:
        warn(f"kernattn lm-eval: {run_folder} was trained without MLflow tracking (final.json has no "
             f"mlflow_run_id); the results stay in {results_file.parent}")
        return None
    metrics = metrics_of(json.loads(results_file.read_text()))
    try:
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        ts, step = int(time.time() * 1000), int(final.get("steps") or 0)
        client.log_batch(run_id, metrics=[Metric(k, v, ts, step) for k, v in metrics.items()])
        client.log_artifact(run_id, str(results_file), artifact_path=ARTIFACT_DIR)
    except Exception as exc:  # noqa: BLE001  (any store failure: the results are kept; say so)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        warn(f"kernattn lm-eval: logging to MLflow run {run_id} at {uri} failed ({first}); the results stay "
             f"in {results_file.parent}")
        return None
    return run_id
