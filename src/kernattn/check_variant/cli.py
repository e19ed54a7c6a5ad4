"""`kernattn check-variant NAME [--options YAML] [--plugins P ...]`: the conformance suite, one line
per check, exit 1 naming the checks that failed.

    kernattn check-variant cosine --plugins examples/plugins/cosine_attention.py
    kernattn check-variant gpa --options '{n_kernels: 8, combine: mult}'

The plugins params.yaml names (`plugins:`), those of an --overrides file and KERNATTN_PLUGINS
load as for every command; --plugins adds more. The module checks (--skip-training) need no
params.yaml: run from any folder, they load KERNATTN_PLUGINS and --plugins only. The checks: kernattn.attention.conformance (reference, padded, normalised, causal,
finite, determinism, precision, state_dict) and training.py (training, resume, ddp).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
from pathlib import Path

import yaml

from ..errors import UsageError
from ..yaml_text import safe_load


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the variant's registry name (a built-in's or a plugin's)")
    parser.add_argument("--options", default="{}", metavar="YAML", help="its options, a YAML/JSON mapping")
    parser.add_argument("--plugins", nargs="*", default=[], metavar="P",
                        help="plugin files or modules to load first (beside params.yaml's `plugins:`)")
    parser.add_argument("--skip-training", action="store_true", help="the module checks only (seconds)")
    parser.add_argument("--skip-ddp", action="store_true", help="no 2-rank run (torchrun; some seconds more)")


def run(args: argparse.Namespace) -> int:
    from ..attention import AttentionConfigError, conformance, make_options

    if not args.skip_training and not Path(args.params).exists():
        raise UsageError(f"no params file {args.params}: the training checks run the micro scale of one "
                         f"(pass --params, or --skip-training for the module checks alone)")
    loaded = load_command_plugins(args)
    try:
        options = safe_load(args.options) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"--options {args.options!r}: not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(options, dict):
        raise UsageError(f"--options {args.options!r}: must be a mapping of option -> value")
    try:
        make_options(args.name, options)
    except AttentionConfigError as exc:
        raise UsageError(str(exc)) from None
    failed = []
    for check in conformance.CHECKS:
        failed += _say(check.name, conformance.run_check(check, args.name, options))
    if not args.skip_training:
        failed += _training(args, options, loaded)
    print(f"kernattn check-variant: {args.name}: " + (f"FAILED {', '.join(failed)}" if failed else "conforms"))
    return 1 if failed else 0


def load_command_plugins(args: argparse.Namespace) -> list[str]:
    """Load the plugins a command names: the params file's `plugins:`, those of --overrides FILE
    and KERNATTN_PLUGINS, as every command loads them, then --plugins. The module checks and the
    listing need no params: without the file (the default name, no --overrides) only
    KERNATTN_PLUGINS and --plugins load. Returns the sources the training checks' ranks load
    again (of the --overrides file only its plugins reach them: they run at the micro scale with
    settings of their own)."""
    from ..attention import plugins
    from ..config import params_from_args

    if Path(args.params).exists() or args.overrides or args.params != "params.yaml":
        added = list(params_from_args(args).changes.get("plugins", ()))
    else:
        plugins.load_env()
        added = []
    return [*added, *(p.file for p in plugins.load(args.plugins))]


def _training(args: argparse.Namespace, options: dict, loaded: list[str]) -> list[str]:
    """The training checks (training.py), one line each; a crash fails them in one line."""
    from .training import check_training

    with tempfile.TemporaryDirectory(prefix="kernattn-check-") as tmp:
        t0 = time.perf_counter()
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the engine's own lines: one line per check here
                found = check_training(str(args.params), args.name, options, loaded, Path(tmp),
                                       ddp=not args.skip_ddp)
        except Exception as exc:  # noqa: BLE001 -- a crash in training fails the checks, in one line
            line = next(iter(str(exc).strip().splitlines()), "")
            found = {"training": [f"raised {type(exc).__name__}: {line}"], "resume": ["not checked"]}
    failed = []
    for name, problems in found.items():
        failed += _say(name, problems, f" ({time.perf_counter() - t0:.1f} s in all)" if name == "training" else "")
    return failed


def _say(name: str, problems: list[str], extra: str = "") -> list[str]:
    if problems:
        print(f"FAIL  {name:<12} {'; '.join(problems)}", flush=True)
        return [name]
    print(f"ok    {name}{extra}", flush=True)
    return []
