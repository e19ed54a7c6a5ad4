"""The tracks, siblings with the same files: a track `t` is the package kernattn.tracks.<t>
with track.py (the recipe the engine trains), model.py, data.py, stages.py (its stages and
the only owner of where its files live) and report.py (its report part), and whatever is its
own. A track never imports another; what several use lives a floor below them.

The tracks are units of the pipeline, listed with the studies and the benchmarks in
kernattn.units.UNITS: a new track is its folder and its entry there."""

from __future__ import annotations

from types import ModuleType

from ..units import TRACKS, unit

__all__ = ["TRACKS", "track_module", "track_recipe"]


def track_module(track: str, part: str) -> ModuleType:
    """kernattn.tracks.<track>.<part> (imported on demand: the DAG must not pay for torch)."""
    if track not in TRACKS:
        raise ValueError(f"unknown track {track!r}; the tracks are {', '.join(TRACKS)}")
    return unit(track).module(part)


def track_recipe(track: str) -> type:
    """The recipe class the engine trains for `track` (engine.track.Track): its track.py's RECIPE."""
    return track_module(track, "track").RECIPE
