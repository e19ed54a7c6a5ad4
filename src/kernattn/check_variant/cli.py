"""`kernattn check-variant NAME [--options YAML] [--plugins P ...]`: the conformance suite, one line
per check, exit 1 naming the checks that failed.

    kernattn check-variant cosine --plugins examples/plugins/cosine_attention.py
    kernattn check-variant gpa --options '{n_kernels: 8, combine: mult}'

The plugins params.yaml names (`plugins:`) and KERNATTN_PLUGINS load as for every command;
--plugins adds more. The checks: kernattn.attention.conformance (reference, normalised, causal,
finite, determinism, precision, state_dict) and training.py (training, resume).
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the variant's registry name (a built-in's or a plugin's)")
    parser.add_argument("--options", default="{}", metavar="YAML", help="its options, a YAML/JSON mapping")
    parser.add_argument("--plugins", nargs="*", default=[], metavar="P",
                        help="plugin files or modules to load first (beside params.yaml's `plugins:`)")
    parser.add_argument("--skip-training", action="store_true", help="the module checks only (seconds)")


def run(args: argparse.Namespace) -> int:
    from ..attention import AttentionConfigError, conformance, make_options, plugins
    from ..config import load_params

    load_params(args.params)  # its `plugins:` and KERNATTN_PLUGINS, as every command loads them
    plugins.load(args.plugins)
    try:
        options = yaml.safe_load(args.options) or {}
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
        from .training import check_training

        with tempfile.TemporaryDirectory(prefix="kernattn-check-") as tmp:
            t0 = time.perf_counter()
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # the engine's own lines: one line per check here
                    training, resume = check_training(str(args.params), args.name, options, Path(tmp))
            except Exception as exc:  # noqa: BLE001 -- a crash in training fails the check, in one line
                line = next(iter(str(exc).strip().splitlines()), "")
                training, resume = [f"raised {type(exc).__name__}: {line}"], ["not checked: the training failed"]
            failed += _say("training", training, f" ({time.perf_counter() - t0:.1f} s)")
            failed += _say("resume", resume)
    print(f"kernattn check-variant: {args.name}: " + (f"FAILED {', '.join(failed)}" if failed else "conforms"))
    return 1 if failed else 0


def _say(name: str, problems: list[str], extra: str = "") -> list[str]:
    if problems:
        print(f"FAIL  {name:<12} {'; '.join(problems)}", flush=True)
        return [name]
    print(f"ok    {name}{extra}", flush=True)
    return []
