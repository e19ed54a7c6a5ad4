"""Figures every part draws with: a matplotlib figure that needs no display and no pyplot
(pyplot's global state is not safe beside other threads, and a stage never shows a window)."""

from __future__ import annotations


def new_figure(width: float, height: float):
    """A constrained-layout Figure of width x height inches on the Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig
