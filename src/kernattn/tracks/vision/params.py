"""The `vision:` section of params.yaml, defined in kernattn.config.vision (the loader builds
and checks it with every other section), and the options every vision stage takes."""

from __future__ import annotations

from ...config.vision import DATASETS, VARIANTS, VisionParams

__all__ = ["DATASETS", "VARIANTS", "VisionParams", "add_params_arguments", "stage_params"]


def add_params_arguments(parser) -> None:
    """--params / --scale, as every vision stage takes them."""
    parser.add_argument("--params", default="params.yaml", help="params file (default %(default)s)")
    parser.add_argument("--scale", default=None, help="scale of params.yaml (default: the file's `scale`)")


def stage_params(args):
    """load_params for a stage (a ParamsError is one line: cli.main)."""
    from ...config import load_params

    return load_params(args.params, args.scale)
