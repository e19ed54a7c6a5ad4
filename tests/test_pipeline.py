"""The whole DAG on the micro scale (two rows, one seed, a few steps) through the real
Snakemake and the real DVC, in a scratch workspace; and the generated dvc.yaml is current."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kernattn.cli import main
from kernattn.config import load_params
from kernattn.dag.snakemake import OPTIONS
from tests import paths
from tests.workspace import BIN, REPO, command_env, make_workspace

MIRROR = paths.DICKENS
FASHION = paths.FASHION
LM_MIRROR = paths.C4


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws")


def run(cmd, cwd, timeout=600) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=command_env(), capture_output=True, text=True, timeout=timeout)
    return proc


def check_outputs(ws: Path) -> None:
    for name in ("train.npy", "val.npy", "vocab.json", "meta.json"):
        assert (ws / "results/micro/data/dickens" / name).is_file(), name
    for run_id in ("rope-s0", "gpa_dp_m8-s0"):
        final = json.loads((ws / "results/micro/runs" / run_id / "final.json").read_text())
        assert final["run_id"] == run_id and final["steps"] == 6
        assert final["val_loss"] > 0
    html = (ws / "report/index.html").read_text()
    assert "static RoPE" in html and "decaying periodic kernel" in html
    # the GPA analyses: the corpus once, and the micro scale's one GPA run
    assert (ws / "results/micro/analysis/corpus/summary.json").is_file()
    summary = json.loads((ws / "results/micro/analysis/gpa_dp_m8-s0/summary.json").read_text())
    assert summary["run_id"] == "gpa_dp_m8-s0" and not (ws / "results/micro/analysis/rope-s0").exists()
    assert 'data-bump-run="gpa_dp_m8-s0"' in html and "not analysed" not in html
    # the vision part (issue 5): three variants trained, DeiT and GKA analysed, counts, report section
    for run_id in ("deit-s0", "gka-s0", "vlt-s0"):
        final = json.loads((ws / "results/micro/vision/runs" / run_id / "final.json").read_text())
        assert final["run_id"] == run_id and 0 <= final["top1_ema"] <= 100
    for run_id in ("deit-s0", "gka-s0"):
        assert (ws / "results/micro/vision/analysis" / run_id / "rollout.png").is_file()
    assert (ws / "results/micro/vision/counts/counts.json").is_file()
    assert 'id="vision"' in html and "Missing <code>" not in html
    # the LM track (micro's lm.rows): the baseline and GKA at matched tokens and at matched FLOPs, evaluated
    for run_id in ("base-s0", "gka_tokens-s0", "gka_flops-s0"):
        ev = json.loads((ws / "results/micro/lm/eval" / f"{run_id}.json").read_text())
        assert ev["run_id"] == run_id and ev["val_bpb"] > 0 and set(ev["core"]["tasks"]) == {
            "hellaswag_zeroshot", "copa", "openbook_qa", "lambada_openai", "winograd", "winogrande"}
    assert 'data-lm-row="gka_flops"' in html and 'data-lm-row="gka_tokens"' in html and 'data-lm-row="base"' in html
    # the scale's own cost plan (the `plan` stage, issue 24): every training job of `all` and
    # `studies`, on this machine's CPU, shown by the report beside the committed paper plan
    plan = (ws / "results/micro/plan/micro.csv").read_text().splitlines()
    # 11 main-DAG trainings and evaluations, 2 cooldown branches (train.budgets [4]), 13 of the studies
    assert plan[0].startswith("stage,run,track") and len(plan) - 1 == 26
    assert json.loads((ws / "results/micro/plan/micro.json").read_text())["gpu"] == "cpu"
    assert (ws / "report/tables/plan-micro.csv").is_file()  # (the paper plan is results/plan/'s, not in this workspace)


def test_dvc_yaml_is_generated_from_params():
    assert main(["dvc-yaml", "--params", str(REPO / "params.yaml"), "--out", str(REPO / "dvc.yaml"), "--check"]) == 0
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert len(stages["train"]["foreach"]) == 19  # 12 rows (no_pos among them): 7 x 2 seeds, 5 x 1
    assert sorted(stages["analyze_gpa"]["foreach"]) == sorted([*(f"{r}-s{k}" for r in (
        "gpa_decay_m8", "gpa_dp_m8", "gpa_m64", "gpa_m64_rope") for k in (0, 1)), "gpa_m8-s0"])
    assert set(stages["report"]["deps"]) >= {"results/tiny/analysis/corpus/summary.json",
                                             "results/tiny/analysis/gpa_m8-s0/summary.json",
                                             "results/tiny/mlflow/synced.json"}  # tracking.live false: one upload
    assert all(s.get("do", s)["cmd"].startswith("kernattn ") for s in stages.values())
    # the tiny LM and vision rows (issue 15): two seeds where a claim compares the row, else one;
    # section 7 for DeiT and GKA
    assert stages["train_lm"]["foreach"] == ["base-s0", "base-s1", "gka_tokens-s0", "gka_tokens-s1", "gka_flops-s0",
                                             "gka_paper-s0", "gka_paper-s1", "gpa64_rope-s0", "alibi-s0"]
    assert stages["train_vision"]["foreach"] == [*(f"{r}-s{k}" for r in ("deit", "vlt", "gka") for k in (0, 1)), "nwg-s0"]
    assert stages["analyze_vision"]["foreach"] == ["deit-s0", "gka-s0"]
    # where a run is mirrored does not change what it computes: no stage but the upload reads tracking
    assert [name for name, s in stages.items() if "tracking" in sections_of(s)] == ["sync_mlflow"]
    # the bench builds the vision and LM models too: it reruns when their sections or code change
    assert {"bench", "model", "matrix", "vision", "lm"} == sections_of(stages["bench"])
    assert "src/kernattn/tracks" in stages["bench"]["deps"]  # every track's code: the vision and LM models too
    # the studies (issue 17): their stages, their runs, and none of their outputs feeds the report
    assert len(stages["train_wrap"]["foreach"]) == 36 and len(stages["train_gka_init"]["foreach"]) == 24  # 4 inits x 2 seeds x 3 tracks
    assert sorted(stages["prune"]["foreach"]) == sorted(f"{r}-s{k}" for r in ("gpa_dp_m8", "gpa_m64", "gpa_m64_rope")
                                                        for k in (0, 1))
    assert "results/tiny/runs/gpa_m64_rope-s1/final.json" in stages["wrap_study"]["deps"]
    assert not any("/studies/" in d for d in stages["report"]["deps"])
    assert "studies" in sections_of(stages["prune"]) and "studies" not in sections_of(stages["train"])
    # a cooldown branch (micro's budget sweep) depends on its own trunk run only: one run changed
    # reruns its branches, no other run's
    from kernattn.dag.dvc import dvc_stages
    cooldown = dvc_stages(load_params(REPO / "params.yaml", "micro"))["stages"]["cooldown"]
    assert cooldown["foreach"] == {"rope-s0-b4": {"dep3": "results/micro/runs/rope-s0/final.json"},
                                   "gpa_dp_m8-s0-b4": {"dep3": "results/micro/runs/gpa_dp_m8-s0/final.json"}}
    assert "${item.dep3}" in cooldown["do"]["deps"] and "--run ${key}" in cooldown["do"]["cmd"]
    assert not [d for d in cooldown["do"]["deps"] if d.startswith("results/micro/runs/")]


def test_per_run_dvc_inputs_name_each_runs_own():
    """A per-run stage whose inputs are the body's with the run id substituted keeps DVC's list
    foreach; one whose runs read paths not named by their own id gets a mapping foreach with
    exactly each run's inputs (shared ones literal, id-derived ones with ${key})."""
    from kernattn.dag.dvc import per_run_inputs
    from kernattn.stage import Stage

    plain = Stage("t", (), ("",), lambda r: [f"out/{r}.json"], inputs=lambda r: ["data.npy", f"in/{r}.json"],
                  runs=("a-s0", "b-s0"))
    assert per_run_inputs(plain) == (["data.npy", "in/${key}.json"], {})
    trunk = {"a-s0-b4": "a-s0", "b-s0-b4": "b-s0"}
    branch = Stage("c", (), ("",), lambda r: [f"out/{r}.json"],
                   inputs=lambda r: ["data.npy", f"log/{r}.txt", f"runs/{trunk[r]}/final.json"] if r in trunk
                   else ["data.npy", "runs/a-s0/final.json", "runs/b-s0/final.json"], runs=tuple(trunk))
    template, items = per_run_inputs(branch)
    assert template == ["data.npy", "log/${key}.txt", "${item.dep2}"]
    assert items == {"a-s0-b4": {"dep2": "runs/a-s0/final.json"}, "b-s0-b4": {"dep2": "runs/b-s0/final.json"}}


