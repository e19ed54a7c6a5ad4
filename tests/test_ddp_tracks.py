"""Data parallelism for the LM and ViT tracks (issue 24; the char track and the engine's
promises under 2 ranks are in tests/test_ddp.py): 2 ranks on CPU (gloo) train what 1 rank
trains with twice the accumulation, the same weights (and EMA) to 1e-6 and the same metrics
lines: the validation set scored once across the ranks (top-1 counts exactly, losses to 1e-6).
SIGTERM to one rank and a non-finite loss on one rank stop both, as in the char track.
The ViT repeats each image 3 times an epoch (DeiT's repeated augmentation through the ranks'
shares); its random augmentations are off here (each rank draws them from its own stream)."""

from __future__ import annotations

import pytest

from kernattn.engine import HOLD_ENV
from kernattn.engine.signals import NONFINITE_ENV
from tests.ddp import launch, log_of, wait, wait_for_text
from tests.test_ddp import argv, assert_close_weights, assert_same_lines
from tests.test_engine import Case, ckpt_of, prepared, read_metrics, write_params  # noqa: F401 (fixture)
from tests.test_train import _keep_torch_threads, corpus  # noqa: F401 (fixtures)

CASES = {
    # 2 x 4 sequences a step, 4 steps
    "lm": Case("lm", "train-lm", "gka_tokens-s0", "lm",
               {"lm": {"steps": 4, "eval_every": 2, "checkpoint_every": 2, "grad_accum": 2}}, 4),
    # 32 images a step in micro-batches of 16, 3 steps an epoch x 2; no draws from the global RNG
    # (flips, drop path): each rank has its own stream, the same in distribution, not in value
    "vision": Case("vision", "train-vision", "gka-s0", "vision",
                   {"vision": {"epochs": 2, "eval_every": 1, "checkpoint_every": 3, "micro_batch": 16,
                               "repeated_aug": 3, "drop_path": 0.0,
                               "hflip": False}}, 6, ("model", "optimizer", "ema")),
}


@pytest.mark.e2e
@pytest.mark.parametrize("track", list(CASES))
def test_two_ranks_train_what_one_rank_trains(tmp_path, prepared, track):  # noqa: F811
    case = CASES[track]
    data = prepared(track)
    dirs = {}
    for n in (1, 2):
        folder = tmp_path / f"n{n}"
        codes = wait(launch(argv(case, write_params(case, folder, data)), n, folder / "log"))
        assert codes == [0] * n, log_of(folder / "log", 0)[-3000:] + log_of(folder / "log", n - 1)[-3000:]
        dirs[n] = folder / "runs" / case.run
    one, two = ckpt_of(dirs[1]), ckpt_of(dirs[2])
    assert one["step"] == two["step"] == case.steps and two["world_size"] == 2
    for part in case.parts[::2]:  # model and (vision) ema
        assert_close_weights(one[part], two[part])
    lines = read_metrics(dirs[1]), read_metrics(dirs[2])
    assert_same_lines(*lines)
    if track == "vision":  # top-1 from counts: exactly equal
        assert [x["top1"] for x in lines[0] if x["split"] == "val"] == \
               [x["top1"] for x in lines[1] if x["split"] == "val"]


@pytest.mark.e2e
@pytest.mark.parametrize("track", list(CASES))
def test_sigterm_or_a_nonfinite_loss_on_one_rank_stops_every_rank(tmp_path, prepared, track):  # noqa: F811
    """SIGTERM to rank 1 alone after step 2: both ranks exit 143, rank 0 writes one checkpoint
    at step 2. The rerun resumes there with rank 1's loss non-finite at step 3: both exit 3, one
    FAILED line naming the kept checkpoint, no final.json (the char track's SIGKILL and
    bit-exact rerun: tests/test_ddp.py)."""
    case = CASES[track]
    params = write_params(case, tmp_path, prepared(track))
    run_dir = tmp_path / "runs" / case.run
    ranks = launch(argv(case, params), 2, tmp_path / "a", **{HOLD_ENV: "2"})
    wait_for_text(tmp_path / "a", "holding after step 2", ranks)
    ranks[1].terminate()  # the rank that writes nothing: rank 0 learns it through the step's all_reduce
    assert wait(ranks) == [143, 143], log_of(tmp_path / "a", 0)[-3000:]
    assert "stopped at step 2 (SIGTERM)" in log_of(tmp_path / "a", 0) and ckpt_of(run_dir)["step"] == 2

    codes = wait(launch(argv(case, params), 2, tmp_path / "b", **{NONFINITE_ENV: "1:3"}))
    assert codes == [3, 3], log_of(tmp_path / "b", 0)[-3000:]
    assert "resuming at step 2" in log_of(tmp_path / "b", 0)
    lines = read_metrics(run_dir)
    failed = [x for x in lines if x.get("status") == "FAILED"]
    assert failed == [lines[-1]] and failed[0]["step"] == 3 and failed[0]["checkpoint_step"] == 2
    assert ckpt_of(run_dir)["step"] == 2 and not (run_dir / "final.json").exists()
    assert [log_of(tmp_path / "b", r).count("error:") for r in (0, 1)] == [1, 0]
