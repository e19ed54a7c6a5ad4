"""The pipeline on a real one-node SLURM cluster through `snakemake --profile slurm all`.

The profile is profiles/slurm-test, installed by `kernattn install-profile` exactly as a user
installs profiles/slurm; it differs from profiles/slurm only in the status command (squeue:
the test cluster has no accounting database) and the first status delay (checked below).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from . import harness
from .conftest import LM_RUNS, MICRO_RUNS
from ..workspace import BIN, REPO, command_env, make_workspace
from .services import install_test_profile

pytestmark = [pytest.mark.infra, pytest.mark.e2e]

# What profiles/slurm-test may change, and why (see its header).
TEST_PROFILE_CHANGES = {"slurm-status-command": "squeue", "slurm-init-seconds-before-status-checks": 1}


def _tail(text: str, n: int = 4000) -> str:
    return text[-n:]


def _slurm_logs(ws) -> str:
    logs = sorted((ws / "results" / "logs").rglob("*.log"))
    return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-1500:]}" for p in logs[-8:])


def test_test_profile_differs_from_the_shipped_one_only_where_the_test_cluster_requires():
    shipped = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    test = yaml.safe_load((REPO / "profiles" / "slurm-test" / "config.yaml").read_text())
    assert shipped["executor"] == "slurm" and shipped["slurm-status-command"] == "sacct"
    for key, value in TEST_PROFILE_CHANGES.items():
        assert test.pop(key) == value
        shipped.pop(key)
    assert test == shipped
    # runtime resources: in the profile, never in params.yaml
    train = shipped["set-resources"]["train"]
    assert train["gpu"] == 1 and train["runtime"] > 0 and shipped["default-resources"]["runtime"] > 0
    def keys(tree):
        for k, v in tree.items() if isinstance(tree, dict) else ():
            yield k
            yield from keys(v)

    found = set(keys(yaml.safe_load((REPO / "params.yaml").read_text())))
    assert not found & {"slurm_partition", "slurm_account", "runtime", "mem_mb", "gpu", "gpu_model", "cpus_per_task"}


def test_the_harness_says_why_it_cannot_run(monkeypatch):
    """Skip reasons: not root, or no apt-get (the fixtures skip with this text)."""
    monkeypatch.setattr(harness, "which", lambda name: None)
    monkeypatch.setattr(harness.os, "geteuid", lambda: 1000)
    reason, _ = harness.ensure_packages(("slurm-wlm",), ("slurmctld",))
    assert reason and "not root" in reason
    monkeypatch.setattr(harness.os, "geteuid", lambda: 0)
    reason, _ = harness.ensure_packages(("slurm-wlm",), ("slurmctld",))
    assert reason and "no apt-get" in reason


def test_install_profile_sets_the_status_command(tmp_path):
    dest = tmp_path / "slurm"
    proc = subprocess.run([str(BIN / "kernattn"), "install-profile", "--partition", "cpu", "--status-command",
                           "squeue", "--source", str(REPO / "profiles" / "slurm"), "--dest", str(dest)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    profile = yaml.safe_load((dest / "config.yaml").read_text())
    assert profile["slurm-status-command"] == "squeue"
    assert profile["default-resources"]["slurm_partition"] == "cpu"
    assert "SITE_" not in (dest / "config.yaml").read_text()


def test_snakemake_profile_slurm_all_runs_the_micro_pipeline(slurm_cluster, micro_dag, mlflow_server, tmp_path):
    run = micro_dag
    assert run.via == "slurm", run.why
    assert run.returncode == 0, f"{_tail(run.output)}\n{_slurm_logs(run.ws)}"
    assert "Nothing to be done" not in run.output
    # every output of the DAG, as snakemake itself lists them, exists and is up to date
    summary = subprocess.run([str(BIN / "snakemake"), "--cores", "1", "--summary"], cwd=run.copy(tmp_path, tracking="server"),
                             env=run.env(slurm_cluster), capture_output=True, text=True, timeout=300)
    assert summary.returncode == 0, summary.stderr[-2000:]
    rows = [line.split("\t") for line in summary.stdout.splitlines()[1:] if "\t" in line]
    assert rows, summary.stdout
    rules = set()
    for row in rows:
        path, rule, status = run.ws / row[0], row[2], row[4]
        rules.add(rule)
        assert path.is_file() and path.stat().st_size > 0, row
        assert status == "ok", row
    assert {"prepare", "train", "report"} <= rules
    for run_id in MICRO_RUNS:
        final = json.loads((run.ws / "results/micro/runs" / run_id / "final.json").read_text())
        assert final["run_id"] == run_id and final["steps"] == 6 and final["val_loss"] > 0
        assert final["tracking_uri"] == mlflow_server.url and final["mlflow_run_id"]
        mlrun = mlflow_server.client().get_run(final["mlflow_run_id"])
        assert mlrun.info.status == "FINISHED" and mlrun.info.run_name == run_id
    html = (run.ws / "report" / "index.html").read_text()
    assert "static RoPE" in html and "decaying periodic kernel" in html
    for src in re.findall(r'<img[^>]+src="([^"]+)"', html):
        assert (run.ws / "report" / src).is_file(), src
    # every rule but the local ones (`all`, the report) ran as a SLURM job
    submitted = re.findall(r"submitted with SLURM jobid (\d+)", run.output)
    n_jobs = len([r for r in rows if r[2] not in ("all", "report")])  # upper bound: rules with several outputs list each
    assert 1 + len(MICRO_RUNS) + 1 <= len(submitted) <= n_jobs, run.output[-3000:]


def _scontrol_jobs(cluster) -> list[dict]:
    proc = subprocess.run([harness.which("scontrol"), "show", "job", "-o"], env=cluster.env(),
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    jobs = []
    for line in proc.stdout.splitlines():
        fields = dict(re.findall(r"(\w[\w:/]*)=(\S*)", line))
        jobs.append(fields)
    return jobs


def _time_limit(minutes: int) -> str:
    """SLURM's TimeLimit text for a runtime in minutes ([D-]HH:MM:SS)."""
    days, rest = divmod(minutes, 24 * 60)
    clock = f"{rest // 60:02d}:{rest % 60:02d}:00"
    return f"{days}-{clock}" if days else clock