def test_a_run_reads_its_own_row_and_the_rows_that_set_its_budget():
    """Snakemake's per-run params: an LM run sees its row and the rows its compute refers to
    (the budget), a vision run its row, each at its seed; a row added to the section changes
    no other run's view (so reruns nothing else)."""
    from kernattn.dag.stages import stage_table

    tiny = load_params(REPO / "params.yaml", "tiny")
    table = stage_table(tiny)
    view = table["train_lm"].narrow("gka_flops-s0")["lm"]  # tiny trains gka_flops at one seed
    assert [r["name"] for r in view["rows"]] == ["base", "gka_flops"] and view["seeds"] == [0]
    assert view["lr"] == tiny.lm.lr and table["eval_lm"].narrow("gka_flops-s0") == {"lm": view}
    assert [r["name"] for r in table["train_vision"].narrow("nwg-s0")["vision"]["rows"]] == ["nwg"]
    more = load_params(REPO / "params.yaml", "tiny", {"lm.rows": [*tiny.raw["lm"]["rows"], {"name": "x", "variant": "gka"}],
                                                     "vision.rows": [*tiny.raw["vision"]["rows"], {"name": "y", "variant": "favor"}]})
    other = stage_table(more)
    assert "train_lm@x-s1" in other["train_lm"].jobs() and "train_vision@y-s0" in other["train_vision"].jobs()
    for stage, run in (("train_lm", "gka_flops-s0"), ("train_lm", "base-s1"), ("train_vision", "nwg-s0")):
        assert other[stage].narrow(run) == table[stage].narrow(run), (stage, run)


