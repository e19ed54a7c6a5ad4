"""Launching a training run on many GPUs the Snakemake way (issue 24): the world of a run is a
profile resource (`ranks` per node, `nodes`), which the rule's command hands to
`kernattn train-* | eval-lm | prune --nproc N --nodes M` (engine/launch.py, tested in tests/test_ddp.py), and
`kernattn install-profile --gpus STAGE=N --nodes STAGE=M` writes it with the SLURM request."""

from __future__ import annotations

import pytest
import yaml

from kernattn.cli import main
from tests.test_pipeline import dry_run_jobs
from tests.workspace import REPO, make_workspace


def test_a_profiles_ranks_reach_the_training_command_and_nothing_else(tmp_path):
    ws = make_workspace(tmp_path / "ws")
    _, proc = dry_run_jobs(ws, "all", "studies", "-p", "--set-resources", "train_lm:ranks=2", "eval_lm:ranks=3",
                           "prune:ranks=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    # `-p` prints each job's command (after "Shell command:" in Snakemake 9)
    shells = ["kernattn " + line.split("kernattn ", 1)[1] for line in proc.stdout.splitlines() if "kernattn " in line]
    lm = [s for s in shells if s.startswith("kernattn train-lm ")]
    char = [s for s in shells if s.startswith("kernattn train ")]
    scored = [s for s in shells if s.startswith("kernattn eval-lm ")]
    assert lm and all("--nproc 2 --nodes 1 >" in s for s in lm), lm
    assert char and all("--nproc 1 --nodes 1 >" in s for s in char), char  # the default: one process
    assert scored and all("--nproc 3 --nodes 1 >" in s for s in scored), scored  # eval-lm scores over ranks too
    pruned = [s for s in shells if s.startswith("kernattn prune ")]
    assert pruned and all("--nproc 2 --nodes 1 >" in s for s in pruned), pruned  # prune fine-tunes over ranks
    assert [s for s in shells if s.startswith("kernattn train-gka-init ")]  # the studies' trainings are here too
    cooled = [s for s in shells if s.startswith("kernattn cooldown ")]  # a budget's cooldown trains like its run
    assert cooled and all("--nproc 1 --nodes 1 >" in s for s in cooled), cooled
    ranked = ("kernattn train", "kernattn eval-lm ", "kernattn prune ", "kernattn cooldown ")
    assert not [s for s in shells if "--nproc" in s and not s.startswith(ranked)]


@pytest.mark.parametrize("where", ["before", "after"])
def test_torchruns_ranks_are_given_the_commands_overrides_file(tmp_path, monkeypatch, where):
    """`kernattn [--overrides F] train ... --nproc 2 [--overrides F]`: the command each rank runs
    (engine/launch.py hands it to kernattn/rank.py) keeps --overrides F, and a rank's stage reads
    F's values: nothing in the environment carries them."""
    import json

    from kernattn import rank
    from kernattn.config import params_from_args
    from kernattn.engine import launch as launcher
    from kernattn.tracks.char import track

    over = tmp_path / "over.yaml"
    over.write_text("train: {lr: 0.125}\n")
    started = {}

    class Torchrun:  # what launch() starts, recorded instead of run
        def __init__(self, cmd, env):
            started.update(cmd=cmd, env=env)

        def wait(self):
            return 0

        def send_signal(self, signum):  # launch() passes SIGTERM on to torchrun through it
            raise AssertionError(f"signal {signum} passed on")

    monkeypatch.setattr(launcher.subprocess, "Popen", Torchrun)
    monkeypatch.delenv("RANK", raising=False)
    stage = ["train", "--params", str(REPO / "params.yaml"), "--scale", "micro", "--run", "rope-s0", "--nproc", "2"]
    assert main(["--overrides", str(over), *stage] if where == "before" else [*stage, "--overrides", str(over)]) == 0
    assert started["cmd"][1:4] == ["-m", "torch.distributed.run", "--nproc_per_node"], started["cmd"]
    ranks_argv = json.loads(started["env"][launcher.ARGV_ENV])
    assert "--nproc" not in ranks_argv and ranks_argv[ranks_argv.index("--overrides") + 1] == str(over), ranks_argv
    assert str(over) not in [v for k, v in started["env"].items() if k != launcher.ARGV_ENV]
    # one rank, as torchrun starts it: RANK set, the command in the environment kernattn.rank reads
    read = []
    monkeypatch.setattr(track, "run", lambda args: read.append(params_from_args(args)) or 0)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv(launcher.ARGV_ENV, started["env"][launcher.ARGV_ENV])
    assert rank.main() == 0
    assert [(p.scale, p.train.lr, p.overrides) for p in read] == [("micro", 0.125, str(over))]


def test_install_profile_gives_a_stage_gpus_and_nodes(tmp_path, capsys):
    dest = tmp_path / "slurm"
    assert main(["install-profile", "--partition", "cpu", "--gpu-model", "h100", "--gpus", "train_lm=8",
                 "--nodes", "train_lm=2", "--gpus", "train_vision=4", "--source", str(REPO / "profiles/slurm"),
                 "--dest", str(dest)]) == 0
    res = yaml.safe_load((dest / "config.yaml").read_text())["set-resources"]
    lm, vit, char = res["train_lm"], res["train_vision"], res["train"]
    assert (lm["gres"], lm["tasks"], lm["ranks"], lm["nodes"]) == ("gpu:h100:8", 2, 8, 2)
    assert "gpu" not in lm and "gpu_model" not in lm  # --gpus would count the job's GPUs, not each node's
    # several nodes: the job step runs the command itself (its srun spans the nodes), not inside srun -n1
    assert lm["mpi"] == "srun" and "mpi" not in vit
    assert (vit["gpu"], vit["gpu_model"], vit["ranks"], vit["nodes"]) == (4, "h100", 4, 1) and "tasks" not in vit
    assert (char["gpu"], char["ranks"], char["nodes"]) == (1, 1, 1)
    # each rank brings its own loader workers: CPUs per task = the entry's per-rank CPUs x ranks per node
    assert (vit["cpus_per_task"], lm["cpus_per_task"], char["cpus_per_task"]) == (4 * 15, 8 * 8, 8)
    assert lm["runtime"] == 1488 and lm["slurm_extra"] == "--signal=TERM@120"  # the rest of the entry kept
    # the studies' trainings have entries of their own: a GPU each by default, a world on request
    studies = yaml.safe_load((dest / "config.yaml").read_text())["set-resources"]
    assert all(studies[s]["gpu"] == 1 and studies[s]["gpu_model"] == "h100" for s in ("train_wrap", "train_gka_init", "prune"))
    assert main(["install-profile", "--partition", "cpu", "--gpu-model", "h100", "--gpus", "train_gka_init=2",
                 "--source", str(REPO / "profiles/slurm"), "--dest", str(dest)]) == 0
    init = yaml.safe_load((dest / "config.yaml").read_text())["set-resources"]["train_gka_init"]
    assert (init["gpu"], init["ranks"], init["nodes"], init["runtime"]) == (2, 2, 1, 3857)  # the plan's (its ViT runs)
    capsys.readouterr()
    assert main(["install-profile", "--partition", "cpu", "--gpus", "report=2", "--source",
                 str(REPO / "profiles/slurm"), "--dest", str(dest)]) == 2
    assert "set-resources has no entry report" in capsys.readouterr().err


class _Resources(dict):
    """A job's resources as the SLURM plugin reads them (`.get` and attributes)."""

    __getattr__ = dict.get


def test_the_plugins_own_sbatch_line_for_two_nodes_of_eight_gpus(tmp_path):
    """The SLURM executor plugin's get_submit_command on the profile's 2-node entry: one task
    per node holding the node's 8 GPUs, no --ntasks-per-gpu (which SLURM refuses beside a per-node
    gres: plugin issues #316, #373)."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    dest = tmp_path / "slurm"
    assert main(["install-profile", "--partition", "gpu", "--gpu-model", "h100", "--gpus", "train_lm=8",
                 "--nodes", "train_lm=2", "--source", str(REPO / "profiles/slurm"), "--dest", str(dest)]) == 0
    entry = yaml.safe_load((dest / "config.yaml").read_text())["set-resources"]["train_lm"]
    job = SimpleNamespace(resources=_Resources(entry), threads=1, name="train_lm", is_group=lambda: False)
    params = {"run_uuid": "u", "slurm_logfile": "log", "comment_str": "c", "account": "", "partition": "-p gpu",
              "workdir": str(tmp_path)}
    line = get_submit_command(job, params) + set_gres_string(job)  # as the plugin's run_job builds it
    assert "--nodes=2" in line and "--ntasks=2" in line and "--gres=gpu:h100:8" in line, line
    assert "--ntasks-per-gpu" not in line and "--gpus" not in line and "--ntasks-per-node" not in line, line
