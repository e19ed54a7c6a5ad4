"""The engine's loop on a toy track, in float64, against an explicit reference: gradient
accumulation over k micro-batches is the full batch's step; train lines carry the mean loss
of the steps since the last line; the first non-finite loss is reported at its own step even
though it is read only at the log cadence; the MLflow metric rule."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from kernattn.config import RunSettings, TrackingParams
from kernattn.engine import EXIT_DIVERGED, Track, metric_dict, train_run
from kernattn.engine.mlrun import experiment_name

BATCH, STEPS, LR = 8, 4, 0.05


@dataclasses.dataclass(frozen=True)
class ToySettings(RunSettings):
    """The toy's params section: the runtime fields every track's section has, and its lr."""

    lr: float = LR


class ToyTrack(Track):
    """Linear regression on fixed data: step s sees rows [s x BATCH, (s + 1) x BATCH)."""
    command, name, section_name, rate_unit = "train-toy", "toy", "toy", "rows"

    def __init__(self, folder: Path, grad_accum: int, log_every: int = 1, poison_step: int | None = None):
        self.section = ToySettings(out_dir=str(folder / "runs"), grad_clip=0.0, device="cpu", compile=False)
        tracking = SimpleNamespace(enabled=False, uri=f"sqlite:///{folder}/m.db", experiment="toy",
                                   artifact_root=str(folder / "a"))
        self.params = SimpleNamespace(scale="unit", path=folder / "params.yaml", digest=lambda: "toy",
                                      tracking=tracking)
        self.run_id, self.seed, self.variant = "toy-s0", 0, "linear"
        self.run_dir = folder / "runs" / self.run_id
        self.max_steps, self.log_every = STEPS, log_every
        # the engine derives the accumulation (build's layout): BATCH rows a step in micro-batches
        self.global_batch, self.micro_default = BATCH, BATCH // grad_accum
        self.eval_every, self.checkpoint_every, self.items_per_step = STEPS, STEPS, BATCH
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(STEPS * BATCH, 3, dtype=torch.float64, generator=gen)
        self.y = self.x @ torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64) + 0.3
        self.y_val = self.y.clone()  # validation stays clean
        if poison_step is not None:  # a nan in the rows of that step (1-based)
            self.y[(poison_step - 1) * BATCH] = float("nan")

    def fingerprint_config(self) -> dict:
        return {"micro_default": self.micro_default}

    def build(self, device, layout) -> None:
        self.layout = layout  # the engine derives it (BATCH rows in micro-batches of micro_default)
        self.model = torch.nn.Linear(3, 1, dtype=torch.float64)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=LR)

    def set_lr(self, step: int) -> float:
        return LR

    def batch(self, step: int, micro: int):
        per = BATCH // self.grad_accum
        rows = slice(step * BATCH + micro * per, step * BATCH + (micro + 1) * per)
        return self.x[rows], self.y[rows]

    def loss(self, fwd, batch) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(fwd(x), y)

    @torch.no_grad()
    def evaluate(self, fwd, autocast) -> dict:
        return {"loss": float(F.mse_loss(self.model(self.x), self.y_val))}

    def final(self, st) -> dict:
        return {"val_loss": st.last_val["loss"], "train_loss": st.last_train}


def reference(track: ToyTrack) -> tuple[torch.nn.Linear, list[float]]:
    """Plain SGD on each step's whole batch, from the engine's initialisation (seed 0)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1, dtype=torch.float64)
    losses = []
    for step in range(STEPS):
        rows = slice(step * BATCH, (step + 1) * BATCH)
        loss = F.mse_loss(model(track.x[rows]), track.y[rows])
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= LR * p.grad
        losses.append(float(loss.detach()))
    return model, losses


