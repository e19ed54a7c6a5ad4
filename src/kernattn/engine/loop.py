"""The one training loop, for every track: resume, SIGTERM, divergence, MLflow, atomic outputs.

    exit_code = train_run(track, fresh=False, stop_after=None, stale="error", progress=True)

A session: open the run folder (refuse or archive a stale one; resume a checkpoint of the same
fingerprint; nothing to do when final.json has it), derive the batch layout and build the
track on its device with it, open the session (session.py: cut metrics.jsonl back to the
checkpoint, write config.json, open or reopen the MLflow run), then steps until max_steps:
each step is grad_accum micro-batches, clipping, the optimizer and the track's after_step.
Train lines every log_every steps (the mean loss since the last one), evaluations at step 0,
every eval_every steps and at the end (each records the variants' own parameters: trace.py,
param_trace.npz), checkpoints every checkpoint_every steps and at the end (checkpoint.py);
final.json last. Every metrics line carries `lr`, written here from the schedule: a train
line the rate of its step, a val line the rate of the last step taken (at step 0 the first's).

Exit codes: 0 finished (or already finished, or --stop-after), 143 SIGTERM (checkpoint
saved), 3 divergence: a nan/inf training loss (its first step is kept on the device, read
only when the loop syncs anyway: train lines, evaluations, checkpoints), a non-finite
validation value or non-finite weights at a checkpoint. A divergence prints one line, ends
metrics.jsonl with a FAILED record, marks the MLflow run FAILED (tag `failure`) and never
overwrites the last good checkpoint.

Under data parallelism (torchrun or srun starts one process per GPU; dist.py) every rank runs
this loop on its share of each step's global batch, DDP averaging the gradients (synchronised
on the last micro-batch only). Rank 0 alone writes the run folder and the MLflow run; the
others keep the same counters. Each step one all_reduce carries the training loss (the train
lines are the global mean; a non-finite loss on one rank is non-finite everywhere, so every
rank stops with exit 3) and the SIGTERM flag (a signal to any rank stops every rank after
that step, with one checkpoint, exit 143). Checkpoints hold every rank's RNG states; a resume
on another number of ranks keeps the global batch and the data position (the draws are the
same, only the split differs) and says so.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import time

import torch

from ..attention.plugins import records
from ..config.common import RunSettings
from ..errors import UsageError
from . import dist
from .checkpoint import Checkpoints, LoopState, all_finite, opening_of
from .rundir import CKPT, open_run_dir, read_checkpoint
from .runtime import autocast_factory, derive_seed, digest, resolve_device, seed_everything
from .session import Opening, QuietSession, Session, machine
from .signals import EXIT_SIGTERM, StopSignal, hold, hold_at_step, nonfinite_at
from .schedule import LrSchedule
from .trace import ParamTrace
from .track import Track

EXIT_DIVERGED = 3


class Diverged(Exception):
    """The training or validation loss, or the weights, stopped being finite."""

    def __init__(self, step: int, what: str):
        super().__init__(f"step {step}: {what}")
        self.step, self.what = step, what


def train_run(track: Track, *, fresh: bool = False, stop_after: int | None = None, stale: str = "error",
              progress: bool = True) -> int:
    """Train (or resume, or skip when finished) one run of `track`; returns the exit status."""
    if not isinstance(track.section, RunSettings):  # the loop reads device, dtype, ... typed
        raise TypeError(f"{type(track).__module__}.{type(track).__qualname__}.section is a "
                        f"{type(track.section).__name__}, not a config RunSettings: set it to the track's params "
                        f"section (TrainParams, LMParams, VisionParams or another RunSettings subclass)")
    world = dist.world_from_env()
    device = dist.device_of(world, resolve_device(track.section.device))
    fp_config = {"format": track.fingerprint_format, **track.fingerprint_config()}
    if plugin := records([track.variant]):  # a plugin's variant: its code is part of what trains
        fp_config["plugins"] = plugin
    fingerprint = digest(fp_config)
    with dist.process_group(world, device, track.section.dist_timeout_s):
        try:
            found, ckpt = _open(track, world, fingerprint, fp_config, fresh=fresh, stale=stale)
            if found in ("done", "refused"):
                return 0 if found == "done" else 2  # rank 0 raised the one-line error
            if found == "resume" and not world.main:  # rank 0 checked it; the others read the same file
                ckpt = read_checkpoint(track.run_dir / CKPT, f"rerun with --fresh to train {track.run_id} from scratch")
            return Loop(track, world, device, fingerprint, fp_config, ckpt, stop_after=stop_after,
                        progress=progress).run()
        except UsageError:
            if world.main:
                raise  # its one line (cli.main); the other ranks, which met the same, exit as quietly
            return 2


def _open(track: Track, world: dist.World, fingerprint: str, fp_config: dict, *, fresh: bool,
          stale: str) -> tuple[str, dict | None]:
    """Rank 0 opens the run folder (--fresh, stale policy, resume); every rank learns what it
    found: done, resume (rank 0's checkpoint), new, or refused (rank 0 raises the UsageError,
    the others return 2)."""
    found, error, ckpt = "new", None, None
    if world.main:
        try:
            if fresh and track.run_dir.exists():
                shutil.rmtree(track.run_dir)  # asked for by name on the command line
            done, ckpt = open_run_dir(track.run_dir, fingerprint, fp_config, stale=stale,
                                      command=track.command, run_id=track.run_id, variant=track.variant)
            if not done and ckpt is None and track.seed_run_dir(fingerprint, fp_config):
                done, ckpt = open_run_dir(track.run_dir, fingerprint, fp_config, stale="error",
                                          command=track.command, run_id=track.run_id, variant=track.variant)
            found = "done" if done else "resume" if ckpt is not None else "new"
            if not done:
                track.run_dir.mkdir(parents=True, exist_ok=True)
        except UsageError as exc:
            found, error = "refused", exc
    found = dist.broadcast(found, world)
    if error is not None:
        raise error
    return found, ckpt


def batch_layout(track: Track, world: dist.World) -> dist.Layout:
    """The layout of the track's global batch: micro-batches x accumulation on each rank
    (dist.layout); a track without a global batch trains in one process, one micro-batch a step."""
    if track.global_batch is None:
        if world.size > 1:
            raise UsageError(f"kernattn {track.command}: the {track.name} track trains in one process only, "
                             f"not in {world.size} ranks; start it without torchrun or --nproc")
        return dist.Layout(world)
    micro = track.section.micro_batch or track.micro_default
    return dist.layout(track.global_batch, micro, world, f"{track.params.path}: {track.section_name}")


class Loop:
    def __init__(self, track: Track, world: dist.World, device: torch.device, fingerprint: str, fp_config: dict,
                 ckpt: dict | None, *, stop_after: int | None, progress: bool):
        self.track, self.stop_after = track, stop_after
        self.world, self.device = world, device
        sec = track.section
        if sec.threads:
            torch.set_num_threads(sec.threads)
        if self.device.type == "cuda":
            torch.set_float32_matmul_precision("high")
        seed_everything(track.seed)  # the init depends on the seed only
        self.layout = batch_layout(track, world)
        track.build(self.device, self.layout)
        if not world.main:  # dropout, augmentations: each rank its own stream (rank 0: the one-process one)
            seed_everything(derive_seed(track.seed, f"rank{world.rank}"))
        # evaluation runs `base` (no collective in a forward); training `fwd`, DDP's under several ranks
        self.base = torch.compile(track.model) if self.device.type == "cuda" and sec.compile else track.model
        self.fwd = self.base
        if world.size > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.fwd = DistributedDataParallel(self.base, device_ids=[device.index] if device.type == "cuda" else None,
                                               broadcast_buffers=False)
        self.stop_all = False
        self.autocast = autocast_factory(self.device, sec.dtype)
        self.st = LoopState(acc=torch.zeros((), dtype=torch.float64, device=self.device))
        self.trace = ParamTrace(track.model)  # the variants' own parameters at every evaluation
        self.schedule = LrSchedule(track)  # the rate of every step, set through the track (schedule.py)
        self.ckpts = Checkpoints(track, world, fingerprint, fp_config)
        if ckpt is not None:
            self.ckpts.restore(ckpt, self.st, self.trace, self.schedule, self.device)
        self.opening = Opening(fingerprint, fp_config.get("plugins") or [],
                               machine(device, sec.dtype, self.base is not track.model, self.layout),
                               progress=progress, **opening_of(ckpt))
        # First non-finite training loss: step and value, kept on the device (no sync per step).
        self.bad_step = torch.full((), -1, dtype=torch.long, device=self.device)
        self.bad_value = torch.zeros((), dtype=torch.float32, device=self.device)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self) -> None:
        self.check_finite()
        if not all_finite(self.track.model):  # never replace the last good checkpoint by broken weights
            raise Diverged(self.st.step, "the weights are no longer finite")
        self.ckpts.save(self.st, self.trace, self.schedule, self.session)

    def check_finite(self) -> None:
        step = int(self.bad_step.item())
        if step >= 0:
            raise Diverged(step, f"training loss is {float(self.bad_value.item())}")

    # ------------------------------------------------------------------ the session
    def run(self) -> int:
        self.session = Session(self.track, self.opening) if self.world.main else QuietSession(self.opening)
        status = "FAILED"
        try:
            code = self._train()
            if code is not None:
                status = "KILLED"
                return code
            self.st.final_values = self.track.final_evaluate(self.base, self.autocast)  # every rank
            if self.world.main:
                self.trace.write(self.track.run_dir)  # before final.json, which the session writes last
                self.schedule.write(self.track.run_dir)
            self.session.finish(self.st)
            status = "FINISHED"
            return 0
        except Diverged as exc:
            self.session.fail(exc, self.st.ckpt_step, self.ckpts.path)
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
            self.stop = stop
            while st.step < track.max_steps:
                if self.stop_all or (self.stop_after is not None and st.step >= self.stop_after):
                    break
                self._cadence(self._step())
                if hold_at is not None and st.step == hold_at:
                    hold(track.command, track.run_id, st.step,
                         lambda: dist.any_rank(stop.requested, self.world, self.device))
                    self.stop_all = True
            self.tick()
            if st.step >= track.max_steps:
                return None
            self.checkpoint()
            why = "SIGTERM" if self.stop_all else f"--stop-after {self.stop_after}"
            self.session.say(f"kernattn {track.command}: {track.run_id}: stopped at step {st.step} ({why}); "
                             f"checkpoint {self.ckpts.path}; rerun the command to resume")
            return EXIT_SIGTERM if self.stop_all else 0

    def _step(self) -> tuple[float, float]:
        """One optimizer step of grad_accum micro-batches; (lr, start time)."""
        st, track = self.st, self.track
        t0 = time.perf_counter()
        lr = self.schedule.step(st.step)
        track.optimizer.zero_grad(set_to_none=True)
        step_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        accum = self.layout.grad_accum
        for micro in range(accum):
            batch = track.batch(st.step, micro)
            last = micro == accum - 1
            # DDP averages the gradients over the ranks on the last micro-batch only
            with contextlib.nullcontext() if last or self.world.size == 1 else self.fwd.no_sync():
                with self.autocast():
                    loss = track.loss(self.fwd, batch)
                (loss / accum).backward()
            step_loss += loss.detach().double() / accum
        step_loss = self._agree(step_loss, st.step + 1)
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

    def _agree(self, step_loss: torch.Tensor, step: int) -> torch.Tensor:
        """The step's loss as the mean over the ranks and the SIGTERM flag of any rank, in one
        all_reduce (under one process: the loss, and this process's flag)."""
        if nonfinite_at(self.world.rank, step):  # tests: one rank's loss turns nan
            step_loss = step_loss * float("nan")
        if self.world.size == 1:
            self.stop_all = self.stop.requested
            return step_loss
        packed = torch.stack([step_loss, torch.full_like(step_loss, float(self.stop.requested))])
        dist.reduce_sum(packed, self.world)
        self.stop_all = bool(packed[1].item() > 0)
        return packed[0] / self.world.size

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
        if st.step % track.checkpoint_every == 0 or end or st.step in track.keep_at:
            self.tick()
            self.checkpoint()
            if st.step in track.keep_at:
                self.ckpts.keep(st.step)

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
        fields = track.line_fields("train", st.step, {"loss": mean})
        self.session.log.write({"step": st.step, "split": "train", **fields, "lr": lr, "elapsed_s": st.elapsed_s,
                                f"{track.rate_unit}_per_s": rate})
        st.acc.zero_()
        st.acc_n = 0
        self.interval_t, self.interval_items = 0.0, 0
        self.session.bar.set_postfix(loss=f"{mean:.3f}", refresh=False)

    def evaluate(self) -> None:
        st, track = self.st, self.track
        self.check_finite()
        values = track.evaluate(self.base, self.autocast)
        for key, value in values.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise Diverged(st.step, f"validation {key} is {value}")
        self.tick()
        st.last_val = values
        if self.world.main:
            self.trace.record(st.step)
        items = st.step * track.items_per_step
        fields = track.line_fields("val", st.step, values)
        self.session.log.write({"step": st.step, "split": "val", **fields, "lr": self.schedule.last(st.step),
                                "elapsed_s": st.elapsed_s,
                                f"{track.rate_unit}_per_s": items / st.train_s if st.train_s > 0 else 0.0})
        self.session.tracker.flush()
        self.session.say(track.describe_val(st.step, values))


__all__ = ["train_run", "Loop", "Diverged", "EXIT_DIVERGED", "EXIT_SIGTERM"]
