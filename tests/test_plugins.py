"""Attention plugins: the worked example (examples/plugins/cosine_attention.py) loads by each of
the three mechanisms and passes `kernattn check-variant`; three broken copies each fail the
check that catches them; a broken plugin stops in one line. Each case in its own process: a
registration lasts as long as its process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from . import paths

BIN = Path(sys.executable).parent
EXAMPLE = paths.REPO / "examples" / "plugins" / "cosine_attention.py"


def kernattn(*args: str, cwd: Path = paths.REPO, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "kernattn"), *args], cwd=cwd, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=300)


def params_with(tmp_path: Path, plugins: list[str] | None = None, rows: list[dict] | None = None) -> Path:
    """params.yaml copied into tmp_path, with `plugins:` and extra char rows (validated at every
    scale; micro trains only its own `only` rows)."""
    doc = yaml.safe_load((paths.REPO / "params.yaml").read_text())
    if plugins is not None:
        doc["plugins"] = plugins
    if rows:
        doc["matrix"]["rows"] = [*doc["matrix"]["rows"], *rows]
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.e2e
def test_the_worked_example_loads_from_params_yaml_and_conforms(tmp_path):
    """A path relative to the params file, and a micro row naming the plugin's variant."""
    shutil.copy(EXAMPLE, tmp_path / "cosine_attention.py")
    params = params_with(tmp_path, ["cosine_attention.py"], [{"name": "cos", "variant": "cosine"}])
    proc = kernattn("check-variant", "cosine", "--params", str(params))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[1] for line in lines[:-1]] == ["reference", "padded", "normalised", "causal", "finite",
                                                       "determinism", "precision", "state_dict", "training", "resume",
                                                       "ddp"]
    assert all(line.startswith("ok") for line in lines[:-1]) and lines[-1].endswith("cosine: conforms")


@pytest.mark.e2e
def test_the_worked_example_loads_from_the_environment_and_from_an_entry_point(tmp_path):
    by_env = kernattn("check-variant", "cosine", "--skip-training", KERNATTN_PLUGINS=str(EXAMPLE))
    assert by_env.returncode == 0, by_env.stdout + by_env.stderr
    # an installed package: a module and its dist-info with the entry point, on sys.path
    site = tmp_path / "site"
    (site / "cosine_plugin-1.0.dist-info").mkdir(parents=True)
    shutil.copy(EXAMPLE, site / "cosine_plugin.py")
    (site / "cosine_plugin-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: cosine-plugin\n"
                                                                   "Version: 1.0\n")
    (site / "cosine_plugin-1.0.dist-info" / "entry_points.txt").write_text(
        "[kernattn.attention]\ncosine = cosine_plugin\n")
    by_ep = kernattn("check-variant", "cosine", "--skip-training", PYTHONPATH=str(site))
    assert by_ep.returncode == 0, by_ep.stdout + by_ep.stderr
    assert by_ep.stdout.splitlines()[-1].endswith("cosine: conforms")


@pytest.mark.e2e
def test_the_worked_example_loads_from_an_overrides_file_and_reaches_the_2_rank_check(tmp_path):
    """`--overrides FILE` naming the plugin: check-variant loads it, and hands it on to its
    training checks (the 2-rank run is a process of its own, with its own overrides file)."""
    over = tmp_path / "over.yaml"
    over.write_text(yaml.safe_dump({"plugins": [str(EXAMPLE)]}))
    proc = kernattn("check-variant", "cosine", "--overrides", str(over))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[:2] for line in lines[-4:-1]] == [["ok", "training"], ["ok", "resume"], ["ok", "ddp"]], lines
    assert lines[-1].endswith("cosine: conforms")


