"""The engine's promises, the same for every track (char GPT, LM, ViT) at micro scale:

- SIGKILL of a real process at two steps and a SIGTERM between them (a checkpoint at that
  step, exit 143), each followed by the same command -> the weights, optimiser, every other
  state part, RNG states, metrics.jsonl and final.json of an uninterrupted run, bit for bit
  on CPU;
- a divergence (every learning rate 1e30) -> exit 3, one line, a FAILED record in
  metrics.jsonl, the MLflow run FAILED, never a non-finite checkpoint;
- a run folder from other params -> refused in one line, or archived to .stale/ (never deleted);
- MLflow: one run per folder (name = run id, tag track, every metric point of metrics.jsonl);
  `kernattn sync-mlflow` uploads the runs of every track into a store that lacks them.

A kill lands at a known step thanks to KERNATTN_DEBUG_HOLD_AT_STEP: the real process stops
after that step and waits to be killed. Each track trains 10-12 steps with a checkpoint every
3: a kill after step 4 resumes from 3, one after step 8 from 6.
"""

from __future__ import annotations

from types import SimpleNamespace

import dataclasses
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from kernattn import cli
from kernattn.engine import HOLD_ENV, is_timing, metric_dict, mlflow_params
from kernattn.engine import trace as param_trace
from kernattn.yaml_text import safe_dump, safe_load
from tests.test_train import _keep_torch_threads, corpus  # noqa: F401 (fixtures)
from tests import paths
from tests.workspace import command_env

REPO = Path(__file__).resolve().parents[1]
# The shared data beside the checkout (a worktree's parent may not hold it: then the workspace's).
SHARED = paths.DATA
BIN = Path(sys.executable).parent
# final.json keys that differ between two runs of the same training: timings, the MLflow run,
# and the params digest (each test's params name its own folders).
TIMED_FINAL = ("wall_s", "train_s", "mlflow_run_id", "tracking_uri", "params_digest")


@dataclasses.dataclass(frozen=True)
class Case:
    track: str
    command: str
    run: str
    section: str       # the params section of the track's training settings
    over: dict         # micro overrides: 10-12 steps, a checkpoint every 3, randomness on
    steps: int
    parts: tuple[str, ...] = ("model", "optimizer")


CASES = {
    # a train line every 2 steps: kills after steps 3 and 5 stop mid-interval (a running loss to carry)
    "char": Case("char", "train", "gpa_dp_m8-s0", "train",
                 {"model": {"dropout": 0.1}, "train": {"max_steps": 10, "eval_every": 20, "checkpoint_every": 3}}, 10),
    # grad_accum 2: two micro-batches a step
    "lm": Case("lm", "train-lm", "gka_tokens-s0", "lm",
               {"lm": {"steps": 10, "eval_every": 5, "checkpoint_every": 3, "grad_accum": 2}}, 10),
    # 3 steps an epoch x 4; drop path draws from the global RNG
    "vision": Case("vision", "train-vision", "gka-s0", "vision",
                   {"vision": {"epochs": 4, "eval_every": 2, "checkpoint_every": 3, "drop_path": 0.1}}, 12,
                   ("model", "optimizer", "ema")),
}
TRACKS = list(CASES)


class Prepared:
    """Each track's prepared data, made once per module and only for the tracks a run selects."""

    def __init__(self, root: Path, corpus: Path):  # noqa: F811
        self.root, self.data = root, {"char": corpus}

    def __call__(self, track: str) -> Path:
        if track not in self.data:
            folder = self.root / track
            params = write_params(CASES[track], folder, folder / "data")
            assert cli.main([f"prepare-{track}", "--params", str(params)]) == 0
            self.data[track] = folder / "data"
        return self.data[track]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, corpus) -> Prepared:  # noqa: F811
    return Prepared(tmp_path_factory.mktemp("prepared"), corpus)


