"""Will a job fit its GPU? An estimate of each training job's GPU memory at its configured
micro-batch, from what the preflight step measured on the CPU at a micro-batch of one.

    bytes(m) = held + m x activations(dtype) + CUDA_OVERHEAD

- `held`: what the model keeps between steps, measured after the step: weights, gradients and
  optimizer state (and any other checkpointed part, the ViT's EMA). Mixed precision keeps these
  in float32 on the GPU too, so the CPU's count is the GPU's.
- `activations`: the bytes autograd saved for the backward pass of one sample (one sequence at
  the real context, one image at the real size), counted by a saved-tensors hook during the
  step (parameters excluded: they are in `held`). Measured in float32; under bf16 autocast the
  floating-point part is taken at half, an estimate: autocast keeps norms, softmax statistics
  and the loss in float32, and torch.compile frees some of what eager keeps.
- CUDA_OVERHEAD: the CUDA context, library workspaces and the caching allocator's slack, an
  allowance rather than a measurement; only USABLE of the card's memory is planned on.

The micro-batch that fits is the largest divisor of the rank's share of the global batch (the
engine accumulates whole micro-batches: engine/dist.layout) whose estimate fits.

What the estimate can decide (`verdict`): the held bytes are certain, so a card they fill alone
fails. The activations are eager's: for a run without torch.compile the estimate is the
estimate, and a micro-batch beyond it fails; a compiled run (the CUDA default) keeps less than
eager does (inductor recomputes elementwise chains instead of saving them), so there the
estimate is an upper bound and a micro-batch beyond it is a warning, not a failure.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2 ** 30
CUDA_OVERHEAD = 2 * GIB
USABLE = 0.95


@dataclass(frozen=True)
class Footprint:
    """What one step at micro-batch 1 measured: bytes held between steps, and bytes autograd
    saved per sample (floating point, and the rest: integer indices, masks)."""
    held: int
    saved_float: int
    saved_other: int = 0

    def activations(self, bf16: bool) -> float:
        return self.saved_float * (0.5 if bf16 else 1.0) + self.saved_other

    def gpu_bytes(self, micro: int, bf16: bool) -> float:
        return self.held + micro * self.activations(bf16) + CUDA_OVERHEAD


def largest_fit(fp: Footprint, per_rank: int, capacity_gib: float, bf16: bool) -> int:
    """The largest micro-batch dividing `per_rank` whose estimate fits USABLE x the card's
    memory; 0 when not even one sample fits."""
    budget = USABLE * capacity_gib * GIB
    fits = [m for m in range(1, per_rank + 1) if per_rank % m == 0 and fp.gpu_bytes(m, bf16) <= budget]
    return max(fits, default=0)


@dataclass(frozen=True)
class Fit:
    micro: int            # the micro-batch the job will run at (the section's, else the track's)
    per_rank: int         # the rank's share of the global batch
    need_gib: float       # the estimate at `micro`
    capacity_gib: float
    largest: int          # the largest micro-batch that fits (0: none)

    @property
    def ok(self) -> bool:
        return 0 < self.micro <= self.largest


def fit(fp: Footprint, micro: int, per_rank: int, capacity_gib: float, bf16: bool) -> Fit:
    return Fit(micro, per_rank, fp.gpu_bytes(micro, bf16) / GIB, capacity_gib,
               largest_fit(fp, per_rank, capacity_gib, bf16))


def verdict(fp: Footprint, got: Fit, compiled: bool) -> str:
    """"ok", "warn" or "FAIL" for the job's configured micro-batch (module docstring)."""
    if got.ok:
        return "ok"
    if fp.held + CUDA_OVERHEAD > USABLE * got.capacity_gib * GIB or not compiled:
        return "FAIL"
    return "warn"
