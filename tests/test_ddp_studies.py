"""The studies' trainings go through the one engine, so they run data-parallel like the tracks:
a GKA-init run with the median initialisation (each head's bandwidth set from the first batch
the model sees, the study's most rank-sensitive step) trained on 2 gloo ranks ends with the
weights of the 1-rank run with twice the accumulation (to 1e-6) and the same metrics lines,
the heads' bandwidths on every val line among them."""

from __future__ import annotations

import dataclasses

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
