"""Data parallelism in the engine (issue 24), char track, 2 ranks on CPU (gloo), micro scale:

- 2 ranks train what 1 rank does with twice the accumulation: the same weights after every
  step to 1e-6, the same metrics lines (val loss reduced over the ranks' shares of the
  validation windows), the same files; only rank 0 writes (one MLflow run in the store);
- SIGKILL of rank 1 mid-run: rank 0 ends within the group's timeout; SIGTERM to rank 1 only:
  both ranks exit 143 after one checkpoint; the rerun ends bit-exact against an uninterrupted
  2-rank run;
- a non-finite loss on rank 1 only: both ranks exit 3, one FAILED record, one error line;
- a global batch the ranks do not divide: one line naming both numbers.

The ranks are forked from a fork server that never ran autograd (tests/ddp.py), with
torchrun's variables.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
import torch

from kernattn.engine import HOLD_ENV, is_timing
from kernattn.engine.dist import Layout, World, layout, shard, val_share, world_from_env
from kernattn.engine.launch import command as launch_command
from kernattn.engine.launch import take_options
from kernattn.engine.signals import NONFINITE_ENV
from kernattn.errors import UsageError
from tests.ddp import launch, log_of, wait, wait_for_text
from tests.workspace import command_env
from tests.test_engine import (
    TIMED_FINAL,
    Case,
    assert_equal_tree,
    ckpt_of,
    command,
    read_metrics,
    untimed,
    write_params,
)
from tests.test_train import _keep_torch_threads, corpus  # noqa: F401 (fixtures)

TIMEOUT_S = 90  # the process group's: a rank waiting longer (a hung peer; a dead one is seen at once) stops
# 4 sequences a step, micro-batches of 2: one rank accumulates 2, two ranks 1 each; no dropout
# (each rank draws its own masks), a checkpoint every 3 steps of 8.
CHAR = Case("char", "train", "gpa_dp_m8-s0", "train",
            {"model": {"dropout": 0.0},
             "train": {"max_steps": 8, "eval_every": 4, "checkpoint_every": 3, "micro_batch": 2,
                       "dist_timeout_s": TIMEOUT_S}}, 8)


def argv(case: Case, params) -> list[str]:
    return [case.command, "--params", str(params), "--run", case.run, "--no-progress"]


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def assert_same_lines(one: list[dict], two: list[dict]) -> None:
    assert len(one) == len(two)
    for x, y in zip(untimed(one), untimed(two)):
        assert x.keys() == y.keys()
        for key in x:
            same = close(x[key], y[key]) if isinstance(x[key], float) else x[key] == y[key]
            assert same, (key, x, y)


def assert_close_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name, value in a.items():
        assert torch.allclose(value, b[name], rtol=0, atol=1e-6), (name, (value - b[name]).abs().max())


def assert_same_run(case: Case, a, b) -> None:
    """Run folders a and b (b without MLflow): equal state parts, every rank's RNG states, loop
    state, metrics (timings aside) and final.json (MLflow's ids aside)."""
    ca, cb = ckpt_of(a), ckpt_of(b)
    assert ca["step"] == cb["step"] == case.steps
    for part in (*case.parts, "rng", "rng_ranks", "loop"):
        assert_equal_tree(ca[part], cb[part], part)
    assert untimed(read_metrics(a)) == untimed(read_metrics(b))
    skip = (*TIMED_FINAL, "mlflow_experiment_id")
    fa, fb = (json.loads((d / "final.json").read_text()) for d in (a, b))
    assert {k: v for k, v in fa.items() if k not in skip and not is_timing(k)} == \
           {k: v for k, v in fb.items() if k not in skip and not is_timing(k)}


def train_ranks(case: Case, folder, data, n: int, tracking: dict | None = None, **env) -> tuple[list, object]:
    params = write_params(case, folder, data, tracking=tracking)
    codes = wait(launch(argv(case, params), n, folder / "log", **env))
    return codes, folder / "runs" / case.run


@pytest.fixture(scope="module")
def whole2(tmp_path_factory, corpus):  # noqa: F811
    """The uninterrupted 2-rank char run, logged to MLflow."""
    folder = tmp_path_factory.mktemp("whole2")
    codes, run_dir = train_ranks(CHAR, folder, corpus, 2, tracking={"enabled": True})
    assert codes == [0, 0], log_of(folder / "log", 0)[-3000:] + log_of(folder / "log", 1)[-3000:]
    return folder, run_dir


@pytest.mark.e2e
def test_two_ranks_train_what_one_rank_trains_with_twice_the_accumulation(tmp_path, corpus, whole2):  # noqa: F811
    codes, one = train_ranks(CHAR, tmp_path, corpus, 1)
    assert codes == [0], log_of(tmp_path / "log", 0)[-3000:]
    folder, two = whole2
    c1, c2 = ckpt_of(one), ckpt_of(two)
    assert (c1["world_size"], c2["world_size"]) == (1, 2) and "rng_ranks" in c2 and "rng_ranks" not in c1
    assert_close_weights(c1["model"], c2["model"])
    assert_same_lines(read_metrics(one), read_metrics(two))
    f1, f2 = (json.loads((d / "final.json").read_text()) for d in (one, two))
    assert close(f1["val_loss"], f2["val_loss"]) and f1["tokens_seen"] == f2["tokens_seen"]
    config = json.loads((two / "config.json").read_text())
    assert (config["world_size"], config["micro_batch"], config["grad_accum"]) == (2, 2, 1)
    assert json.loads((one / "config.json").read_text())["grad_accum"] == 2
    # only rank 0 wrote: the files of one process, each once; one MLflow run
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
    assert "kernattn train:" in log_of(folder / "log", 0) and "kernattn train:" not in log_of(folder / "log", 1)
    from mlflow import MlflowClient

    tracking = config["tracking"]
    client = MlflowClient(tracking["uri"])
    runs = client.search_runs([client.get_experiment_by_name(tracking["experiment"]).experiment_id])
    assert [r.info.run_id for r in runs] == [tracking["mlflow_run_id"]] and runs[0].info.status == "FINISHED"
    history = client.get_metric_history(runs[0].info.run_id, "train_loss")
    assert len(history) == len([x for x in read_metrics(two) if x["split"] == "train"])


@pytest.mark.e2e
def test_a_dead_rank_ends_the_job_and_sigterm_to_one_rank_stops_both(tmp_path, corpus, whole2):  # noqa: F811
    """SIGKILL of rank 1 after step 4: rank 0 ends within the timeout (checkpoint 3 kept);
    SIGTERM to rank 1 alone after step 5: both exit 143, rank 0 writes one checkpoint at 5; the rerun
    ends as the uninterrupted 2-rank run, bit for bit."""
    case = CHAR
    params = write_params(case, tmp_path, corpus)
    run_dir = tmp_path / "runs" / case.run
    ranks = launch(argv(case, params), 2, tmp_path / "a", **{HOLD_ENV: "4"})
    wait_for_text(tmp_path / "a", "holding after step 4", ranks)
    ranks[1].kill()
    t0 = time.monotonic()
    codes = wait(ranks, timeout=TIMEOUT_S + 30)
    assert codes[1] == -signal.SIGKILL and codes[0] not in (None, 0), codes
    assert time.monotonic() - t0 < TIMEOUT_S
    assert ckpt_of(run_dir)["step"] == 3 and not (run_dir / "final.json").exists()

    ranks = launch(argv(case, params), 2, tmp_path / "b", **{HOLD_ENV: "5"})
    wait_for_text(tmp_path / "b", "holding after step 5", ranks)
    ranks[1].terminate()  # the rank that writes nothing: rank 0 learns it through the step's all_reduce
    assert wait(ranks) == [143, 143]
    assert "resuming at step 3" in log_of(tmp_path / "b", 0) and "stopped at step 5 (SIGTERM)" in log_of(
        tmp_path / "b", 0)
    assert ckpt_of(run_dir)["step"] == 5

    assert wait(launch(argv(case, params), 2, tmp_path / "c")) == [0, 0], log_of(tmp_path / "c", 0)[-3000:]
    assert "resuming at step 5" in log_of(tmp_path / "c", 0)
    assert_same_run(case, whole2[1], run_dir)


def test_a_nonfinite_loss_on_rank_1_only_stops_every_rank_with_exit_3(tmp_path, corpus):  # noqa: F811
    # This process runs a compiled backward pass first, as an earlier test of the same pytest
    # worker may (tests/test_compile.py): it starts autograd's device threads, after which ranks
    # forked from this process could not train (CI's failure of 2026-11-25).
    layer = torch.nn.Linear(2, 2)
    torch.compile(layer, backend="eager")(torch.ones(1, 2)).sum().backward()
    codes, run_dir = train_ranks(CHAR, tmp_path, corpus, 2, **{NONFINITE_ENV: "1:5"})
    assert codes == [3, 3]
    lines = read_metrics(run_dir)
    failed = [x for x in lines if x.get("status") == "FAILED"]
    assert failed == [lines[-1]] and failed[0]["step"] == 5 and failed[0]["checkpoint_step"] == 3
    assert ckpt_of(run_dir)["step"] == 3 and not (run_dir / "final.json").exists()
    errors = [log_of(tmp_path / "log", r).count("error:") for r in (0, 1)]
    assert errors == [1, 0]


def test_a_global_batch_the_ranks_do_not_divide_is_one_line(tmp_path, corpus):  # noqa: F811
    case = Case("char", "train", "gpa_dp_m8-s0", "train", {"train": {"batch_size": 3, "max_steps": 2, "budgets": []}}, 2)
    codes, _ = train_ranks(case, tmp_path, corpus, 2)
    assert codes == [2, 2]
    err = [x for x in log_of(tmp_path / "log", 0).splitlines() if "error" in x]
    assert len(err) == 1 and "the global batch 3 does not divide over 2 ranks" in err[0], err
    assert "error" not in log_of(tmp_path / "log", 1)  # one line for the job, not one per rank


@pytest.mark.e2e
def test_nproc_starts_torchrun_whose_ranks_train_the_same_run(tmp_path, corpus, whole2):  # noqa: F811
    """`kernattn train --nproc 2`: torchrun --standalone starts 2 ranks: the 2-rank run, bit for bit."""
    params = write_params(CHAR, tmp_path, corpus)
    done = subprocess.run(command(CHAR, params) + ["--nproc", "2"], env=command_env(), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_same_run(CHAR, whole2[1], tmp_path / "runs" / CHAR.run)


def test_the_launch_commands_for_one_node_and_for_several(monkeypatch):
    found, rest = take_options(["train-lm", "--nproc", "8", "--run", "r", "--nodes=2"])
    assert found == {"--nproc": 8, "--nodes": 2} and rest == ["train-lm", "--run", "r"]
    one = launch_command(8, 1)
    assert one[1:] == ["-m", "torch.distributed.run", "--nproc_per_node", "8", "--standalone", "-m",
                       "kernattn.rank"]
    with pytest.raises(UsageError, match="--nodes 2 starts one torchrun per node with srun"):
        launch_command(8, 2, env={})
    monkeypatch.setattr("kernattn.engine.launch.head_node", {"gpu[01-02]": "gpu01"}.get)
    two = launch_command(8, 2, env={"SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_JOB_ID": "77"})
    assert two[:4] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1"]
    assert two[5:] == ["-m", "torch.distributed.run", "--nproc_per_node", "8", "--nnodes=2", "--rdzv_backend=c10d",
                       "--rdzv_endpoint=gpu01:29500", "--rdzv_id=77", "-m", "kernattn.rank"]
    with pytest.raises(UsageError, match="--nproc 0: must be >= 1"):
        take_options(["train", "--nproc", "0"])


def test_the_world_from_torchrun_or_srun_and_the_accumulation_rule(monkeypatch):
    monkeypatch.delenv("MASTER_PORT", raising=False)
    assert world_from_env({}) == World()
    assert world_from_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3"}) == World(3, 8, 3)
    slurm = {"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1"}
    assert world_from_env(slurm) == World()  # a batch script's own process: no rendezvous named
    assert world_from_env({**slurm, "MASTER_ADDR": "gpu01"}) == World(5, 16, 1)
    with pytest.raises(UsageError, match="rank 8 of a world of 8"):
        world_from_env({"RANK": "8", "WORLD_SIZE": "8"})
    with pytest.raises(UsageError, match="WORLD_SIZE='x' is not an integer"):
        world_from_env({"RANK": "0", "WORLD_SIZE": "x"})
    # global = micro x accumulation x ranks
    assert layout(512, 32, World(0, 8), "lm") == Layout(World(0, 8), 32, 2)
    assert layout(256, None, World(0, 8), "vision") == Layout(World(0, 8), 32, 1)
    assert layout(256, 8, World(), "vision") == Layout(World(), 8, 32)
    with pytest.raises(UsageError, match="p.yaml: train: the global batch 256 does not divide over 3 ranks; "):
        layout(256, None, World(0, 3), "p.yaml: train")
    with pytest.raises(UsageError, match="the global batch 64 does not divide over 2 ranks in micro-batches of 24"):
        layout(64, 24, World(1, 2), "lm")
    # the shards of a step: rank r's micro-batch m is positions m x ranks + r, + ranks x accumulation, ...
    batch = torch.arange(8)
    one = [shard(batch, m, World(), 2).tolist() for m in range(2)]
    two = [shard(batch, 0, World(r, 2), 1).tolist() for r in range(2)]
    assert one == two == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert [val_share(list(range(5)), World(r, 2)) for r in range(2)] == [[0, 2, 4], [1, 3]]


def test_a_run_resumed_on_another_number_of_ranks_continues_the_same_optimisation(tmp_path, corpus, whole2):  # noqa: F811
    """2 ranks stop at step 3 (--stop-after); 1 rank resumes with the same global batch and data
    position: the 2-rank run's weights (to 1e-6) and metrics, and one line saying so. And the
    other way: 1 rank stops at step 3, 2 ranks resume it, with the same result."""
    for first, then, folder in ((2, 1, tmp_path / "down"), (1, 2, tmp_path / "up")):
        params = write_params(CHAR, folder, corpus)
        assert wait(launch([*argv(CHAR, params), "--stop-after", "3"], first, folder / "a")) == [0] * first
        assert wait(launch(argv(CHAR, params), then, folder / "b")) == [0] * then, log_of(folder / "b", 0)[-3000:]
        written = f"{first} rank{'s' if first > 1 else ''}"
        assert f"the checkpoint was written by {written}, resuming on {then}" in log_of(folder / "b", 0)
        run_dir = folder / "runs" / CHAR.run
        assert ckpt_of(run_dir)["world_size"] == then
        assert_close_weights(ckpt_of(whole2[1])["model"], ckpt_of(run_dir)["model"])
        assert_same_lines(read_metrics(whole2[1]), read_metrics(run_dir))