def write_params(case: Case, folder: Path, data: Path, tracking: dict | None = None, **sections) -> Path:
    """params.yaml at micro scale, every path under `folder`, the case's and `sections`' overrides."""
    doc = safe_load((REPO / "params.yaml").read_text())
    doc["scale"] = "micro"
    micro = doc["scales"]["micro"]
    micro["tracking"] = {"enabled": False, "uri": f"sqlite:///{folder}/mlflow/mlflow.db",
                         "artifact_root": str(folder / "mlflow" / "artifacts"), **(tracking or {})}
    paths = {"char": {"data": {"out_dir": str(data)}, "train": {"out_dir": str(folder / "runs")}},
             "lm": {"lm": {"mirror": str(SHARED / "fineweb_edu" / "c4-sample.00000-of-00001.json.gz"),
                           "eval_dir": str(SHARED / "eval"), "data_dir": str(data), "out_dir": str(folder / "runs")}},
             "vision": {"vision": {"data_root": str(SHARED / "images" / "fashion_mnist"), "data_dir": str(data),
                                   "out_dir": str(folder / "runs"), "analysis_dir": str(folder / "analysis"),
                                   "counts_dir": str(folder / "counts")}}}[case.track]
    for over in (paths, case.over, sections):
        for section, values in over.items():
            micro.setdefault(section, {}).update(values)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "params.yaml"
    path.write_text(safe_dump(doc, sort_keys=False))
    return path


def train(case: Case, params: Path, *extra: str) -> int:
    return cli.main([case.command, "--params", str(params), "--run", case.run, "--no-progress", *extra])


def command(case: Case, params: Path) -> list[str]:
    return [sys.executable, "-m", "kernattn.cli", case.command, "--params", str(params), "--run", case.run,
            "--no-progress"]


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def untimed(lines: list[dict]) -> list[dict]:
    return [{k: v for k, v in rec.items() if not is_timing(k)} for rec in lines]


def ckpt_of(run_dir: Path) -> dict:
    return torch.load(run_dir / "ckpt.pt", weights_only=True)


