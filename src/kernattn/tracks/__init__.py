"""The tracks, siblings with the same files: a track `t` is the package kernattn.tracks.<t>
with track.py (the recipe the engine trains), model.py, data.py, stages.py (its stages and
the only owner of where its files live) and report.py (its report part), and whatever is its
own. A track never imports another; what several use lives a floor below them.

TRACKS is the one list the DAG (kernattn.dag.stages) and the report (kernattn.page.build)
loop over: a new track is its folder and a name here."""

from __future__ import annotations

import importlib
from types import ModuleType

TRACKS = ("char", "lm", "vision")  # also the order of their parts in the report


def track_module(track: str, part: str) -> ModuleType:
    """kernattn.tracks.<track>.<part> (imported on demand: the DAG must not pay for torch)."""
    if track not in TRACKS:
        raise ValueError(f"unknown track {track!r}; the tracks are {', '.join(TRACKS)}")
    return importlib.import_module(f"{__name__}.{track}.{part}")
