"""A new track is its folder and one line (issue 49): tests/fourth_track/toy, a track of its own,
put into a copy of the package under tracks/ with one line added to UNITS and a `toy:` section
added to params.yaml, goes through the CLI, dvc.yaml, `kernattn plan`, `kernattn preflight`,
the Snakemake DAG (beside the micro DAG's trained runs), the report page and the MLflow sync,
with nothing else of the package edited."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .paths import REPO
from .workspace import BIN, command_env

TOY = Path(__file__).parent / "fourth_track" / "toy"
UNIT_LINE = ('    _track("toy", "toy track", {"prepare-toy": ("data", "toy track: write its token stream"), '
             '"train-toy": ("track", "toy track: train one run (resumes from its checkpoint)")}),\n')
ANCHOR = "    # The studies (kernattn.studies)"  # the line of units.py the toy's entry goes above
TOY_SECTION = {"rows": [{"name": "softmax", "variant": "softmax"}, {"name": "gka", "variant": "gka"}],
               "seeds": [0], "max_steps": 6, "eval_every": 3}
TOY_RUNS = ("softmax-s0", "gka-s0")

pytestmark = pytest.mark.e2e


def package_with_toy(dest: Path) -> Path:
    """A copy of src/ with the toy track's folder and its line in UNITS: the folder it returns
    goes first on PYTHONPATH."""
    src = dest / "src"
    shutil.copytree(REPO / "src" / "kernattn", src / "kernattn", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(TOY, src / "kernattn" / "tracks" / "toy", ignore=shutil.ignore_patterns("__pycache__"))
    units = src / "kernattn" / "units.py"
    text = units.read_text()
    assert text.count(ANCHOR) == 1, "units.py changed its layout: move ANCHOR"
    units.write_text(text.replace(ANCHOR, UNIT_LINE + ANCHOR))
    return src


def differences(a: Path, b: Path, where: Path = Path("kernattn")) -> list[str]:
    """Files that differ or exist on one side only, between two package trees (caches left out),
    by their path under `where`. dircmp compares by size and time first: shallow=False below."""
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    out = [str(where / f) for f in cmp.left_only + cmp.right_only]
    out += [str(where / f) for f in cmp.common_files if not filecmp.cmp(a / f, b / f, shallow=False)]
    return out + [d for sub in cmp.common_dirs for d in differences(a / sub, b / sub, where / sub)]


def params_with_toy(source: Path, dest: Path) -> Path:
    doc = yaml.safe_load(source.read_text())
    doc["toy"] = dict(TOY_SECTION)
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def kernattn(src: Path, *args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = command_env(PYTHONPATH=str(src))
    return subprocess.run([str(BIN / "kernattn"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def toy_package(tmp_path_factory) -> Path:
    return package_with_toy(tmp_path_factory.mktemp("toy"))


def test_the_toy_is_its_folder_and_one_line_of_units(toy_package):
    changed = differences(REPO / "src" / "kernattn", toy_package / "kernattn")
    assert sorted(changed) == ["kernattn/tracks/toy", "kernattn/units.py"], changed
    old = (REPO / "src/kernattn/units.py").read_text().splitlines()
    new = (toy_package / "kernattn/units.py").read_text().splitlines()
    assert len(new) == len(old) + 1 and [line for line in new if line not in old] == [UNIT_LINE.rstrip("\n")]


def test_the_cli_dvc_yaml_plan_and_preflight_take_the_toy(toy_package, tmp_path):
    params = params_with_toy(REPO / "params.yaml", tmp_path / "params.yaml")
    shutil.copy(REPO / "Snakefile", tmp_path / "Snakefile")
    help_text = kernattn(toy_package, "--help", cwd=tmp_path).stdout
    assert "toy track" in help_text and "prepare-toy" in help_text and "train-toy" in help_text

    proc = kernattn(toy_package, "dvc-yaml", "--params", str(params), "--scale", "micro",
                    "--out", str(tmp_path / "dvc.yaml"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    stages = yaml.safe_load((tmp_path / "dvc.yaml").read_text())["stages"]
    assert stages["train_toy"]["foreach"] == list(TOY_RUNS) and "prepare_toy" in stages
    assert any("toy" in keys for entry in stages["plan"]["params"] for keys in entry.values())
    assert any("toy" in keys for entry in stages["report"]["params"] for keys in entry.values())

    proc = kernattn(toy_package, "plan", "--params", str(params), "--scale", "micro", "--gpu", "a100", "--mfu", "0.5",
                    "--out", str(tmp_path / "plan.csv"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import pandas as pd

    plan = pd.read_csv(tmp_path / "plan.csv")
    toy = plan[plan["stage"] == "train_toy"]
    assert sorted(toy["run"]) == sorted(TOY_RUNS) and set(toy["track"]) == {"toy"}
    assert (toy["flops"] > 0).all() and set(toy["steps"]) == {TOY_SECTION["max_steps"]}

    proc = kernattn(toy_package, "preflight", "--params", str(params), "--scale", "micro", "--tracks", "toy",
                    "--skip", "data,slurm", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    for run in ("softmax", "gka"):
        assert f"ok    step    toy/{run}:" in proc.stdout, proc.stdout[-3000:]


def test_the_toy_trains_in_the_dag_and_reaches_the_page_and_the_mlflow_sync(toy_package, tmp_path, micro_dag):
    """Beside the micro DAG's trained runs: `snakemake all` trains the toy's runs and rebuilds the
    plan and the report, whose page has the toy's part; `sync-mlflow` uploads its runs."""
    assert micro_dag.returncode == 0, micro_dag.output[-3000:]
    ws = micro_dag.copy(tmp_path)
    (ws / "src").unlink()
    (ws / "src").symlink_to(toy_package)  # what DVC and the code paths read
    params_with_toy(ws / "params.yaml", ws / "params.yaml")
    env = {**os.environ, **command_env(PYTHONPATH=str(toy_package))}
    proc = subprocess.run([str(BIN / "snakemake"), "--cores", "2", "all"], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = proc.stderr + proc.stdout
    assert "rule train_toy:" in ran and "rule train:" not in ran, ran[-3000:]  # only what reads the toy reran
    for run_id in TOY_RUNS:
        final = json.loads((ws / "results/micro/toy/runs" / run_id / "final.json").read_text())
        assert final["steps"] == TOY_SECTION["max_steps"] and final["val_loss"] > 0
    page = (ws / "report/index.html").read_text()
    assert "Toy track: copying a lagged token" in page and 'id="toy-table"' in page and "gka-s0" in page
    again = subprocess.run([str(BIN / "snakemake"), "-n", "--cores", "1", "all"], cwd=ws, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stderr[-2000:]

    store = f"sqlite:///{tmp_path / 'synced.db'}"
    proc = kernattn(toy_package, "sync-mlflow", "--tracking-uri", store, cwd=ws)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("kernattn-toy-micro")
    assert experiment is not None, [e.name for e in client.search_experiments()]
    synced = {r.data.tags["run_id"] for r in client.search_runs([experiment.experiment_id])}
    assert synced == set(TOY_RUNS)