def test_jobs_got_the_profile_resources(slurm_cluster, micro_dag):
    """Every job got its rule's resources from the profile (default-resources, then the rule's
    set-resources): partition, CPUs, time limit, and a GPU only where the profile asks for one
    (char, vision and LM training, LM evaluation, the benchmark); all completed with exit 0."""
    assert micro_dag.via == "slurm" and micro_dag.returncode == 0, micro_dag.why
    ids = set(re.findall(r"submitted with SLURM jobid (\d+)", micro_dag.output))
    jobs = [j for j in _scontrol_jobs(slurm_cluster) if j.get("JobId") in ids]
    assert len(jobs) == len(ids), "slurmctld forgot jobs (MinJobAge?)"
    profile = yaml.safe_load((REPO / "profiles" / "slurm-test" / "config.yaml").read_text())
    rules = []
    for job in jobs:
        rule = re.match(r"rule_(.+?)(?:_wildcards_.*)?$", job.get("Comment", "")).group(1)  # the plugin's comment
        rules.append(rule)
        want = {**profile["default-resources"], **profile.get("set-resources", {}).get(rule, {})}
        assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", job
        assert job["Partition"] == harness.PARTITION, job
        assert job["NumCPUs"] == str(want["cpus_per_task"]), (rule, job)
        assert job["TimeLimit"] == _time_limit(want["runtime"]), (rule, job)
        gpu = "gres/gpu=1" in job.get("TRES", "") or "gpu" in job.get("TresPerJob", "")
        assert gpu == bool(want.get("gpu")), (rule, job)
    assert rules.count("train") == len(MICRO_RUNS), rules
    assert rules.count("train_lm") == rules.count("eval_lm") == len(LM_RUNS), rules
    assert {"train_vision", "bench"} <= set(rules), rules
    assert "report" not in rules  # a local rule: it ran beside Snakemake, not in the queue