def sections_of(stage: dict) -> set[str]:
    """The params.yaml sections a dvc.yaml stage watches (`scales.<s>.train` is `train`)."""
    [keys] = stage.get("do", stage)["params"][0].values()
    return {k.split(".")[-1] for k in keys if k != "scale"}


# The Snakefile's rules that are targets, not stages: they train nothing and are not in dvc.yaml.
TARGET_RULES = ("all", "studies", "preflight")


def dry_run_jobs(ws: Path, *args: str) -> tuple[list[str], subprocess.CompletedProcess]:
    """The jobs a `snakemake -n` would run, as `rule` or `rule@run` (the target rules `all` and
    `studies` left out: they run nothing)."""
    proc = run([str(BIN / "snakemake"), "-n", "--cores", "1", *args], ws)
    jobs, current = [], None
    for line in (proc.stdout + "\n").splitlines():
        if (m := re.match(r"^(local)?rule (\w+):$", line)) or (not line.strip() and current):
            if current and current not in TARGET_RULES:
                jobs.append(current)
            current = m.group(2) if m else None
        elif current and (m := re.match(r"^\s+wildcards: run=(\S+)$", line)):
            current = f"{current}@{m.group(1)}"
    return sorted(jobs), proc


RULE_PARAMS = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.enums import Quietness
from snakemake.settings.types import OutputSettings, ResourceSettings
with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
    wf = api.workflow(resource_settings=ResourceSettings(cores=1), snakefile=Path("Snakefile"), workdir=Path("."))
    print(json.dumps({r.name: list(r.params._names) for r in wf._workflow.rules
                      if r.name not in ("all", "studies", "preflight")}))
