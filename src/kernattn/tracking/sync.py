"""Upload finished runs that the MLflow store is missing, from their run folders.

    kernattn sync-mlflow --params P [--scale S] [--tracking-uri URI] [--dry-run]

A training run whose tracking server was unreachable (or went away, or whose store was
replaced) still has its whole record in its run folder: config.json, metrics.jsonl and
final.json. For every folder with a final.json under the run folders of every track
(train.out_dir, lm.out_dir, vision.out_dir; archived `.stale/` folders excepted), this makes
the MLflow run at tracking.uri (or --tracking-uri) complete:

- final.json's mlflow_run_id is null, or names no run in the store: a run is created in the
  run's experiment (the one config.json names; name, tags and params as training gives
  them, kernattn.engine.mlrun) -- or, after a
  sync that was interrupted, the run it had created is found again by its `kernattn.sync_key`
  tag (run id, fingerprint, val loss and wall time of the folder) and reused;
- then whatever the run lacks is added: params, tags, every metric point of metrics.jsonl
  (metric names and steps as training logs them; a point already there is not sent again),
  the artifacts config.json, metrics.jsonl and final.json; the status becomes FINISHED;
- the run's id (and the tracking URI) is written into final.json, atomically, only when it
  changed. A second sync therefore changes nothing and writes nothing.

Exit status 0 when every run is complete in the store, 1 if one could not be synced (the
others still are), 2 on a usage error (bad params, unreachable store).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


ARTIFACTS = ("config.json", "metrics.jsonl")  # and final.json, written with the run's id
SYNC_KEY_TAG = "kernattn.sync_key"
BATCH_METRICS = 1000
BATCH_PARAMS = 100
PARAM_KEY_MAX = 250


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", default=None,
                        help="store to sync into (default: tracking.uri of params.yaml)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be uploaded; change nothing")
    parser.add_argument("--record", default=None, metavar="JSON",
                        help="write each run folder's MLflow run id here instead of into its final.json (the "
                             "DAG's sync_mlflow stage: a training's output is not rewritten by a later job)")


def sync_key(final: dict[str, Any]) -> str:
    blob = json.dumps([final.get("run_id"), final.get("fingerprint"), final.get("val_loss"), final.get("wall_s")])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def read_run_folder(run_dir: Path) -> tuple[dict, dict, list[dict]]:
    """(final.json, config.json, the lines of metrics.jsonl) of a finished run's folder."""
    final = json.loads((run_dir / "final.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return final, config, lines


def run_tags(final: dict[str, Any], config: dict[str, Any], name: str, key: str) -> dict[str, str]:
    """The tags of the run in the store: training's (its source, final.json's TAG_KEYS), its
    name and sync key, and the final validation loss; a missing value is no tag."""
    from ..engine.mlrun import TAG_KEYS, source_tags

    tags = {**source_tags(config.get("command"), final.get("git_commit")),
            **{k: final.get(k) for k in TAG_KEYS}, "run_id": name, SYNC_KEY_TAG: key,
            "val_loss": f"{final['val_loss']:.6f}" if final.get("val_loss") is not None else None}
    return {k: str(v) for k, v in tags.items() if v is not None}


def run_folders(out_dir: Path) -> list[Path]:
    if not out_dir.is_dir():
        return []
    return sorted(p for p in out_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
                  and (p / "final.json").is_file())


def run_roots(params) -> list[Path]:
    """The run folders' parents of every unit (kernattn.units.UNITS): the tracks' runs, the
    char track's cooldown branches, the studies' runs."""
    from ..units import UNITS

    return list(dict.fromkeys(Path(r) for u in UNITS for r in u.module("stages").run_roots(params)))


def experiment_of(run_dir: Path, default: str) -> str:
    """The experiment training opened the run in (config.json), else `default`."""
    try:
        config = json.loads((run_dir / "config.json").read_text())
        return (config.get("tracking") or {}).get("experiment") or default
    except (OSError, ValueError, AttributeError):
        return default


class Syncer:
    def __init__(self, tracking_params, dry_run: bool = False, rewrite_final: bool = True):
        from .client import Tracker

        self.tracking = tracking_params
        self.dry_run = dry_run
        self.rewrite_final = rewrite_final  # False: the caller records the ids (--record)
        self.synced: dict[str, dict] = {}   # run folder -> its MLflow ids, after sync()
        tracker = Tracker(tracking_params)
        if urlparse(tracking_params.uri).scheme in ("http", "https"):
            problem = tracker._probe_http()
            if problem:
                raise ConnectionError(f"MLflow server at {tracking_params.uri}: {problem} "
                                      f"(start one: kernattn mlflow-server)")
        tracker._connect()  # client + experiment (created with the artifact root when new)
        self.client = tracker._client
        self.experiment_id = tracker.experiment_id

    # ------------------------------------------------------------------ lookups
    def _get_run(self, run_id: str | None):
        from mlflow.exceptions import MlflowException

        if not run_id:
            return None
        try:
            run = self.client.get_run(run_id)
        except MlflowException as exc:
            if getattr(exc, "error_code", "") in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
                return None
            raise
        return None if run.info.lifecycle_stage == "deleted" else run

    def _find_synced(self, key: str):
        runs = self.client.search_runs([self.experiment_id], filter_string=f"tags.`{SYNC_KEY_TAG}` = '{key}'",
                                       max_results=1, order_by=["attributes.start_time DESC"])
        return runs[0] if runs else None

    # ------------------------------------------------------------------ one run folder
    def _missing_metrics(self, run, lines: list[dict], start_ms: int) -> list:
        """The metric points of metrics.jsonl, (key, step) pairs the run does not hold yet."""
        from mlflow.entities import Metric

        from ..engine.metrics import metric_dict

        wanted: dict[str, list[tuple[int, float, int]]] = {}
        for rec in lines:
            ts = start_ms + int(1000 * float(rec.get("elapsed_s") or 0.0))
            for k, v in metric_dict(rec).items():
                wanted.setdefault(k, []).append((int(rec["step"]), float(v), ts))
        metrics = []
        for k, points in wanted.items():
            held = ({m.step for m in self.client.get_metric_history(run.info.run_id, k)}
                    if k in run.data.metrics else set())
            metrics += [Metric(k, v, ts, step) for step, v, ts in points if step not in held]
        return metrics

    def _send(self, run_id: str, params: list, tags: list, metrics: list) -> None:
        for i in range(0, len(params), BATCH_PARAMS):
            self.client.log_batch(run_id, params=params[i:i + BATCH_PARAMS])
        if tags:
            self.client.log_batch(run_id, tags=tags)
        for i in range(0, len(metrics), BATCH_METRICS):
            self.client.log_batch(run_id, metrics=metrics[i:i + BATCH_METRICS])

    def _send_artifacts(self, run_id: str, run_dir: Path, names: list[str], final: dict) -> None:
        """The folder's files; final.json as it will be once the run's id is written into it."""
        for artifact in names:
            if artifact != "final.json":
                self.client.log_artifact(run_id, str(run_dir / artifact))
                continue
            with tempfile.TemporaryDirectory() as tmp:
                staged = Path(tmp) / "final.json"
                staged.write_text(json.dumps(final, indent=2) + "\n")
                self.client.log_artifact(run_id, str(staged))

    def sync(self, run_dir: Path) -> tuple[str, bool]:
        """Make the MLflow run of `run_dir` complete; returns (what was done, whether anything was)."""
        from mlflow.entities import Param, RunTag

        from ..engine.mlrun import mlflow_params
        from ..io import atomic_write_json

        final, config, lines = read_run_folder(run_dir)
        name = final.get("run_id") or run_dir.name
        key = sync_key(final)
        start_ms = int((run_dir / "config.json").stat().st_mtime * 1000)
        end_ms = int((run_dir / "final.json").stat().st_mtime * 1000)

        run = self._get_run(final.get("mlflow_run_id"))
        how = "complete in the store"
        if run is None:
            run = self._find_synced(key)
            how = "resumed an interrupted sync" if run is not None else "uploaded"
        if run is None and self.dry_run:
            return f"{name}: would upload it ({len(lines)} lines of metrics.jsonl)", True
        tags = run_tags(final, config, name, key)
        if run is None:
            run = self.client.create_run(self.experiment_id, start_time=start_ms, run_name=name,
                                         tags={**tags, "kernattn.synced_by": "kernattn sync-mlflow"})
        run_id = run.info.run_id

        # params (immutable in MLflow: only the missing keys are sent)
        have = set(run.data.params)
        params = [Param(k[:PARAM_KEY_MAX], str(v)[:6000]) for k, v in mlflow_params(config).items()
                  if k[:PARAM_KEY_MAX] not in have]
        # tags that are missing or differ (a run created by training lacks the sync key)
        new_tags = [RunTag(k, v) for k, v in tags.items() if run.data.tags.get(k) != v]
        metrics = self._missing_metrics(run, lines, start_ms)
        artifacts = {a.path for a in self.client.list_artifacts(run_id)}
        missing_artifacts = [a for a in (*ARTIFACTS, "final.json") if a not in artifacts]

        ids = {"mlflow_run_id": run_id, "mlflow_experiment_id": self.experiment_id, "tracking_uri": self.tracking.uri}
        self.synced[str(run_dir)] = ids
        final_new = {**final, **ids}
        rewrite = self.rewrite_final and final_new != final
        finished = run.info.status == "FINISHED"
        changes = bool(params or metrics or missing_artifacts or not finished or rewrite)
        if self.dry_run:
            if not changes:
                return f"{name}: {run_id} complete in the store", False
            return (f"{name}: {run_id}: would add {len(params)} params, {len(metrics)} metric points, "
                    f"{len(missing_artifacts)} artifacts{'' if finished else ', mark it FINISHED'}"
                    f"{', write its id into final.json' if rewrite else ''}"), True
        self._send(run_id, params, new_tags, metrics)
        self._send_artifacts(run_id, run_dir, missing_artifacts, final_new)
        if not finished:
            self.client.set_terminated(run_id, status="FINISHED", end_time=max(end_ms, start_ms))
        if rewrite:
            atomic_write_json(run_dir / "final.json", final_new, sort_keys=False)
        if changes:
            done = f"{len(params)} params, {len(metrics)} metric points, {len(missing_artifacts)} artifacts"
            return f"{name}: {how if how != 'complete in the store' else 'completed'} {run_id} ({done})", True
        return f"{name}: {run_id} complete in the store", False


def _open_syncer(tracking, dry_run: bool, rewrite_final: bool = True) -> Syncer:
    from ..errors import UsageError

    try:
        return Syncer(tracking, dry_run=dry_run, rewrite_final=rewrite_final)
    except Exception as exc:  # noqa: BLE001 (one line: which store, what failed)
        text = str(exc).strip().splitlines()
        raise UsageError(f"cannot open the MLflow store {tracking.uri}: {type(exc).__name__}: "
                         f"{text[0] if text else ''}") from None


def run(args: argparse.Namespace) -> int:
    from ..errors import UsageError
    from ..config import params_from_args

    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    tracking = params.tracking
    if args.tracking_uri:
        tracking = dataclasses.replace(tracking, uri=args.tracking_uri, enabled=True)
    elif not tracking.enabled:
        raise UsageError("tracking.enabled is false in the params: enable it, or pass --tracking-uri")
    roots = run_roots(params)
    folders = [f for root in roots for f in run_folders(root)]
    if not folders:
        print(f"kernattn sync-mlflow: no finished runs under {', '.join(map(str, roots))}")
        if args.record and not args.dry_run:
            from ..io import atomic_write_json

            atomic_write_json(args.record, {})
        return 0
    syncers: dict[str, Syncer] = {}
    failed = changed = 0
    for folder in folders:
        experiment = experiment_of(folder, tracking.experiment)
        if experiment not in syncers:
            syncers[experiment] = _open_syncer(dataclasses.replace(tracking, experiment=experiment), args.dry_run,
                                               rewrite_final=not args.record)
        try:
            message, did = syncers[experiment].sync(folder)
            changed += did
            print(message, flush=True)
        except Exception as exc:  # noqa: BLE001 (report it, go on with the other runs)
            failed += 1
            text = str(exc).strip().splitlines()
            print(f"kernattn sync-mlflow: {folder.name}: failed: {type(exc).__name__}: {text[0] if text else ''}",
                  file=sys.stderr, flush=True)
    if args.record and not args.dry_run:
        from ..io import atomic_write_json

        atomic_write_json(args.record, {k: v for s in syncers.values() for k, v in sorted(s.synced.items())})
    if args.dry_run:
        print(f"kernattn sync-mlflow: dry run: {changed} of {len(folders)} runs would change in {tracking.uri}")
    else:
        print(f"kernattn sync-mlflow: {len(folders) - failed} of {len(folders)} runs complete in {tracking.uri} "
              f"({changed} changed now)")
    return 1 if failed else 0
