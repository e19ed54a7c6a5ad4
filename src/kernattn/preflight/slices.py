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


def slicing(recipe, params) -> Slicing | None:
    """How a row of the track whose recipe class is `recipe` is sliced (its repeating_layers);
    None when it steps whole (a track without repeating layers, or a model at most two periods
    deep, which is no larger than its slices)."""
    declared = recipe.repeating_layers(params)
    if declared is None:
        return None
    section, depth, period, dim = declared
    if depth <= 2 * period or depth % period or dim % (2 * period):
        return None
    return Slicing(section, depth, period, dim)