def lines(track: ToyTrack) -> list[dict]:
    return [json.loads(x) for x in (track.run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("accum", [1, 2, 4])
def test_accumulated_micro_batches_make_the_full_batch_step(tmp_path, accum):
    track = ToyTrack(tmp_path, accum)
    assert train_run(track, progress=False) == 0
    model, losses = reference(track)
    for got, want in zip(track.model.parameters(), model.parameters()):
        torch.testing.assert_close(got.detach(), want.detach(), rtol=1e-12, atol=1e-12)
    train = [r for r in lines(track) if r["split"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    assert [r["loss"] for r in train] == pytest.approx(losses, rel=1e-12)


def test_a_train_line_holds_the_mean_loss_since_the_last_one(tmp_path):
    track = ToyTrack(tmp_path, 1, log_every=2)
    assert train_run(track, progress=False) == 0
    _, losses = reference(track)
    train = [r for r in lines(track) if r["split"] == "train"]
    assert [r["step"] for r in train] == [2, 4]
    assert [r["loss"] for r in train] == pytest.approx([(losses[0] + losses[1]) / 2, (losses[2] + losses[3]) / 2],
                                                     rel=1e-12)
    final = json.loads((track.run_dir / "final.json").read_text())
    assert final["train_loss"] == train[-1]["loss"] and final["steps"] == STEPS and final["track"] == "toy"


def test_the_first_non_finite_loss_is_named_at_its_own_step(tmp_path, capsys):
    """The loss of step 3 is nan; the flag is read at step 4's train line (log_every 2 ... 4),
    yet the record names step 3: the device keeps the step, not the reading."""
    track = ToyTrack(tmp_path, 2, log_every=4, poison_step=3)
    assert train_run(track, progress=False) == EXIT_DIVERGED
    failed = lines(track)[-1]
    assert failed == {"step": 3, "status": "FAILED", "error": "step 3: training loss is nan", "checkpoint_step": None}
    assert "lower toy.lr (now 0.05) or set toy.grad_clip" in capsys.readouterr().err


class ScheduledToy(ToyTrack):
    def set_lr(self, step: int) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = LR / (1 + step)
        return LR / (1 + step)


def test_the_engine_records_every_steps_rate_across_resumes(tmp_path):
    """The schedule is the engine's component: the rate of every step in the checkpoint and in
    lr.npy (what the report reads), whole across a resume, and rebuilt from set_lr for a
    checkpoint written before the record."""
    from kernattn.engine.rundir import CKPT
    from kernattn.report.verdicts.gates import run_rates

    want = [LR / (1 + s) for s in range(STEPS)]
    track = ScheduledToy(tmp_path, 1)
    assert train_run(track, progress=False, stop_after=2) == 0
    ckpt = torch.load(track.run_dir / CKPT, weights_only=False)
    assert ckpt["lr_schedule"]["rates"].tolist() == want[:2] and run_rates(track.run_dir) is None
    del ckpt["lr_schedule"]  # as a checkpoint of an engine before the record
    torch.save(ckpt, track.run_dir / CKPT)
    again = ScheduledToy(tmp_path, 1)
    assert train_run(again, progress=False) == 0
    assert run_rates(again.run_dir).tolist() == want
    assert [r["lr"] for r in lines(again) if r["split"] == "train"] == want


def test_every_line_carries_the_engines_lr(tmp_path):
    """lr is the engine's, on every line of every track: a train line the rate of its step, a
    val line the rate of the last step taken (at step 0 the first step's), the same after a
    resume; the track's line_fields sees only the loss on a train line."""
    seen = []

    class Watched(ScheduledToy):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.eval_every = 2

        def line_fields(self, split, step, values):
            seen.append((split, sorted(values)))
            return super().line_fields(split, step, values)

    rate = [LR / (1 + s) for s in range(STEPS)]
    track = Watched(tmp_path, 1, log_every=2)
    assert train_run(track, progress=False, stop_after=3) == 0  # stopped mid-interval, resumed at 3
    assert train_run(Watched(tmp_path, 1, log_every=2), progress=False) == 0
    got = [(r["split"], r["step"], r["lr"]) for r in lines(track)]
    assert got == [("val", 0, rate[0]), ("train", 2, rate[1]), ("val", 2, rate[1]), ("train", 4, rate[3]),
                   ("val", 4, rate[3])]
    assert all(list(r)[-3:] == ["lr", "elapsed_s", "rows_per_s"] for r in lines(track))
    assert ("train", ["loss"]) in seen and all(keys == ["loss"] for split, keys in seen if split == "train")


def test_metric_names_are_one_rule_for_every_track():
    char = {"step": 3, "split": "train", "loss": 2.0, "bpc": 2.9, "lr": 1e-3, "tokens": 96, "elapsed_s": 1.0,
            "tokens_per_s": 50.0}
    assert metric_dict(char) == {"train_loss": 2.0, "train_bpc": 2.9, "lr": 1e-3, "tokens_per_s": 50.0}
    val = {"step": 3, "split": "val", "epoch": 1, "top1": 50.0, "loss": 1.5, "elapsed_s": 2.0, "img_per_s": 9.0}
    assert metric_dict(val) == {"val_top1": 50.0, "val_loss": 1.5}
    assert metric_dict({"step": 3, "status": "FAILED", "error": "x", "checkpoint_step": 2}) == {}


def test_a_track_sets_its_own_names():
    """No track inherits the char track's command, name or section: a subclass without them
    fails where it is defined, naming what is missing."""
    with pytest.raises(TypeError, match=r"NoNames: a Track subclass must set the class attributes name, section_name"):
        class NoNames(Track):
            command = "train-x"
    # a subclass of a complete track (the studies' GKAInitTrack, a mixin on top) inherits them
    assert type("Sub", (ToyTrack,), {}).name == "toy"


def test_the_engine_reads_a_typed_section(tmp_path):
    """The loop reads device, dtype, compile, threads and grad_clip of a RunSettings; a section
    of another type stops before anything is written."""
    track = ToyTrack(tmp_path, 1)
    track.section = SimpleNamespace(lr=LR, grad_clip=0.0, device="cpu", threads=None, compile=False)
    with pytest.raises(TypeError, match=r"ToyTrack\.section is a SimpleNamespace, not a config RunSettings"):
        train_run(track, progress=False)
    assert not track.run_dir.exists()
    track.section = ToySettings(out_dir=str(tmp_path / "runs"), device="cpu", compile=False, dtype="float32")
    assert train_run(track, progress=False) == 0
    config = json.loads((track.run_dir / "config.json").read_text())
    assert config["effective"]["dtype"] == "float32" and config["tracking"]["experiment"] == "kernattn-toy-unit"


def test_the_experiment_is_the_named_sections_or_the_tracks():
    assert experiment_name(None, "vision", "tiny") == "kernattn-vision-tiny"
    assert experiment_name(TrackingParams(experiment="mine"), "char", "tiny") == "mine"
    assert experiment_name(TrackingParams(experiment=""), "char", "tiny") == "kernattn-char-tiny"


def test_stop_signal_passes_sigterm_on_and_restores_the_handler():
    """The launcher's use of StopSignal: SIGTERM sets the flag and reaches `on_signal` (which
    passes it on to torchrun); the previous handler is back after the block."""
    import os
    import signal

    from kernattn.engine.signals import StopSignal

    before = signal.getsignal(signal.SIGTERM)
    seen = []
    with StopSignal(on_signal=seen.append) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
    assert stop.requested and seen == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_sigterm_during_a_nested_stop_signal_reaches_the_outer_one():
    """kernattn prune holds one StopSignal around its three fine-tunes, each of which holds its
    own (the engine's): a SIGTERM that arrives during an arm reaches the outer one too, so one
    that comes as an arm ends still stops the command before the next arm."""
    import os
    import signal

    from kernattn.engine.signals import StopSignal

    before = signal.getsignal(signal.SIGTERM)
    with StopSignal() as outer:
        with StopSignal() as inner:
            os.kill(os.getpid(), signal.SIGTERM)
        assert inner.requested and outer.requested
        assert signal.getsignal(signal.SIGTERM) == outer._handle
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_parameter_trace_records_the_variants_own_parameters(tmp_path):
    """engine/trace.py: a GPA model's bank (4 parameters x layers) recorded per evaluation, a
    second record of the same step replacing the first, carried through state_dict, written as
    param_trace.npz and read back; a model with no parameters of its own (static RoPE) writes none."""
    import torch

    from kernattn.engine import trace
    from kernattn.tracks.char.model import GPT
    from kernattn.config import load_params
    from tests.paths import REPO

    mp = load_params(REPO / "params.yaml", "micro").model
    gpa = GPT(20, mp, "gpa", {"n_kernels": 2, "combine": "mult"})
    t = trace.ParamTrace(gpa)
    assert t and [n.rsplit(".", 1)[1] for n in t.params] == ["log_sigma", "log_length", "alpha", "log_tau"]
    t.record(0)
    with torch.no_grad():
        gpa.blocks[0].attn.bank.log_tau.add_(0.5)
    t.record(3)
    t.record(3)  # the same step again: replaced, not appended
    again = trace.ParamTrace(gpa)
    again.load_state_dict(t.state_dict())
    again.write(tmp_path)
    got = trace.read(tmp_path)
    n = mp.n_head * 2  # heads x kernels per parameter
    assert got["steps"].tolist() == [0, 3] and got["sizes"] == [n] * 4 and got["values"].shape == (2, 4 * n)
    change = got["values"][1] - got["values"][0]
    assert (change[3 * n:] == 0.5).all() and (change[:3 * n] == 0).all()
    rope = trace.ParamTrace(GPT(20, mp, "softmax", {"position": "rope"}))
    rope.record(0)
    rope.write(tmp_path / "rope")
    assert not rope and trace.read(tmp_path / "rope") is None and rope.state_dict()["values"] is None
