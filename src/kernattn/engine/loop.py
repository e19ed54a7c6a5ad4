"""The one training loop, for every track: resume, SIGTERM, divergence, MLflow, atomic outputs.

    exit_code = train_run(track, fresh=False, stop_after=None, stale="error", progress=True)

A session: open the run folder (refuse or archive a stale one; resume a checkpoint of the same
fingerprint; nothing to do when final.json has it), build the track on its device, cut
metrics.jsonl back to the checkpoint, write config.json, open (or reopen) the MLflow run, then
steps until max_steps: each step is grad_accum micro-batches, clipping, the optimizer and the
track's after_step. Train lines every log_every steps (the mean loss since the last one),
evaluations at step 0, every eval_every steps and at the end, checkpoints every
checkpoint_every steps and at the end; final.json last.

Exit codes: 0 finished (or already finished, or --stop-after), 143 SIGTERM (checkpoint
saved), 3 divergence: a nan/inf training loss (its first step is kept on the device, read
only when the loop syncs anyway: train lines, evaluations, checkpoints), a non-finite
validation value or non-finite weights at a checkpoint. A divergence prints one line, ends
metrics.jsonl with a FAILED record, marks the MLflow run FAILED (tag `failure`) and never
overwrites the last good checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
import platform
import shutil
import time
from typing import Any

import torch

from ..config.common import RunSettings
from ..errors import UsageError
from ..io import atomic_torch_save
from .rundir import CKPT, CKPT_FORMAT, open_run_dir
from .runtime import autocast_factory, digest, resolve_device, rng_state, seed_everything, set_rng_state
from .session import Session
from .signals import EXIT_SIGTERM, StopSignal, hold, hold_at_step
from .track import Track

EXIT_DIVERGED = 3


class Diverged(Exception):
    """The training or validation loss, or the weights, stopped being finite."""

    def __init__(self, step: int, what: str):
        super().__init__(f"step {step}: {what}")
        self.step, self.what = step, what


@dataclasses.dataclass
class LoopState:
    """What the loop carries between steps and across sessions (the checkpoint's 'loop' part
    and its counters)."""
    acc: torch.Tensor  # training loss summed on the device since the last train line
    acc_n: int = 0
    step: int = 0
    metrics_lines: int = 0
    elapsed_s: float = 0.0  # wall seconds of training and evaluation, over sessions
    train_s: float = 0.0    # of pure training (the rates' denominator)
    last_train: float | None = None
    last_val: dict[str, float] | None = None
    mlflow_run_id: str | None = None
    ckpt_step: int | None = None


def all_finite(model: torch.nn.Module) -> bool:
    """Every parameter finite (one sync): checked before a checkpoint replaces the last one."""
    flags = [torch.isfinite(p).all() for p in model.parameters()]
    return bool(torch.stack(flags).all().item()) if flags else True


def train_run(track: Track, *, fresh: bool = False, stop_after: int | None = None, stale: str = "error",
              progress: bool = True) -> int:
    """Train (or resume, or skip when finished) one run of `track`; returns the exit status."""
    if not isinstance(track.section, RunSettings):  # the loop reads device, dtype, ... typed
        raise TypeError(f"{type(track).__module__}.{type(track).__qualname__}.section is a "
                        f"{type(track.section).__name__}, not a config RunSettings: set it to the track's params "
                        f"section (TrainParams, LMParams, VisionParams or another RunSettings subclass)")
    if fresh and track.run_dir.exists():
        shutil.rmtree(track.run_dir)  # asked for by name on the command line
    fp_config = {"format": track.fingerprint_format, **track.fingerprint_config()}
    fingerprint = digest(fp_config)
    done, ckpt = open_run_dir(track.run_dir, fingerprint, fp_config, stale=stale, command=track.command,
                              run_id=track.run_id, variant=track.variant)
    if done:
        return 0
    track.run_dir.mkdir(parents=True, exist_ok=True)
    return Loop(track, fingerprint, fp_config, ckpt, stop_after=stop_after, progress=progress).run()


class Loop:
    def __init__(self, track: Track, fingerprint: str, fp_config: dict, ckpt: dict | None, *,
                 stop_after: int | None, progress: bool):
        self.track, self.fingerprint, self.fp_config = track, fingerprint, fp_config
        self.stop_after, self.progress = stop_after, progress
        sec = track.section
        self.device = resolve_device(sec.device)
        if sec.threads:
            torch.set_num_threads(sec.threads)
        if self.device.type == "cuda":
            torch.set_float32_matmul_precision("high")
        seed_everything(track.seed)  # the init depends on the seed only
        track.build(self.device)
        self.fwd = torch.compile(track.model) if self.device.type == "cuda" and sec.compile else track.model
        self.autocast = autocast_factory(self.device, sec.dtype)
        self.st = LoopState(acc=torch.zeros((), dtype=torch.float64, device=self.device))
        self.resumed = ckpt is not None
        if ckpt is not None:
            self._restore(ckpt)
        # First non-finite training loss: step and value, kept on the device (no sync per step).
        self.bad_step = torch.full((), -1, dtype=torch.long, device=self.device)
        self.bad_value = torch.zeros((), dtype=torch.float32, device=self.device)
        self.ckpt_path = track.run_dir / CKPT

    # ------------------------------------------------------------------ checkpoints
    def _restore(self, ckpt: dict[str, Any]) -> None:
        track, st = self.track, self.st
        missing = [name for name in track.parts() if name not in ckpt]
        if missing:  # open_run_dir checked the engine's keys; the track's parts are known only now
            raise UsageError(f"{track.run_dir / CKPT}: not a {track.name} checkpoint (no {', '.join(missing)}); "
                             f"rerun with --fresh to train {track.run_id} from scratch")
        for name, part in track.parts().items():
            part.load_state_dict(ckpt[name])
        set_rng_state(ckpt["rng"], track.generators())
        loop = ckpt["loop"]
        st.acc, st.acc_n = loop["acc"].to(self.device), int(loop["acc_n"])
        st.last_train, st.last_val = loop["last_train"], loop["last_val"]
        st.step, st.metrics_lines = int(ckpt["step"]), int(ckpt["metrics_lines"])
        st.elapsed_s, st.train_s = float(ckpt["elapsed_s"]), float(ckpt["train_s"])
        st.mlflow_run_id, st.ckpt_step = ckpt.get("mlflow_run_id"), st.step

    def checkpoint(self) -> None:
        st, track = self.st, self.track
        self.check_finite()
        if not all_finite(track.model):  # never replace the last good checkpoint by broken weights
            raise Diverged(st.step, "the weights are no longer finite")
        self.session.log.fsync()  # the lines the checkpoint counts are on disk before it is
        state = {"format": CKPT_FORMAT, "fingerprint": self.fingerprint, "fingerprint_config": self.fp_config,
                 "step": st.step, "metrics_lines": self.session.log.lines, "elapsed_s": st.elapsed_s,
                 "train_s": st.train_s, "mlflow_run_id": st.mlflow_run_id,
                 "loop": {"acc": st.acc.detach().cpu(), "acc_n": st.acc_n, "last_train": st.last_train,
                          "last_val": st.last_val},
                 "rng": rng_state(track.generators())}
        state |= {name: part.state_dict() for name, part in track.parts().items()}
        atomic_torch_save(self.ckpt_path, state)
        self.session.tracker.flush()
        st.ckpt_step = st.step

    def check_finite(self) -> None:
        step = int(self.bad_step.item())
        if step >= 0:
            raise Diverged(step, f"training loss is {float(self.bad_value.item())}")

    # ------------------------------------------------------------------ the session
    def run(self) -> int:
        self.session = Session(self, self.track)
        status = "FAILED"
        try:
            code = self._train()
            if code is not None:
                status = "KILLED"
                return code
            self.session.finish()
            status = "FINISHED"
            return 0
        except Diverged as exc:
            self.session.fail(exc, self.st.ckpt_step, self.ckpt_path)
            return EXIT_DIVERGED
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        finally:
            self.session.close(status)

    def _train(self) -> int | None:
        """The steps; an exit code when stopped early (SIGTERM, --stop-after), None when done."""
        st, track = self.st, self.track
        self.clock = time.perf_counter()
        self.interval_t, self.interval_items = 0.0, 0
        if st.step == 0 and self.session.log.lines == 0:
            self.evaluate()
        hold_at = hold_at_step()
        with StopSignal() as stop:
            while st.step < track.max_steps:
                if stop.requested or (self.stop_after is not None and st.step >= self.stop_after):
                    break
                self._cadence(self._step())
                if hold_at is not None and st.step == hold_at:
                    hold(track.command, track.run_id, st.step, stop)
            self.tick()
            if st.step >= track.max_steps:
                return None
            self.checkpoint()
            why = "SIGTERM" if stop.requested else f"--stop-after {self.stop_after}"
            self.session.say(f"kernattn {track.command}: {track.run_id}: stopped at step {st.step} ({why}); "
                             f"checkpoint {self.ckpt_path}; rerun the command to resume")
            return EXIT_SIGTERM if stop.requested else 0

    def _step(self) -> tuple[float, float]:
        """One optimizer step of grad_accum micro-batches; (lr, start time)."""
        st, track = self.st, self.track
        t0 = time.perf_counter()
        lr = track.set_lr(st.step)
        track.optimizer.zero_grad(set_to_none=True)
        step_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        for micro in range(track.grad_accum):
            batch = track.batch(st.step, micro)
            with self.autocast():
                loss = track.loss(self.fwd, batch)
            (loss / track.grad_accum).backward()
            step_loss += loss.detach().double() / track.grad_accum
        if track.section.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(track.model.parameters(), track.section.grad_clip)
        track.optimizer.step()
        st.step += 1
        track.after_step(st.step)
        newly_bad = (self.bad_step < 0) & ~torch.isfinite(step_loss)
        self.bad_step = torch.where(newly_bad, st.step, self.bad_step)
        self.bad_value = torch.where(newly_bad, step_loss.float(), self.bad_value)
        st.acc += step_loss
        st.acc_n += 1
        self.interval_items += track.items_per_step
        return lr, t0

    def _cadence(self, step_info: tuple[float, float]) -> None:
        """After a step: a train line, an evaluation, a checkpoint, as their cadences say."""
        lr, t0 = step_info
        st, track = self.st, self.track
        end = st.step == track.max_steps
        if st.step % track.log_every == 0 or end:
            mean = float(st.acc.item()) / st.acc_n  # syncs CUDA: the interval's time is real
            self.check_finite()
            self._timed(t0)
            self.train_line(mean, lr)
        else:
            self._timed(t0)
        self.session.bar.update(1)
        if st.step % track.eval_every == 0 or end:
            self.evaluate()  # counted in elapsed_s, not in train_s
        if st.step % track.checkpoint_every == 0 or end:
            self.tick()
            self.checkpoint()

    def _timed(self, t0: float) -> None:
        dt = time.perf_counter() - t0
        self.interval_t += dt
        self.st.train_s += dt

    def tick(self) -> None:
        """Add the wall time since the last tick to elapsed_s."""
        now = time.perf_counter()
        self.st.elapsed_s += now - self.clock
        self.clock = now

    # ------------------------------------------------------------------ lines
    def train_line(self, mean: float, lr: float) -> None:
        st, track = self.st, self.track
        self.tick()
        rate = self.interval_items / self.interval_t if self.interval_t > 0 else 0.0
        st.last_train = mean
        fields = track.line_fields("train", st.step, {"loss": mean, "lr": lr})
        self.session.log.write({"step": st.step, "split": "train", **fields, "elapsed_s": st.elapsed_s,
                                f"{track.rate_unit}_per_s": rate})
        st.acc.zero_()
        st.acc_n = 0
        self.interval_t, self.interval_items = 0.0, 0
        self.session.bar.set_postfix(loss=f"{mean:.3f}", refresh=False)

    def evaluate(self) -> None:
        st, track = self.st, self.track
        self.check_finite()
        values = track.evaluate(self.fwd, self.autocast)
        for key, value in values.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise Diverged(st.step, f"validation {key} is {value}")
        self.tick()
        st.last_val = values
        items = st.step * track.items_per_step
        fields = track.line_fields("val", st.step, values)
        self.session.log.write({"step": st.step, "split": "val", **fields, "elapsed_s": st.elapsed_s,
                                f"{track.rate_unit}_per_s": items / st.train_s if st.train_s > 0 else 0.0})
        self.session.tracker.flush()
        self.session.say(track.describe_val(st.step, values))

    def machine(self) -> dict[str, Any]:
        """config.json's description of where and how the run trains."""
        cuda = self.device.type == "cuda"
        return {"device": self.device.type,
                "device_name": torch.cuda.get_device_name(self.device) if cuda
                else platform.processor() or platform.machine(),
                "effective": {"dtype": "bfloat16" if cuda and self.track.section.dtype == "bfloat16" else "float32",
                              "compile": self.fwd is not self.track.model, "threads": torch.get_num_threads()},
                "torch_version": torch.__version__, "python_version": platform.python_version()}


__all__ = ["train_run", "Loop", "Diverged", "EXIT_DIVERGED", "EXIT_SIGTERM", "all_finite"]
