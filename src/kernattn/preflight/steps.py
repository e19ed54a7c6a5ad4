"""Preflight items `step` and `memory`: every training row of every track built at the scale's
shapes and stepped once on the CPU (rowcheck.py, one process per row), and each job's GPU memory
at its configured micro-batch beside the card's (memory.py).

The data are stand-ins the tracks write (each track's data.stand_in: random ids or images in the
prepared form, at the real vocabulary, context, channels, classes and image size), in a work
folder: nothing is read from or written under the scale's results. Rows with the same model
(variant and options: an LM row matched to another's tokens or FLOPs) are built each, and
stepped once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..stage import stage_name
from ..tracks import track_module
from . import memory
from .items import FAIL, OK, WARN, Item


@dataclass(frozen=True)
class Row:
    track: str
    row: str
    run_id: str        # its first seed's run (every seed trains the same model)
    model_of: str      # the row whose step covers this one (itself when it steps)


def rows(params, tracks: tuple[str, ...], only: tuple[str, ...] = ()) -> list[Row]:
    """The first run of every row of `tracks` (of `only`'s rows when given: track/row or row)."""
    out = []
    for track in tracks:
        stepped: dict[str, str] = {}
        seen = set()
        for spec in track_module(track, "stages").runs(params):
            if spec.row in seen or (only and spec.row not in only and f"{track}/{spec.row}" not in only):
                continue
            seen.add(spec.row)
            model = json.dumps([spec.variant, spec.options], sort_keys=True, default=str)
            out.append(Row(track, spec.row, spec.run_id, stepped.setdefault(model, spec.row)))
    return out


def overrides(params, work: Path, tracks: tuple[str, ...]) -> tuple[dict, dict]:
    """(full, one): the stand-in data of every track, the CPU, no MLflow, outputs in `work`;
    `one` also trains a batch of one. Writes the stand-in data."""
    full: dict = {"tracking": {"enabled": False}}
    one: dict = {}
    for track in tracks:
        data, batch = track_module(track, "data").stand_in(params, work / "data" / track)
        section = track_class_section(track)
        _merge(full, data)
        _merge(full, {section: {"device": "cpu", "compile": False, "out_dir": str(work / "runs" / track)}})
        _merge(one, batch)
    return full, _merge(json.loads(json.dumps(full)), one)


def track_class_section(track: str) -> str:
    from .rowcheck import track_class

    return track_class(track).section_name


def _merge(into: dict, over: dict) -> dict:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


def run_row(row: Row, spec: dict, work: Path) -> tuple[dict, int]:
    """One row's check in its own process: (its result, its peak resident memory in bytes)."""
    name = f"{row.track}-{row.row}"
    spec_path, out_path, log_path = (work / "rows" / f"{name}{ext}" for ext in (".json", ".out.json", ".log"))
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(json.dumps({**spec, "track": row.track, "run_id": row.run_id,
                                     "step": row.model_of == row.row}))
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "kernattn.preflight.rowcheck", str(spec_path), str(out_path)],
                                stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    peak = usage.ru_maxrss * 1024  # kilobytes on Linux
    if not out_path.is_file():
        tail = (log_path.read_text().strip().splitlines() or ["no output"])[-1]
        return {"error": f"the check process exited {proc.returncode} ({tail}); log {log_path}"}, peak
    return json.loads(out_path.read_text()), peak


def step_item(row: Row, result: dict, peak: int) -> Item:
    subject = f"{row.track}/{row.row}"
    if "error" in result:
        return Item("step", subject, FAIL, result["error"], result)
    if row.model_of != row.row:
        return Item("step", subject, OK, f"built (its schedule planned); the same model as {row.model_of}, whose "
                                         f"step covers it", result)
    return Item("step", subject, OK,
                f"{result['params']:,} params: one step (eval, forward, backward, update) and its checkpoint in "
                f"{result['step_s']:.1f} s, resumed at step {result['resumed_from_step']} with the same weights in "
                f"{result['resume_s']:.1f} s; checkpoint {_bytes(result['checkpoint_bytes'])}, peak memory "
                f"{_bytes(peak)}", {**result, "peak_rss": peak})


def _bytes(n: float) -> str:
    return f"{n / memory.GIB:.2f} GiB" if n >= memory.GIB else f"{n / 2 ** 20:.1f} MiB"


def memory_item(row: Row, result: dict, stepped: dict, gpus_of, kind, params) -> Item | None:
    """The job's GPU memory at its configured micro-batch (the stepped row's footprint), in
    the configured dtype and compilation (the params', not the CPU step's)."""
    subject = f"{row.track}/{row.row}"
    if "error" in result or "error" in stepped:
        return None
    world = gpus_of(stage_name(result["stage_command"]))
    per_rank, rest = divmod(result["global_batch"], world)
    if rest:
        return Item("memory", subject, FAIL, f"the global batch {result['global_batch']} does not divide over "
                                             f"the profile's {world} GPUs")
    micro = result["micro_batch"] or result["micro_default"] or per_rank
    fp = memory.Footprint(stepped["held"], stepped["saved_float"], stepped["saved_other"])
    section = track_class_section(row.track)
    settings = getattr(params, section)
    got = memory.fit(fp, micro, per_rank, kind.memory_gib, settings.dtype == "bfloat16")
    status = memory.verdict(fp, got, bool(settings.compile))
    text = (f"{got.need_gib:.1f} GiB estimated at micro-batch {micro} ({per_rank} per GPU over {world}) on "
            f"{kind.name} ({kind.memory_gib:g} GiB); the largest that fits: {got.largest or 'none'}")
    if status == FAIL and got.largest:
        text += f": set {section}.micro_batch: {got.largest}"
    elif status == FAIL:
        text += (f": the weights, gradients and optimizer state alone need {fp.held / memory.GIB:.1f} GiB; "
                 f"shard the model or use a larger card")
    elif status == WARN:
        sure = f"set {section}.micro_batch: {got.largest}" if got.largest else "shard the model"
        text += (f"; an eager upper bound (torch.compile keeps fewer activations): try micro-batch {micro} on one "
                 f"GPU first, or {sure}")
    return Item("memory", subject, status, text,
                {"need_gib": got.need_gib, "micro_batch": micro, "per_rank": per_rank, "world": world,
                 "largest_fit": got.largest, "gpu": kind.name, "gpu_gib": kind.memory_gib})


def step_and_memory_items(params_path: str, params, tracks: tuple[str, ...], only: tuple[str, ...], work: Path,
                          gpus_of, kind, say=print) -> list[Item]:
    from .rowcheck import spec_params

    full, one = overrides(params, work, tracks)
    # the command's --overrides (params.overrides) under the stand-ins: each row's process reads it too
    spec = {"params": params_path, "scale": params.scale, "overrides": params.overrides, "full": full, "one": one}
    spec_params(spec, one)  # a bad override stops here, once
    items, stepped = [], {}
    for row in rows(params, tracks, only):
        result, peak = run_row(row, spec, work)
        if row.model_of == row.row:
            stepped[(row.track, row.row)] = result
        step = step_item(row, result, peak)
        mem = memory_item(row, result, stepped.get((row.track, row.model_of), {"error": "not stepped"}), gpus_of,
                          kind, params)
        for item in (step, mem):
            if item is not None:
                items.append(item)
                say(item.line())
    return items
