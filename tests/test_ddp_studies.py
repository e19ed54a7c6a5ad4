"""The studies' trainings go through the one engine, so they run data-parallel like the tracks:
a GKA-init run with the median initialisation (each head's bandwidth set from the first batch
the model sees, the study's most rank-sensitive step) trained on 2 gloo ranks ends with the
weights of the 1-rank run with twice the accumulation (to 1e-6) and the same metrics lines,
the heads' bandwidths on every val line among them. The prune study on 2 ranks fine-tunes each
of its three arms (one process group for the three) to the 1-rank run's weights and writes the
same summary, from rank 0 alone."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from kernattn.studies.common import SUMMARY
from kernattn.studies.prune.stages import ARMS
from tests.ddp import launch, log_of, wait
from tests.test_ddp import CHAR, argv, assert_close_weights, assert_same_lines
from tests.test_engine import ckpt_of, read_metrics, write_params
from tests.test_train import _keep_torch_threads, corpus  # noqa: F401 (fixtures)

GKA_INIT = dataclasses.replace(CHAR, command="train-gka-init", run="gka-init_median-s0")


def test_a_gka_init_run_on_two_ranks_trains_what_one_rank_trains(tmp_path, corpus):  # noqa: F811
    dirs = {}
    for n in (1, 2):
        folder = tmp_path / f"n{n}"
        params = write_params(GKA_INIT, folder, corpus, studies={"out_dir": str(folder / "studies")})
        codes = wait(launch(argv(GKA_INIT, params), n, folder / "log"))
        assert codes == [0] * n, log_of(folder / "log", 0)[-3000:] + log_of(folder / "log", n - 1)[-3000:]
        dirs[n] = folder / "studies" / "gka_init" / "runs" / GKA_INIT.run
    one, two = ckpt_of(dirs[1]), ckpt_of(dirs[2])
    assert one["step"] == two["step"] == GKA_INIT.steps and two["world_size"] == 2
    assert bool(two["model"]["blocks.0.attn.sigma_ready"])  # the median init ran
    assert_close_weights(one["model"], two["model"])
    lines = read_metrics(dirs[1]), read_metrics(dirs[2])
    assert any(k.startswith("sigma_L1H1") for x in lines[1] for k in x)
    assert_same_lines(*lines)


def _close_values(a, b, where: str = "") -> None:
    """Two JSON trees equal, floats to 1e-6 (relative above 1)."""
    if isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6), (where, a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _close_values(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _close_values(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


@pytest.mark.e2e
def test_prune_on_two_ranks_fine_tunes_what_one_rank_does(tmp_path, corpus):  # noqa: F811
    runs = tmp_path / "runs"  # the GPA run both prunes start from, trained once
    params = {n: write_params(CHAR, tmp_path / f"n{n}", corpus, train={"out_dir": str(runs)},
                              studies={"out_dir": str(tmp_path / f"n{n}" / "studies")}) for n in (1, 2)}
    assert wait(launch(argv(CHAR, params[1]), 1, tmp_path / "base")) == [0], log_of(tmp_path / "base", 0)[-3000:]
    out = {}
    for n in (1, 2):
        logs = tmp_path / f"prune{n}"
        codes = wait(launch(["prune", "--params", str(params[n]), "--run", CHAR.run, "--no-progress"], n, logs))
        assert codes == [0] * n, log_of(logs, 0)[-3000:] + log_of(logs, n - 1)[-3000:]
        out[n] = tmp_path / f"n{n}" / "studies" / "prune" / CHAR.run
    assert "kernattn prune" in log_of(tmp_path / "prune2", 0) and "kernattn prune" not in log_of(tmp_path / "prune2", 1)
    for arm in ARMS:
        one, two = ckpt_of(out[1] / arm), ckpt_of(out[2] / arm)
        assert two["world_size"] == 2 and one["step"] == two["step"] > 0, arm
        assert_close_weights(one["model"], two["model"])
        assert_same_lines(read_metrics(out[1] / arm), read_metrics(out[2] / arm))
    one, two = (json.loads((out[n] / SUMMARY).read_text()) for n in (1, 2))
    assert one.pop("params_digest") != two.pop("params_digest")  # the two params files differ in studies.out_dir
    _close_values(one, two)