BROKEN = {
    # the fast path lets every query see every key
    "causal": ("is_causal=self.causal and mask is None", "is_causal=False"),
    # the fast path 1e-3 away from its own reference
    "reference": ("return F.scaled_dot_product_attention(", "return 1e-3 + F.scaled_dot_product_attention("),
    # a scale that grows with the sequence's length: padding a sequence changes what its tokens see
    "padded": ("return SimpleNamespace(q=F.normalize(q, dim=-1),",
               "return SimpleNamespace(q=F.normalize(q, dim=-1) * math.log(1 + x.shape[1]),"),
    # a gradient that is not a number (the forward unchanged)
    "finite": ("q = p.q / self.log_tau.exp()", "q = p.q / self.log_tau.exp() + 0.0 * torch.sqrt(-self.log_tau.exp()).sum()"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("check", sorted(BROKEN))
def test_a_broken_copy_fails_the_check_that_catches_it(tmp_path, check):
    old, new = BROKEN[check]
    text = EXAMPLE.read_text()
    assert old in text
    (tmp_path / "broken.py").write_text(text.replace(old, new))
    proc = kernattn("check-variant", "cosine", "--skip-training", "--plugins", str(tmp_path / "broken.py"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert any(line.split()[1] == check for line in failed), proc.stdout
    assert "FAILED" in proc.stdout.splitlines()[-1] and check in proc.stdout.splitlines()[-1]


@pytest.mark.e2e
@pytest.mark.parametrize("edit, words", [
    (("import math\n", "import math\nimport no_such_module_here\n"), "failed to import (ModuleNotFoundError"),
    (("init_tau: float = positive(0.1, \"initial temperature of every head\")", "init_tau: float"),
     "option(s) init_tau of CosineOptions need a default"),
    (("@register(\"cosine\"", "@register(\"softmax\""), "attention variant 'softmax' registered twice"),
])
def test_a_broken_plugin_stops_in_one_line_naming_it(tmp_path, edit, words):
    (tmp_path / "bad.py").write_text(EXAMPLE.read_text().replace(*edit))
    params = params_with(tmp_path, ["bad.py"])
    proc = kernattn("train", "--params", str(params), "--scale", "micro", "--run", "rope-s0")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert words in line and "bad.py" in line, line


@pytest.mark.e2e
def test_an_unknown_variant_points_to_plugins(tmp_path):
    params = params_with(tmp_path, rows=[{"name": "mine", "variant": "my_sigmoid"}])
    proc = kernattn("train", "--params", str(params), "--scale", "micro", "--run", "rope-s0")
    assert proc.returncode == 2
    assert "unknown attention variant 'my_sigmoid'" in proc.stderr and "plugins:" in proc.stderr, proc.stderr


@pytest.mark.e2e
def test_the_same_plugin_named_twice_loads_once(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / "cosine_attention.py")
    params = params_with(tmp_path, ["cosine_attention.py", str(tmp_path / "cosine_attention.py")])
    code = ("import json; from kernattn.config import load_params; "
            f"p = load_params({str(params)!r}, 'micro'); print(json.dumps(list(p.plugins)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KERNATTN_PLUGINS": str(tmp_path / "cosine_attention.py")})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [str((tmp_path / "cosine_attention.py").resolve())]


STAGE_INPUTS = """
import json, sys
from kernattn.config import load_params
from kernattn.dag.stages import stage_table
train = stage_table(load_params("params.yaml"))["train"]
print(json.dumps({run: train.inputs(run) for run in ("cos-s0", "rope-s0")}))
"""


@pytest.mark.e2e
def test_a_plugin_row_trains_in_the_dag_is_recorded_and_its_edit_reruns_exactly_its_runs(tmp_path, micro_dag):
    """The micro DAG's workspace with params that name the worked example and train a row of it:
    the Snakemake job loads it, config.json / final.json / MLflow record its file's sha256, the
    report shows its row beside the built-ins', the plugin is an input of its run only, and
    editing it makes that run due again."""
    import hashlib

    from .test_pipeline import run

    assert micro_dag.returncode == 0, micro_dag.output[-3000:]
    ws = micro_dag.copy(tmp_path, tracking="store")  # the built-ins' runs, trained once per session
    (ws / "plugins").mkdir()
    plugin = ws / "plugins" / "cosine_attention.py"
    shutil.copy(EXAMPLE, plugin)
    doc = yaml.safe_load((ws / "params.yaml").read_text())
    doc["plugins"] = ["plugins/cosine_attention.py"]
    doc["matrix"]["rows"].append({"name": "cos", "variant": "cosine", "label": "cosine kernel (plugin)"})
    doc["scales"]["micro"]["matrix"]["only"] = ["rope", "gpa_dp_m8", "cos"]
    (ws / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    final = "results/micro/runs/cos-s0/final.json"
    proc = run([str(BIN / "snakemake"), "--cores", "2", final], ws)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sha = hashlib.sha256(plugin.read_bytes()).hexdigest()
    config = json.loads((ws / "results/micro/runs/cos-s0/config.json").read_text())
    assert config["plugins"] == [{"variant": "cosine", "source": str(plugin.resolve()), "file": str(plugin.resolve()),
                                  "sha256": sha}]
    head = json.loads((ws / final).read_text())
    assert head["variant"] == "cosine" and head["plugin"].endswith(f"sha256:{sha}")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{ws / 'results/mlflow/mlflow.db'}")
    [mlrun] = [client.get_run(head["mlflow_run_id"])]
    assert mlrun.data.tags["plugin"] == head["plugin"] and sha in mlrun.data.params["plugins"]
    inputs = subprocess.run([sys.executable, "-c", STAGE_INPUTS], cwd=ws, capture_output=True, text=True, timeout=120)
    assert inputs.returncode == 0, inputs.stderr[-2000:]
    by_run = json.loads(inputs.stdout.strip().splitlines()[-1])
    assert "plugins/cosine_attention.py" in by_run["cos-s0"] and "plugins/cosine_attention.py" not in by_run["rope-s0"]
    assert "Nothing to be done" in run([str(BIN / "snakemake"), "-n", "--cores", "1", final], ws).stdout
    # the whole DAG again: the report has the plugin's row in its runs table, beside the built-ins
    proc = run([str(BIN / "snakemake"), "--cores", "2"], ws)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = (ws / "report/tables/runs.csv").read_text()
    assert "cos-s0,cos,0,cosine kernel (plugin)" in runs and "rope-s0,rope,0" in runs
    assert "cosine kernel (plugin)" in (ws / "report/index.html").read_text()
    plugin.write_text(plugin.read_text() + "\n# an edit\n")
    again = run([str(BIN / "snakemake"), "-n", "--cores", "1", final], ws)
    assert "rule train:" in again.stdout and "wildcards: run=cos-s0" in again.stdout, again.stdout[-2000:]
    assert "updated input files" in again.stdout.lower() or "input files updated" in again.stdout.lower(), \
        again.stdout[-2000:]


@pytest.mark.e2e
def test_a_plugin_variant_builds_and_steps_in_every_track(tmp_path):
    """`variant: cosine` in a char, an LM and a ViT row: the micro preflight builds each at its
    track's shapes, steps, checkpoints and resumes it, and `kernattn plan` counts its FLOPs."""
    shutil.copy(EXAMPLE, tmp_path / "cosine_attention.py")
    doc = yaml.safe_load((paths.REPO / "params.yaml").read_text())
    doc["plugins"] = ["cosine_attention.py"]
    for section in (doc["matrix"], doc["lm"], doc["vision"], doc["scales"]["micro"]["lm"], doc["scales"]["micro"]["vision"]):
        section["rows"] = [*section["rows"], {"name": "cos", "variant": "cosine"}]
    doc["scales"]["micro"]["matrix"]["only"] = [*doc["scales"]["micro"]["matrix"]["only"], "cos"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp_path / "preflight.json"
    proc = kernattn("preflight", "--params", str(tmp_path / "params.yaml"), "--scale", "micro", "--rows", "cos",
                    "--skip", "data,slurm", "--json", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = {i["subject"]: i for i in json.loads(out.read_text())["items"] if i["check"] == "step"}
    assert set(steps) == {"char/cos", "lm/cos", "vision/cos"}
    assert all(i["status"] == "ok" and i["values"]["same_weights"] for i in steps.values())
    plan = kernattn("plan", "--params", str(tmp_path / "params.yaml"), "--scale", "micro", "--gpu", "cpu",
                    "--out", str(tmp_path / "plan.csv"), cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    import pandas as pd

    rows = pd.read_csv(tmp_path / "plan.csv")
    cos = rows[rows["run"] == "cos-s0"]
    assert set(cos["stage"]) >= {"train", "train_lm", "train_vision"} and (cos["flops"] > 0).all()


def test_a_plugins_key_that_is_not_a_list_of_names_is_one_line(tmp_path):
    from kernattn.config import load_params
    from kernattn.errors import ParamsError

    params = params_with(tmp_path, [])
    doc = yaml.safe_load(params.read_text())
    doc["plugins"] = 3
    params.write_text(yaml.safe_dump(doc))
    with pytest.raises(ParamsError, match=r"params.yaml: plugins must be a list of \.py paths or module names, got 3"):
        load_params(params, "micro")


@pytest.mark.e2e
def test_dvc_yaml_gives_a_plugin_file_to_the_runs_that_train_it_only(tmp_path):
    """DVC's foreach has one body: the train stage splits into the built-ins' runs (`train`,
    no plugin file among their deps) and the plugin's (`train-cosine_attention`, its file a dep);
    `dvc stage list` reads the result, and the runs are those of the Snakefile's train rule."""
    shutil.copy(EXAMPLE, tmp_path / "cosine_attention.py")
    params = params_with(tmp_path, ["cosine_attention.py"], [{"name": "cos", "variant": "cosine"}])
    doc = yaml.safe_load(params.read_text())
    doc["scales"]["micro"]["matrix"]["only"] = ["rope", "cos"]
    params.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = kernattn("dvc-yaml", "--params", "params.yaml", "--scale", "micro", "--out", "dvc.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    stages = yaml.safe_load((tmp_path / "dvc.yaml").read_text())["stages"]
    assert stages["train"]["foreach"] == ["rope-s0"] and stages["train-cosine_attention"]["foreach"] == ["cos-s0"]
    assert "cosine_attention.py" not in stages["train"]["do"]["deps"]
    assert "cosine_attention.py" in stages["train-cosine_attention"]["do"]["deps"]
    assert stages["train-cosine_attention"]["do"]["outs"] == stages["train"]["do"]["outs"]
    for cmd in (["git", "init", "-q"], [str(BIN / "dvc"), "init", "-q"]):
        subprocess.run(cmd, cwd=tmp_path, check=True, capture_output=True, timeout=120)
    listed = subprocess.run([str(BIN / "dvc"), "stage", "list"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert "train@rope-s0" in names and "train-cosine_attention@cos-s0" in names
