"""`kernattn eval-lm` on 2 ranks (gloo, forked as torchrun would start them: tests/ddp.py) scores
what one process scores: BPB's windows and CORE's items split over the ranks, the sums and the
answers gathered: BPB, nats and bytes to 1e-6, every CORE answer exactly; rank 0 alone writes.
The micro LM (3 items a task, so the ranks' shares are uneven: 2 and 1) trained for 2 steps."""

from __future__ import annotations

import json

from kernattn.cli import main
from tests.ddp import launch, log_of, wait
from tests.test_ddp import close
from tests.test_engine import Case, prepared, write_params  # noqa: F401 (fixture)
from tests.test_train import _keep_torch_threads, corpus  # noqa: F401 (fixtures)

LM = Case("lm", "train-lm", "base-s0", "lm", {"lm": {"steps": 2, "eval_every": 2, "checkpoint_every": 2}}, 2)


def test_eval_lm_on_two_ranks_scores_what_one_process_scores(tmp_path, prepared):  # noqa: F811
    params = write_params(LM, tmp_path, prepared("lm"))
    args = ["--params", str(params), "--run", LM.run]
    assert main(["train-lm", *args, "--no-progress"]) == 0
    out = tmp_path / "eval" / f"{LM.run}.json"
    assert main(["eval-lm", *args, "--nproc", "1"]) == 0  # N = 1: this process, the option parsed
    one = json.loads(out.read_text())
    out.unlink()
    codes = wait(launch(["eval-lm", *args], 2, tmp_path / "log"))
    assert codes == [0, 0], log_of(tmp_path / "log", 0)[-3000:] + log_of(tmp_path / "log", 1)[-3000:]
    two = json.loads(out.read_text())
    assert "kernattn eval-lm" in log_of(tmp_path / "log", 0) and "kernattn eval-lm" not in log_of(tmp_path / "log", 1)
    for split in ("train", "val"):
        a, b = one["bpb"][split], two["bpb"][split]
        assert close(a["bpb"], b["bpb"]) and close(a["nats"], b["nats"]), (split, a, b)
        assert (a["bytes"], a["tokens"]) == (b["bytes"], b["tokens"]) and a["tokens"] > 0
    assert one["core"] == two["core"]  # every item's answer, each task's accuracy, CORE: exactly
    assert all(len(t["correct"]) == t["items"] == 3 for t in two["core"]["tasks"].values())