def test_a_second_run_has_nothing_to_do(slurm_cluster, micro_dag, tmp_path):
    assert micro_dag.via == "slurm" and micro_dag.returncode == 0, micro_dag.why
    again = subprocess.run(micro_dag.cmd, cwd=micro_dag.copy(tmp_path, tracking="server"),
                           env=micro_dag.env(slurm_cluster), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Nothing to be done" in again.stdout + again.stderr


def test_a_failing_rule_makes_snakemake_exit_nonzero(slurm_cluster, tmp_path):
    """A corpus mirror that does not exist, so `prepare` fails, submitted together with an
    independent job (prepare_lm) that must not be left running. Only these two targets: with
    `all`, the LM and vision branches, which do not read the corpus, would go on for about ten
    more SLURM jobs that this test does not look at."""
    bad = make_workspace(tmp_path / "ws", tracking={"enabled": False}, mirror=tmp_path / "no-such-corpus.txt.gz")
    env = slurm_cluster.env(command_env(XDG_CONFIG_HOME=tmp_path / "xdg"))
    installed = install_test_profile(env)
    assert installed.returncode == 0, installed.stderr
    proc = subprocess.run([str(BIN / "snakemake"), "--profile", "slurm", "prepare", "prepare_lm", "--retries", "0"],
                          cwd=bad, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode != 0, out[-3000:]
    assert "Error in rule prepare" in out, out[-3000:]
    assert re.search(r"SLURM-job '\d+' failed", out), out[-3000:]
    assert not (bad / "results/micro/data/dickens/train.npy").exists()
    # both jobs were submitted, and each has ended (slurmctld lists ended jobs for MinJobAge):
    # none is left running. The cluster is the session's, so other tests' jobs may run beside.
    submitted = set(re.findall(r"submitted with SLURM jobid (\d+)", out))
    assert len(submitted) == 2, out[-3000:]
    def states() -> dict[str, str]:
        proc = subprocess.run([harness.which("squeue"), "-h", "-t", "all", "-j", ",".join(sorted(submitted)),
                               "-o", "%i %T"], env=slurm_cluster.env(), capture_output=True, text=True, timeout=30)
        return dict(line.split() for line in proc.stdout.splitlines())

    final = ("COMPLETED", "FAILED", "CANCELLED")
    try:  # a cancelled job may be COMPLETING for a moment after snakemake exits
        harness.wait_for(lambda: all(state in final for state in states().values()), 30, 0.5, "the jobs to end")
    except TimeoutError:
        pass
    ended = states()
    assert set(ended) == submitted and all(state in final for state in ended.values()), ended


def test_a_training_job_with_two_gpus_trains_as_two_ranks(slurm_cluster, tmp_path):
    """`kernattn install-profile --gpus train=2` (issue 24): the train job asks SLURM for 2 GPUs
    and its command starts 2 ranks with torchrun (CPU, gloo, at micro scale); the run records
    a world of 2 and ends like any run."""
    from kernattn.config import load_params
    from kernattn.dag.stages import stage_table

    ws = make_workspace(tmp_path / "ws", tracking={"enabled": False})
    env = slurm_cluster.env(command_env(XDG_CONFIG_HOME=tmp_path / "xdg"))
    installed = install_test_profile(env, "--gpus", "train=2")
    assert installed.returncode == 0, installed.stderr
    [target] = stage_table(load_params(ws / "params.yaml", "micro"))["train"].outputs(MICRO_RUNS[0])
    proc = subprocess.run([str(BIN / "snakemake"), "--profile", "slurm", target], cwd=ws, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, _tail(proc.stdout + proc.stderr) + _slurm_logs(ws)
    run_dir = (ws / target).parent
    config = json.loads((run_dir / "config.json").read_text())
    assert config["world_size"] == 2 and (run_dir / "final.json").is_file()
    ids = set(re.findall(r"submitted with SLURM jobid (\d+)", proc.stdout + proc.stderr))
    train = [j for j in _scontrol_jobs(slurm_cluster) if j.get("JobId") in ids and "rule_train_" in j.get("Comment", "")]
    assert len(train) == 1 and "gpu" in train[0].get("TresPerJob", "") + train[0].get("TRES", ""), train
    assert "gres/gpu=2" in train[0].get("TRES", "") or ":2" in train[0].get("TresPerJob", ""), train


def test_preflight_judges_the_installed_profile_against_the_test_cluster(slurm_cluster, tmp_path):
    """`kernattn preflight --skip data,step` on the one-node cluster: the installed test profile
    fits (its partition exists, no time limit, 1 GPU of 8); asking 16 GPUs of one node fails,
    naming the stage and what the nodes have."""
    env = slurm_cluster.env()
    dest = tmp_path / "slurm"
    installed = install_test_profile(env, "--dest", str(dest))
    assert installed.returncode == 0, installed.stderr

    def preflight(profile: Path):
        return subprocess.run([str(BIN / "kernattn"), "preflight", "--scale", "micro", "--skip", "data,step",
                               "--profile", str(profile)], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=120)

    ok = preflight(dest / "config.yaml")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    lines = [line for line in ok.stdout.splitlines() if "  slurm  " in line]
    assert any(line.startswith("ok") and "train_lm: partition " + harness.PARTITION in line for line in lines), lines
    assert all(line.startswith("ok") for line in lines), lines
    doc = yaml.safe_load((dest / "config.yaml").read_text())
    doc["set-resources"]["train_lm"]["gpu"] = 2 * harness.NODE_GPUS
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    refused = preflight(bad)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert any(line.startswith("FAIL") and "train_lm" in line
               and f"{2 * harness.NODE_GPUS} GPUs per node asked, its nodes have at most {harness.NODE_GPUS}" in line
               for line in refused.stdout.splitlines()), refused.stdout


def test_slurm_parses_the_plugins_multi_node_line_and_refuses_only_the_node_count(slurm_cluster, tmp_path):
    """The SLURM executor plugin's own sbatch options for a profile entry of `--nodes STAGE=M`
    (one task per node with the node's GPUs, tasks_per_gpu: 0), given to `sbatch --test-only` on
    the one-node test cluster: one node is accepted; two are refused for the node count alone,
    never for the task and GPU options (--ntasks-per-gpu beside a per-node gres: plugin issues
    #316, #373). The test cluster has one node, so a 2-node job cannot really run here."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    env = slurm_cluster.env()

    def test_only(nodes: int) -> subprocess.CompletedProcess:
        dest = tmp_path / f"nodes{nodes}"
        installed = install_test_profile(env, "--dest", str(dest), "--gpus", f"train_lm={harness.NODE_GPUS}",
                                          "--nodes", f"train_lm={nodes}")
        assert installed.returncode == 0, installed.stderr
        entry = yaml.safe_load((dest / "config.yaml").read_text())["set-resources"]["train_lm"]
        job = SimpleNamespace(resources=_Resources(entry), threads=1, name="train_lm", is_group=lambda: False)
        params = {"run_uuid": "u", "slurm_logfile": str(tmp_path / "job.log"), "comment_str": "preflight",
                  "account": "", "partition": f"-p {harness.PARTITION}", "workdir": str(tmp_path)}
        line = get_submit_command(job, params) + set_gres_string(job)
        assert f"--nodes={nodes}" in line and "--ntasks-per-gpu" not in line, line
        assert line.startswith("sbatch "), line
        return subprocess.run(f"sbatch --test-only {line.removeprefix('sbatch ')} --wrap true", shell=True, env=env,
                              capture_output=True, text=True, timeout=60)

    one = test_only(1)
    assert one.returncode == 0 and "to start at" in one.stderr, one.stderr
    two = test_only(2)
    assert two.returncode != 0 and "node" in two.stderr.lower(), two.stderr
    assert "mutually exclusive" not in two.stderr and "ntasks-per-gpu" not in two.stderr, two.stderr


class _Resources(dict):
    """A job's resources as the SLURM plugin reads them (`.get` and attributes)."""

    __getattr__ = dict.get
