"""Deep rows stepped as slices. A paper LM row (depth 20, 896M parameters) holds about 12 GiB
of float32 weights, gradients and optimizer state before its first activation: more than a
shared login node should give one check. Its layers repeat, though: every layer is the same
Block, and what differs between layers (the window pattern's short and long windows, the value
embeddings on alternate layers) repeats every `period` layers (4 for SSSL).

So such a row steps two slices of itself, one and two periods deep, at the row's own width,
heads, vocabulary, context, windows and variant, through the same engine (evaluation, forward,
backward, optimizer update, checkpoint; the shallower one also resumes its checkpoint). The
numbers the GPU memory estimate reads (weights, gradients and optimizer state held; the
activations saved per sample; the checkpoint's size) and the CPU peak grow by the same amount
per period, so each is extrapolated linearly from the two slices to the full depth. The
parameter count is extrapolated too and must equal the full model's, counted on the meta
device: that checks the slices hold exactly the full model's layer kinds per period.

What a slice does not run is the full depth's own step; the preflight runs that too when its
extrapolated peak fits the memory ceiling (steps.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# the measured numbers that grow with the depth (rowcheck's result, the process's peak)
EXTRAPOLATED = ("params", "held", "saved_float", "saved_other", "checkpoint_bytes", "peak_rss")


@dataclass(frozen=True)
class Slicing:
    section: str    # the track's params section
    depth: int      # the row's layers
    period: int     # the layers after which the layers' kinds repeat
    dim: int        # the model width, kept in the slices

    @property
    def depths(self) -> tuple[int, int]:
        return self.period, 2 * self.period

    def overrides(self, depth: int) -> dict:
        """The params that build the slice: fewer layers, the same width (the LM's width is
        aspect_ratio x depth)."""
        return {self.section: {"depth": depth, "aspect_ratio": self.dim // depth}}

    def extrapolate(self, small: dict, large: dict) -> dict:
        """Each EXTRAPOLATED number at the full depth, on the line through the two slices."""
        lo, hi = self.depths
        return {k: small[k] + round((large[k] - small[k]) * (self.depth - lo) / (hi - lo)) for k in EXTRAPOLATED}

    def describe(self) -> str:
        return f"{self.depth} layers stepped as slices of {self.depths[0]} and {self.depths[1]}"


def slicing(track: str, params) -> Slicing | None:
    """How a row of `track` is sliced; None when it steps whole (a track without repeating
    layers, or a model at most two periods deep, which is no larger than its slices)."""
    if track != "lm":
        return None
    lm = params.lm
    # windows tile the pattern (the last layer always long); value embeddings alternate layers
    period = math.lcm(len(lm.window_pattern), 2)
    dim = lm.aspect_ratio * lm.depth
    if lm.depth <= 2 * period or lm.depth % period or dim % (2 * period):
        return None
    return Slicing("lm", lm.depth, period, dim)


def planned_params(track: str, planned) -> int | None:
    """The full model's parameter count from the row's Track built at full size (the LM plans
    its models on the meta device: no memory); None for a track that is not sliced."""
    return planned.info["params"]["total"] if track == "lm" else None