def assert_equal_tree(a, b, where: str) -> None:
    """Two checkpoint parts equal: tensors bit for bit, everything else by value."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_equal_tree(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_equal_tree(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def assert_same_run(case: Case, a: Path, b: Path) -> None:
    """Run folders a and b: equal state parts, RNGs, loop state, metrics (timings aside), final.json."""
    ca, cb = ckpt_of(a), ckpt_of(b)
    assert ca["step"] == cb["step"] == case.steps
    for part in (*case.parts, "rng", "loop"):
        assert_equal_tree(ca[part], cb[part], part)
    assert untimed(read_metrics(a)) == untimed(read_metrics(b))
    # every case trains a variant with parameters of its own (a bank, GKA's sigma): recorded at
    # each evaluation, cut back and carried across the resumes with the checkpoint
    ta, tb = (param_trace.read(d) for d in (a, b))
    assert ta is not None and tb is not None and ta["names"] == tb["names"] and ta["sizes"] == tb["sizes"]
    assert ta["steps"].tolist() == tb["steps"].tolist() == [m["step"] for m in read_metrics(a) if m.get("split") == "val"]
    assert (ta["values"] == tb["values"]).all() and len(ta["names"]) > 0
    fa, fb = (json.loads((d / "final.json").read_text()) for d in (a, b))
    assert {k: v for k, v in fa.items() if k not in TIMED_FINAL and not is_timing(k)} == \
           {k: v for k, v in fb.items() if k not in TIMED_FINAL and not is_timing(k)}


@pytest.fixture(scope="module")
def whole(tmp_path_factory, prepared):
    """The uninterrupted run of each track (made on first use), which the others must equal."""
    made: dict[str, Path] = {}

    def get(track: str) -> Path:
        if track not in made:
            case = CASES[track]
            folder = tmp_path_factory.mktemp(f"whole-{track}")
            threads = torch.get_num_threads()  # the stage sets its section's threads: give them back
            assert train(case, write_params(case, folder, prepared(track))) == 0
            torch.set_num_threads(threads)
            made[track] = folder / "runs" / case.run
            assert ckpt_of(made[track])["step"] == case.steps
        return made[track]

    return get


def wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until `text` is in the file `path`; on failure the process is killed, never left holding."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.is_file() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before '{text}': {path.read_text()[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise AssertionError(f"no '{text}' in {path} after {timeout} s")


def start_held(cmd: list[str], log: Path, step: int, **kw) -> subprocess.Popen:
    with open(log, "w") as fh:
        return subprocess.Popen(cmd, env=command_env(**{HOLD_ENV: str(step)}), stdout=fh, stderr=subprocess.STDOUT, **kw)


def interrupt(case: Case, params: Path, log: Path, step: int, sig: int) -> int:
    """Run the command until it holds after `step`, send `sig`; its exit status."""
    proc = start_held(command(case, params), log, step)
    wait_for(log, f"holding after step {step}", proc)
    proc.send_signal(sig)
    return proc.wait(timeout=60)


def test_the_command_environment_drops_the_engines_debug_hold():
    """tests/workspace.py names the hold variable without importing the engine (torch): one name."""
    from tests import workspace

    assert workspace.HOLD_ENV == HOLD_ENV
    assert HOLD_ENV not in command_env() and command_env(**{HOLD_ENV: 3})[HOLD_ENV] == "3"


@pytest.mark.e2e
@pytest.mark.parametrize("track", TRACKS)
def test_sigkill_sigterm_sigkill_then_the_same_command_ends_bit_exact(tmp_path, prepared, whole, track):
    """One run killed three times, each rerun resuming the last: SIGKILL after step 4 (the
    checkpoint of step 3 stays), SIGTERM after step 5 (a checkpoint there, exit 143), SIGKILL
    after step 8 (checkpoint 6); the last rerun ends exactly as the uninterrupted run."""
    case = CASES[track]
    params = write_params(case, tmp_path, prepared(track))
    run_dir = tmp_path / "runs" / case.run
    assert interrupt(case, params, tmp_path / "1.log", 4, signal.SIGKILL) == -signal.SIGKILL
    assert not (run_dir / "final.json").exists() and ckpt_of(run_dir)["step"] == 3
    assert read_metrics(run_dir)[-1]["step"] == 4  # lines past the checkpoint: the rerun cuts them
    assert not list(run_dir.glob(".*tmp-*"))  # no temporary file beside the outputs

    assert interrupt(case, params, tmp_path / "2.log", 5, signal.SIGTERM) == 143
    log = (tmp_path / "2.log").read_text()
    assert "resuming at step 3" in log and "stopped at step 5 (SIGTERM)" in log
    assert ckpt_of(run_dir)["step"] == 5  # saved on SIGTERM, off the checkpoint cadence

    assert interrupt(case, params, tmp_path / "3.log", 8, signal.SIGKILL) == -signal.SIGKILL
    assert "resuming at step 5" in (tmp_path / "3.log").read_text() and ckpt_of(run_dir)["step"] == 6
    again = subprocess.run(command(case, params), env=command_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "resuming at step 6" in again.stdout
    assert_same_run(case, whole(track), run_dir)


@pytest.mark.parametrize("track", TRACKS)
def test_divergence_exits_3_with_one_line_and_a_failed_record(tmp_path, prepared, track, capsys):
    case = CASES[track]
    params = write_params(case, tmp_path, prepared(track), tracking={"enabled": True},
                          **{case.section: {"lr": 1.0e30, "grad_clip": 0.0, "checkpoint_every": 1}})
    run_dir = tmp_path / "runs" / case.run
    capsys.readouterr()
    assert train(case, params) == 3
    failed = read_metrics(run_dir)[-1]
    step, kept = failed["step"], failed["checkpoint_step"]
    assert set(failed) == {"step", "status", "error", "checkpoint_step"} and failed["status"] == "FAILED"
    assert 0 < step <= case.steps and failed["error"].startswith(f"step {step}: ")
    assert kept is None or kept < step
    err = [line for line in capsys.readouterr().err.splitlines() if "kernattn" in line and "warning" not in line]
    where = (f"the last good checkpoint (step {kept}) is kept at {run_dir / 'ckpt.pt'}" if kept is not None
             else "no checkpoint had been written")
    assert err == [f"kernattn {case.command}: error: {case.run}: {failed['error']}; training stopped, {where}; "
                   f"lower {case.section}.lr (now 1e+30) or set {case.section}.grad_clip, then rerun with --fresh"]
    if kept is not None:  # never a checkpoint of broken weights
        ckpt = ckpt_of(run_dir)
        assert ckpt["step"] == kept and all(torch.isfinite(t).all() for t in ckpt["model"].values())
    assert not (run_dir / "final.json").exists()
    from mlflow import MlflowClient

    tracking = json.loads((run_dir / "config.json").read_text())["tracking"]
    run = MlflowClient(tracking["uri"]).get_run(tracking["mlflow_run_id"])
    assert run.info.status == "FAILED" and failed["error"] in run.data.tags["failure"]


@pytest.mark.parametrize("track", TRACKS)
def test_a_folder_from_other_params_is_refused_then_archived(tmp_path, prepared, track, capsys):
    """Refused in one line naming the file and the changed key; --stale archive moves it to
    .stale/ and trains afresh; a finished run is not retrained, unless --fresh."""
    case = CASES[track]
    params = write_params(case, tmp_path, prepared(track))
    run_dir = tmp_path / "runs" / case.run
    assert train(case, params, "--stop-after", "2") == 0
    old_ckpt = ckpt_of(run_dir)
    params = write_params(case, tmp_path, prepared(track), **{case.section: {"lr": 5.0e-4}})
    capsys.readouterr()
    assert train(case, params) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(run_dir / "ckpt.pt") in err and f"{case.section}.lr" in err
    assert train(case, params, "--stale", "archive") == 0
    archived = list((tmp_path / "runs" / ".stale").glob(f"{case.run}-*"))
    assert len(archived) == 1 and not (archived[0] / "final.json").exists()
    assert_equal_tree(ckpt_of(archived[0])["model"], old_ckpt["model"], "archived model")
    final = json.loads((run_dir / "final.json").read_text())
    assert final["steps"] == case.steps and final["fingerprint"] != old_ckpt["fingerprint"]
    capsys.readouterr()
    assert train(case, params) == 0 and "already finished" in capsys.readouterr().out
    assert train(case, params, "--fresh") == 0 and "from scratch" in capsys.readouterr().out
    assert json.loads((run_dir / "final.json").read_text())["fingerprint"] == final["fingerprint"]


def test_a_checkpoint_without_a_part_of_its_track_is_one_line(tmp_path, prepared, capsys):
    """A vision checkpoint without its EMA (as if written by another track): refused in one
    line naming the file and the part, not a traceback."""
    case = CASES["vision"]
    params = write_params(case, tmp_path, prepared("vision"))
    path = tmp_path / "runs" / case.run / "ckpt.pt"
    assert train(case, params, "--stop-after", "1") == 0
    ckpt = ckpt_of(path.parent)
    del ckpt["ema"]
    torch.save(ckpt, path)
    capsys.readouterr()
    assert train(case, params) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"kernattn train-vision: error: {path}: not a vision checkpoint (no ema); rerun with --fresh "
                   f"to train {case.run} from scratch")


def assert_complete_in(client, run, run_dir: Path, case: Case) -> None:
    """The MLflow run holds what the folder does: params, tags, every metric point, artifacts."""
    config = json.loads((run_dir / "config.json").read_text())
    assert run.info.status == "FINISHED" and run.info.run_name == case.run
    assert run.data.tags["track"] == case.track and run.data.tags["run_id"] == case.run
    # MLflow's own source tags: what its UI shows in the Source and Version columns
    assert run.data.tags["mlflow.source.git.commit"] == config["git_commit"]
    assert run.data.tags["mlflow.source.name"].startswith("kernattn train")
    assert run.data.params == mlflow_params(config)
    wanted: dict[str, list[int]] = {}
    for rec in read_metrics(run_dir):
        for key in metric_dict(rec):
            wanted.setdefault(key, []).append(rec["step"])
    assert "train_loss" in wanted and "val_loss" in wanted
    for key, steps in wanted.items():
        assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == steps, key
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"config.json", "final.json", "metrics.jsonl"}


@pytest.mark.parametrize("track", TRACKS)
def test_mlflow_logging_and_sync_into_a_store_that_lacks_the_run(tmp_path, prepared, track, capsys):
    from mlflow import MlflowClient

    case = CASES[track]
    params = write_params(case, tmp_path, prepared(track), tracking={"enabled": True})
    run_dir = tmp_path / "runs" / case.run
    assert train(case, params, "--stop-after", "4") == 0  # a resumed session keeps its MLflow run
    assert train(case, params) == 0
    final = json.loads((run_dir / "final.json").read_text())
    client = MlflowClient(final["tracking_uri"])
    run = client.get_run(final["mlflow_run_id"])
    experiment = client.get_experiment(run.info.experiment_id).name
    assert experiment == {"char": "kernattn-char-dickens-micro", "lm": "kernattn-lm-micro",
                          "vision": "kernattn-vision-micro"}[track]
    assert_complete_in(client, run, run_dir, case)

    # The server was "down": another store lacks the run; sync-mlflow uploads it, then does nothing.
    other = f"sqlite:///{tmp_path}/other/mlflow.db"
    capsys.readouterr()
    assert cli.main(["sync-mlflow", "--params", str(params), "--tracking-uri", other]) == 0
    assert f"{case.run}: uploaded" in capsys.readouterr().out
    synced = json.loads((run_dir / "final.json").read_text())
    store = MlflowClient(other)
    run = store.get_run(synced["mlflow_run_id"])
    assert store.get_experiment(run.info.experiment_id).name == experiment
    assert_complete_in(store, run, run_dir, case)
    before = (run_dir / "final.json").read_bytes()
    assert cli.main(["sync-mlflow", "--params", str(params), "--tracking-uri", other]) == 0
    assert "(0 changed now)" in capsys.readouterr().out and (run_dir / "final.json").read_bytes() == before


@pytest.mark.parametrize("track", ["char"])
def test_a_run_not_tracked_live_reaches_mlflow_through_the_recorded_sync(tmp_path, prepared, track, capsys):
    """tracking.live false: training opens no MLflow run (no MLflow start-up in the job); the DAG's
    sync_mlflow job (`sync-mlflow --record`) uploads it complete and records its ids beside the run,
    leaving final.json (the training's output) byte for byte as it was; a second sync changes nothing."""
    from mlflow import MlflowClient

    from kernattn.report.part import ReportContext
    from kernattn.tracking.client import read_synced

    case = CASES[track]
    store = f"sqlite:///{tmp_path}/mlflow.db"
    params = write_params(case, tmp_path, prepared(track), tracking={"enabled": True, "live": False, "uri": store})
    run_dir = tmp_path / "runs" / case.run
    assert train(case, params) == 0
    final = json.loads((run_dir / "final.json").read_text())
    assert final["mlflow_run_id"] is None and not (tmp_path / "mlflow.db").exists()
    before = (run_dir / "final.json").read_bytes()
    record = tmp_path / "results" / "synced.json"
    capsys.readouterr()
    assert cli.main(["sync-mlflow", "--params", str(params), "--record", str(record)]) == 0
    assert f"{case.run}: uploaded" in capsys.readouterr().out
    assert (run_dir / "final.json").read_bytes() == before
    ids = json.loads(record.read_text())[str(run_dir)]
    client = MlflowClient(store)
    assert_complete_in(client, client.get_run(ids["mlflow_run_id"]), run_dir, case)
    assert cli.main(["sync-mlflow", "--params", str(params), "--record", str(record)]) == 0
    assert "(0 changed now)" in capsys.readouterr().out and json.loads(record.read_text())[str(run_dir)] == ids
    # the report finds the ids where final.json has none
    ctx = ReportContext(SimpleNamespace(scale="micro"), str(params), tmp_path, papers={})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("kernattn.tracking.client.SYNCED_RECORD", str(record))
        assert read_synced("micro")[str(run_dir)] == ids and ctx.mlflow_ids(final, run_dir) == ids


def test_every_track_checkpoints_one_vocabulary(whole):
    """One key vocabulary across tracks: the engine's bookkeeping plus the track's parts."""
    from kernattn.engine.rundir import CKPT_KEYS

    for track, case in CASES.items():
        ckpt = ckpt_of(whole(track))
        # param_trace: every case's variant has parameters of its own (engine/trace.py); lr_schedule:
        # the rate of every step (engine/schedule.py; optional on resume: older checkpoints lack it)
        assert set(ckpt) == {*CKPT_KEYS, "mlflow_run_id", "world_size", "param_trace", "lr_schedule",
                             *case.parts}, track
        assert ckpt["lr_schedule"]["rates"].numel() == case.steps
        assert set(ckpt["loop"]) == {"acc", "acc_n", "last_train", "last_val"}
        final = json.loads((whole(track) / "final.json").read_text())
        assert final["track"] == track and final["steps"] == case.steps and math.isfinite(final["val_loss"])
        assert ckpt["fingerprint"] == final["fingerprint"] and ckpt["metrics_lines"] == len(read_metrics(whole(track)))