"""


@pytest.mark.e2e
def test_snakemake_jobs_are_dvc_stages_watching_the_same_sections(workspace):
    """The two DAGs come from one stage table: the dry run's jobs (of `all` and `studies`) are
    dvc.yaml's stages (one name each, `rule@run` for per-run stages) and each rule reruns on the
    params sections its DVC stage watches."""
    assert main(["dvc-yaml", "--params", str(workspace / "params.yaml"), "--out", str(workspace / "dvc.yaml")]) == 0
    stages = yaml.safe_load((workspace / "dvc.yaml").read_text())["stages"]
    dvc_jobs = sorted(f"{n}@{r}" if r else n for n, s in stages.items() for r in s.get("foreach", [None]))
    jobs, proc = dry_run_jobs(workspace, "--forceall", "all", "studies")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert jobs == dvc_jobs
    assert {"train@rope-s0", "train_lm@base-s0", "train_vision@gka-s0", "bench", "report"} <= set(jobs)
    assert {"prepare_wrap", "train_wrap@gpa_dp_m8-rewrapped-s0", "train_gka_init@gka-init_median-s0",
            "prune@gpa_dp_m8-s0", "wrap_study", "gka_init_study", "prune_study"} <= set(jobs)
    main_jobs, proc = dry_run_jobs(workspace, "--forceall")  # `all` alone: the smoke DAG, no study
    assert proc.returncode == 0 and set(main_jobs) < set(jobs)
    assert not any(j.split("@")[0] in ("prepare_wrap", "train_wrap", "wrap_study", "train_gka_init",
                                       "gka_init_study", "prune", "prune_study") for j in main_jobs)
    api = run([sys.executable, "-c", RULE_PARAMS], workspace)
    assert api.returncode == 0, api.stderr[-3000:]
    rule_params = json.loads(api.stdout.strip().splitlines()[-1])
    assert set(rule_params) == set(stages)
    for name, stage in stages.items():  # and the command's options (no section: not a rerun trigger)
        assert set(rule_params[name]) == sections_of(stage) | {OPTIONS}, name


@pytest.mark.e2e
def test_snakemake_config_overrides_are_validated_with_their_source(workspace):
    """`--config` / `--configfile` go through the params schema: an unknown key or a bad
    value stops the parse with one line naming the key and where it came from."""
    cases = [(["--config", "learning_rat_typo=1"], "--config: unknown key 'learning_rat_typo'"),
             (["--config", "train={lr: -1}"], "--config: train.lr must be > 0"),
             (["--configfile", "override.yaml"], "override.yaml: unknown key 'lm.depht'")]
    (workspace / "override.yaml").write_text("lm: {depht: 3}\n")
    for args, needle in cases:
        _, proc = dry_run_jobs(workspace, *args)
        assert proc.returncode != 0
        errors = [line for line in proc.stderr.splitlines() if "error" in line]
        assert len(errors) == 1 and needle in errors[0], proc.stderr[-2000:]
    # scale and params stay Snakemake-config keys of ours, not overrides
    jobs, proc = dry_run_jobs(workspace, "--forceall", "--config", "scale=micro", "params=params.yaml")
    assert proc.returncode == 0 and "train@rope-s0" in jobs, proc.stderr[-2000:]


@pytest.mark.e2e
def test_snakemake_runs_the_micro_dag_and_then_has_nothing_to_do(micro_dag, tmp_path):
    assert micro_dag.returncode == 0, micro_dag.output[-3000:]
    workspace = micro_dag.copy(tmp_path)
    check_outputs(workspace)
    second = run([str(BIN / "snakemake"), "--cores", "2"], workspace)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Nothing to be done" in second.stdout + second.stderr
    # An override reruns exactly the stages that read its section, and the command gets it.
    (workspace / "override.yaml").write_text("train:\n  lr: 0.5\n")
    jobs, proc = dry_run_jobs(workspace, "--configfile", "override.yaml", "-p")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert jobs == ["analyze_gpa@gpa_dp_m8-s0", "cooldown@gpa_dp_m8-s0-b4", "cooldown@rope-s0-b4", "extrapolate_char",
                    "plan", "report", "train@gpa_dp_m8-s0", "train@rope-s0"]  # a run's cooldowns train again with it
    [overrides] = set(re.findall(r"--overrides (\S+)", proc.stdout))
    assert yaml.safe_load((workspace / overrides).read_text()) == {"train": {"lr": 0.5}}
    lr = load_params(workspace / "params.yaml").lm.lr
    jobs, _ = dry_run_jobs(workspace, "--config", f"lm={{lr: {lr}}}")
    assert jobs == []  # the value it has: nothing changes
    jobs, _ = dry_run_jobs(workspace, "--config", f"lm={{lr: {lr * 2}}}")
    assert jobs == sorted(["bench", "extrapolate_lm", "plan", "prepare_lm", "report", *(f"{s}@{r}-s0" for s in ("train_lm", "eval_lm")
                                                 for r in ("base", "gka_tokens", "gka_flops"))])


def test_install_profile_fills_site_values(tmp_path):
    dest = tmp_path / "slurm"
    assert main(["install-profile", "--partition", "cpu", "--gpu-partition", "gpu", "--gpu-model", "h100",
                 "--source", str(REPO / "profiles/slurm"), "--dest", str(dest)]) == 0
    profile = yaml.safe_load((dest / "config.yaml").read_text())
    assert profile["executor"] == "slurm"
    assert profile["default-resources"]["slurm_partition"] == "cpu"
    assert "slurm_account" not in profile["default-resources"]  # no account given: line dropped
    assert profile["set-resources"]["train"] == {
        "slurm_partition": "gpu", "gpu": 1, "ranks": 1, "nodes": 1, "gpu_model": "h100", "cpus_per_task": 8,
        "mem_mb": 32000, "runtime": 123,   # the committed paper plan's (results/plan)
        "slurm_extra": "--signal=TERM@120"}
    assert profile["slurm-requeue"] is True
    assert "SITE_" not in (dest / "config.yaml").read_text()


def test_profiles_name_only_stages_of_the_table():
    """profiles/ key resources by rule name: every name there is a stage (one name everywhere)."""
    from kernattn.dag.stages import stage_table

    # every scale's stages: a stage may exist at one scale only (cooldown: where train.budgets is set)
    names = {name for scale in ("tiny", "micro", "small", "paper")
             for name in stage_table(load_params(REPO / "params.yaml", scale))}
    for profile in ("slurm", "slurm-test"):
        doc = yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text())
        used = set(doc.get("set-threads", {})) | set(doc.get("set-resources", {}))
        assert used and used <= names, (profile, used - names)
