"""Preflight items `step` and `memory`: every training row of every track built at the scale's
shapes and stepped once on the CPU (rowcheck.py, one process per row), and each job's GPU memory
at its configured micro-batch beside the card's (memory.py).

The data are stand-ins the tracks write (each track's data.stand_in: random ids or images in the
prepared form, at the real vocabulary, context, channels, classes and image size), in a work
folder: nothing is read from or written under the scale's results. Rows with the same model
(variant and options: an LM row matched to another's tokens or FLOPs) are built each, and
stepped once.

Every row's process is held under a memory ceiling and its peak reported (watch.py); a row too
deep to step whole under it steps slices of its repeating layers, extrapolated (slices.py), and
is stepped whole too when the extrapolation says that fits."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from ..stage import stage_name
from ..tracks import track_module, track_recipe
from . import memory, watch
from .items import FAIL, OK, WARN, Item
from .slices import slicing

# a row is stepped whole after its slices when their extrapolated peak leaves this share of
# the ceiling unused: the extrapolation is a straight line, and the ceiling stops the process
WHOLE_MARGIN = 0.9


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
    return track_recipe(track).section_name


def _merge(into: dict, over: dict) -> dict:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


def run_row(row: Row, spec: dict, work: Path, ceiling: watch.Ceiling, tag: str = "") -> dict:
    """One row's check in its own process, held under `ceiling`: its result with `peak_rss`
    (the process's peak resident bytes), or `error` saying how the process ended."""
    name = f"{row.track}-{row.row}{tag}"
    spec_path, out_path, log_path = (work / "rows" / f"{name}{ext}" for ext in (".json", ".out.json", ".log"))
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.unlink(missing_ok=True)  # a --work-dir reused: no earlier run's result read as this one's
    spec_path.write_text(json.dumps({**spec, "track": row.track, "run_id": row.run_id,
                                     "step": row.model_of == row.row}))
    end = watch.run_capped([sys.executable, "-m", "kernattn.preflight.rowcheck", str(spec_path), str(out_path)],
                           log_path, ceiling.limit)
    if end.code < 0 or not out_path.is_file():
        return {"error": watch.ended_text(end, ceiling, log_path), "exit": end.code, "peak_rss": end.peak}
    result = json.loads(out_path.read_text())
    return {**result, "peak_rss": max(end.peak, result.pop("peak_rss_self", 0))}


def step_row(row: Row, spec: dict, work: Path, ceiling: watch.Ceiling, params) -> dict:
    """A row's result: stepped whole, or as two slices extrapolated to its depth (slices.py)
    and whole too when the extrapolated peak fits the ceiling."""
    cut = slicing(track_recipe(row.track), params) if row.model_of == row.row else None
    if cut is None:
        return run_row(row, spec, work, ceiling)
    parts = {}
    for depth, resume in zip(cut.depths, (True, False)):  # one resume proves it; the deeper slice skips it
        one = _merge(json.loads(json.dumps(spec["one"])), cut.overrides(depth))
        part = run_row(row, {**spec, "one": one, "resume": resume}, work, ceiling, f"-{depth}layers")
        if "error" in part:
            return {**part, "error": f"its {depth}-layer slice: {part['error']}"}
        parts[depth] = part
    out = sliced(cut, parts)
    if "error" in out or out["extrapolated"]["peak_rss"] > WHOLE_MARGIN * ceiling.limit:
        return out
    whole = run_row(row, spec, work, ceiling)
    if "error" in whole:
        return {**whole, "error": f"stepped whole: {whole['error']}"}
    return {**whole, "stepped": "whole after slices", "slice": out["slice"], "extrapolated": out["extrapolated"],
            "peaks": {**out["peaks"], str(cut.depth): whole["peak_rss"]},
            "peak_rss": max(whole["peak_rss"], out["peak_rss"])}


def sliced(cut, parts: dict[int, dict]) -> dict:
    """The row's result from its two slices: the shallower slice's checks, the numbers the
    memory estimate reads extrapolated to the full depth, every slice's peak."""
    small, large = (parts[d] for d in cut.depths)
    est = cut.extrapolate(small, large)
    out = {**small, **est, "stepped": "slices", "extrapolated": est,
           "eval_grad": any(p.get("eval_grad") for p in parts.values()),
           "slice": {"depth": cut.depth, "period": cut.period, "depths": list(cut.depths),
                     "step_s": [parts[d]["step_s"] for d in cut.depths]},
           "peaks": {str(d): p["peak_rss"] for d, p in parts.items()},
           "peak_rss": max(p["peak_rss"] for p in parts.values())}  # what the row reached here
    if est["params"] != small.get("planned_params"):
        out["error"] = (f"its slices of {cut.depths[0]} and {cut.depths[1]} layers extrapolate to "
                        f"{est['params']:,} params, the full model has {small.get('planned_params')}: its layers "
                        f"do not repeat as slices.py assumes; step it whole with a larger --max-memory")
    return out


def step_item(row: Row, result: dict) -> Item:
    subject, peak = f"{row.track}/{row.row}", result.get("peak_rss", 0)
    if "error" in result:
        return Item("step", subject, FAIL, result["error"], result)
    if row.model_of != row.row:
        return Item("step", subject, OK, f"built (its schedule planned); the same model as {row.model_of}, whose "
                                         f"step covers it; peak memory {_bytes(peak)}", result)
    if result.get("eval_grad"):
        return Item("step", subject, FAIL,
                    f"its evaluation runs with autograd on ({result['evaluate']} has no @torch.no_grad()): every "
                    f"validation batch's graph is kept until the loss is summed, so the evaluation holds the "
                    f"activations of all its batches at once and can run the GPU out of memory at step 0; "
                    f"decorate it with @torch.no_grad() (the preflight ran its own evaluation without "
                    f"autograd; peak memory here {_bytes(peak)})", result)
    if result.get("stepped") == "slices":
        return Item("step", subject, OK, _sliced_text(result), result)
    text = (f"{result['params']:,} params: one step (eval, forward, backward, update) and its checkpoint in "
            f"{result['step_s']:.1f} s, resumed at step {result['resumed_from_step']} with the same weights in "
            f"{result['resume_s']:.1f} s; checkpoint {_bytes(result['checkpoint_bytes'])}, peak memory "
            f"{_bytes(peak)}")
    if "slice" in result:
        est = result["extrapolated"]
        text += (f" (its slices of {' and '.join(map(str, result['slice']['depths']))} layers, stepped first, "
                 f"predicted {_bytes(est['peak_rss'])}, and {_bytes(est['held'])} held against "
                 f"{_bytes(result['held'])} measured)")
    return Item("step", subject, OK, text, result)


def _sliced_text(r: dict) -> str:
    cut, est = r["slice"], r["extrapolated"]
    (a, b), (sa, sb) = cut["depths"], cut["step_s"]
    peaks = " and ".join(_bytes(r["peaks"][str(d)]) for d in cut["depths"])
    return (f"{est['params']:,} params over {cut['depth']} layers, stepped as slices of {a} and {b} layers (its "
            f"layers repeat every {cut['period']}): one step (eval, forward, backward, update) and its checkpoint "
            f"each, in {sa:.1f} s and {sb:.1f} s, the {a}-layer slice resumed at step {r['resumed_from_step']} "
            f"with the same weights in {r['resume_s']:.1f} s; peak memory {peaks}. Extrapolated to {cut['depth']} "
            f"layers (the parameter count matches the full model's): {_bytes(est['held'])} held, checkpoint "
            f"{_bytes(est['checkpoint_bytes'])}; a whole step would peak near {_bytes(est['peak_rss'])} here, "
            f"more than the ceiling allows: --max-memory {math.ceil(est['peak_rss'] / WHOLE_MARGIN / memory.GIB)} "
            f"steps it whole too, where the memory is free")


def _bytes(n: float) -> str:
    return f"{n / memory.GIB:.2f} GiB" if n >= memory.GIB else f"{n / 2 ** 20:.1f} MiB"


def memory_item(row: Row, result: dict, stepped: dict, gpus_of, kind, params) -> Item | None:
    """The job's GPU memory at its configured micro-batch (the stepped row's footprint), in
    the configured dtype and compilation (the params', not the CPU step's)."""
    subject = f"{row.track}/{row.row}"
    if "error" in result or "error" in stepped:
        return None
    if result["global_batch"] is None:  # the protocol allows it: one process, one micro-batch a step
        return Item("memory", subject, WARN, "its track declares no global batch (it trains in one process, one "
                                             "micro-batch a step): its GPU memory is not estimated")
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
                          gpus_of, kind, ceiling: watch.Ceiling, say=print) -> list[Item]:
    from .rowcheck import spec_params

    full, one = overrides(params, work, tracks)
    # the command's --overrides (params.overrides) under the stand-ins: each row's process reads it too
    spec = {"params": params_path, "scale": params.scale, "overrides": params.overrides, "full": full, "one": one}
    spec_params(spec, one)  # a bad override stops here, once
    todo = rows(params, tracks, only)
    say(memory_plan(todo, params, ceiling))
    items, stepped = [], {}
    for row in todo:
        result = step_row(row, spec, work, ceiling, params)
        if row.model_of == row.row:
            stepped[(row.track, row.row)] = result
        mem = memory_item(row, result, stepped.get((row.track, row.model_of), {"error": "not stepped"}), gpus_of,
                          kind, params)
        for item in (step_item(row, result), mem):
            if item is not None:
                items.append(item)
                say(item.line())
    return items


def memory_plan(todo: list[Row], params, ceiling: watch.Ceiling) -> str:
    """The memory line printed before the first row runs: the ceiling, and which rows step as
    slices."""
    text = f"memory: each row's check process is held under {ceiling.text()}"
    cut = {r.track: c for r in todo if r.model_of == r.row and (c := slicing(track_recipe(r.track), params))}
    for track, c in cut.items():
        text += (f"; {track} rows ({c.depth} layers) step slices of {c.depths[0]} and {c.depths[1]} layers, "
                 f"extrapolated to {c.depth}, and whole too where that fits")
    return text
