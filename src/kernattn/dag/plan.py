"""`kernattn plan`: what the DAG at a scale will cost before it is launched.

For every planned job (each training run of every track, and each LM evaluation: the units' PLANNED)
its FLOPs (plan_flops: counted on the meta device), its GPU-hours at a model FLOPs utilisation
(MFU) of the GPU kind's dense bf16 peak (bench/gpus.yaml), and its wall time on the GPUs one run
gets (the profile's `ranks` x `nodes`, else its `gpu`, else 1; data parallel is taken to scale
linearly, the best case); then the whole DAG: the sum of GPU-hours, the critical path (the
longest chain of dependent jobs, the jobs between them taking no GPU time) and the wall time
of a greedy list schedule on the cluster's GPUs (critical-path-first, as Snakemake's
scheduler would start ready jobs when GPUs free up).

A ViT trained on ImageNet JPEGs can be held back by its input pipeline instead: its CPU
workers decode and augment at most ranks x vision.workers x (images/s of one worker, as
`kernattn bench-loader` measured it: results/*/loader-*.csv, timm/PIL on JPEGs) images a
second. Its wall time is the longer of the two, and its GPU-hours are that wall time on its GPUs
(they are held while they wait); the table says which bound set it.

MFU: --mfu, else the median MFU gpu-check measured on that kind (results/gpu/*/train.csv),
else the kind's stated default (gpus.yaml). `--gpu cpu`: the peak is measured here (float32
matmul at the runs' thread count) and the MFU is the stated CPU default of gpus.yaml.

The same estimate x a safety factor is each training stage's SLURM time limit
(slurm_minutes; `kernattn install-profile` writes it into the profile).
"""

from __future__ import annotations

import csv
import heapq
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..bench import peaks
from ..config import Params
from ..stage import Stage
from ..yaml_text import safe_load

SAFETY = 2.0          # time limit = planned wall x this (MFU and scaling are estimates)
MARGIN_MIN = 15       # + minutes of start-up a plan does not count (imports, data, compile)
PROFILE = "profiles/slurm/config.yaml"
MEASURED = "results/gpu"
LOADER_ROOT = "results"           # bench-loader's CSVs: results/<machine>/loader-*.csv
LOADER_PIPELINE = "timm-pil"      # what tracks/vision/data.py runs on ImageNet (docs/benchmarks.md, "Input pipeline")
COMPUTE, INPUT = "compute", "input pipeline"


@dataclass(frozen=True)
class Job:
    """One job of the DAG: its dependencies, and (planned jobs) its FLOPs and GPUs."""
    id: str                       # stage or stage@run
    stage: str
    deps: tuple[str, ...] = ()
    flops: float = 0.0
    gpus: int = 0                 # 0: not planned (no GPU time)
    info: dict = field(default_factory=dict, compare=False)


# ----------------------------------------------------------------------------- the job graph
def job_graph(table: dict[str, Stage]) -> dict[str, tuple[str, str | None, tuple[str, ...]]]:
    """job id -> (stage, run, ids of the jobs that write its inputs), over the whole table."""
    writer, jobs = {}, {}
    for stage in table.values():
        for run in stage.runs if stage.per_run else (None,):  # a per-run stage may have no run (no GPA row)
            jid = f"{stage.name}@{run}" if run is not None else stage.name
            jobs[jid] = (stage, run)
            for out in stage.outputs(run):
                writer[out] = jid
    graph = {}
    for jid, (stage, run) in jobs.items():
        deps = tuple(dict.fromkeys(writer[f] for f in stage.inputs(run) if f in writer and writer[f] != jid))
        graph[jid] = (stage.name, run, deps)
    return graph


def plan_jobs(p: Params, table: dict[str, Stage], gpus_of) -> list[Job]:
    """Every job of the table; the planned ones (the units' PLANNED: plan_flops) with their
    FLOPs, counted once per (stage, row): the seeds of a row compute the same."""
    from . import plan_flops as pf

    planned_stages = pf.planned_stages()
    cache, specs, out = {}, {}, []
    for jid, (stage, run, deps) in job_graph(table).items():
        if stage not in planned_stages or run is None:
            out.append(Job(jid, stage, deps))
            continue
        if stage not in specs:  # each stage's runs once (setdefault would rebuild them for every job)
            specs[stage] = planned_stages[stage](p)
        planned = specs[stage][run]
        spec = planned.spec
        key = (stage, planned.track, spec.row, planned.budget)
        if key not in cache:
            cache[key] = planned.work(p)
        work = cache[key]
        out.append(Job(jid, stage, deps, work.total, gpus_of(stage),
                       {"track": planned.track, "run": run, "source": spec.source or "", "study": planned.study,
                        "paper": planned.paper,
                        "flops_per_step": work.flops_per_step, "steps": work.steps, "loader_workers": planned.loader_workers,
                        "samples": work.steps * work.samples_per_step + work.eval_samples}))
    return out


def hours_by_paper_table(frame) -> dict[str, float]:
    """GPU-hours each document's table or figure needs: the jobs of every row it names. A row
    that two of them name (the RoPE baseline of gpa-short and gpa-long) counts in both, so these do
    not sum to the total; the jobs no table names are under "no paper table"."""
    out: dict[str, float] = {}
    for tables, hours in zip(frame["paper"], frame["gpu_hours"]):
        for key in (tables.split("; ") if tables else ["no paper table"]):
            out[key] = out.get(key, 0.0) + float(hours)
    return dict(sorted(out.items()))


# ----------------------------------------------------------------------------- times
def gpu_hours(flops: float, peak: float, mfu: float) -> float:
    return flops / (peak * mfu) / 3600.0


def critical_path(jobs: list[Job], wall: dict[str, float]) -> tuple[float, list[str]]:
    """The longest chain of dependent jobs by wall time: (hours, its job ids, upstream first)."""
    by_id = {j.id: j for j in jobs}
    best: dict[str, tuple[float, list[str]]] = {}

    def finish(jid: str) -> tuple[float, list[str]]:
        if jid not in best:
            ups = [finish(d) for d in by_id[jid].deps]
            length, path = max(ups, key=_longer) if ups else (0.0, [])
            best[jid] = (length + wall.get(jid, 0.0), [*path, jid])
        return best[jid]
    return max((finish(j.id) for j in jobs), key=_longer, default=(0.0, []))


def _longer(chain: tuple[float, list[str]]) -> tuple[float, int]:
    """Longer in hours, then in jobs (a chain ending in a job of no GPU time names that job)."""
    return chain[0], len(chain[1])


def schedule(jobs: list[Job], wall: dict[str, float], n_gpus: int) -> float:
    """The makespan, in hours, of a greedy list schedule on `n_gpus` GPUs: whenever GPUs are
    free, the ready jobs start in order of their remaining critical path (longest first), each
    holding its `gpus` for its wall time; jobs of no GPUs take no time."""
    by_id = {j.id: j for j in jobs}
    users = {j.id: [] for j in jobs}
    for j in jobs:
        for d in j.deps:
            users[d].append(j.id)
    tail: dict[str, float] = {}

    def rest(jid: str) -> float:  # wall time from this job's start to the end of its longest chain
        if jid not in tail:
            tail[jid] = wall.get(jid, 0.0) + max((rest(u) for u in users[jid]), default=0.0)
        return tail[jid]
    waiting = {j.id: len(j.deps) for j in jobs}
    ready = [j.id for j in jobs if not j.deps]
    running: list[tuple[float, str]] = []
    now, free = 0.0, n_gpus
    while ready or running:
        ready.sort(key=lambda jid: -rest(jid))
        for jid in list(ready):
            if by_id[jid].gpus <= free:
                ready.remove(jid)
                free -= by_id[jid].gpus
                heapq.heappush(running, (now + wall.get(jid, 0.0), jid))
        now, done = heapq.heappop(running)
        free += by_id[done].gpus
        for u in users[done]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    return now


# ----------------------------------------------------------------------------- the GPU, MFU and the profile
@dataclass(frozen=True)
class Device:
    kind: str
    peak: float          # FLOP/s per GPU (a CPU: per process)
    mfu: float
    mfu_source: str
    track_mfu: dict[str, float] = field(default_factory=dict)  # per track (or evaluation stage) defaults
    startup_s: float = 0.0   # a CPU job's fixed cost around its loop (a GPU job's is the SLURM margin)

    def mfu_for(self, track: str, stage: str | None = None) -> float:
        """An evaluation stage's own efficiency where one is stated (calibrate.efficiency_key), else
        the track's, else the device's."""
        from .calibrate import efficiency_key

        return self.track_mfu.get(efficiency_key(stage, track) if stage else track, self.track_mfu.get(track, self.mfu))


def measured_mfu(kind: str, root: str | Path = MEASURED) -> tuple[float, str] | None:
    """The median MFU of gpu-check's training runs on GPUs of `kind` (results/gpu/*/train.csv)."""
    values, files = [], []
    for path in sorted(Path(root).glob("*/train.csv")):
        with path.open() as fh:
            rows = [r for r in csv.DictReader(fh) if (k := peaks.kind_for_name(r.get("device", ""))) and k.name == kind]
        got = [float(r["mfu"]) for r in rows if r.get("mfu") not in (None, "", "nan") and float(r["mfu"]) > 0]
        if got:
            values += got
            files.append(str(path))
    return (statistics.median(values), f"measured by gpu-check ({', '.join(files)})") if values else None


def cpu_defaults() -> dict:
    return safe_load(peaks.TABLE.read_text())["cpu"]


def resolve_device(kind: str, mfu: float | None, threads: int = 1, measured_root: str | Path = MEASURED) -> Device:
    """The peak and MFU of a planned GPU kind (or `cpu`), the MFU's source named."""
    if kind == peaks.CPU:  # the calibrated model (dag/calibrate.py): start-up + FLOPs / (peak x efficiency)
        peak = peaks.measure_cpu_peak(threads)
        default = cpu_defaults()
        if mfu:
            return Device(kind, peak, mfu, "--mfu", startup_s=float(default.get("startup_s", 0.0)))
        return Device(kind, peak, default["mfu"], f"calibrated ({default['source']})",
                      {k: float(v) for k, v in (default.get("efficiency") or {}).items()},
                      float(default.get("startup_s", 0.0)))
    k = peaks.get_kind(kind)
    if mfu:
        return Device(kind, k.bf16, mfu, "--mfu")
    found = measured_mfu(kind, measured_root)
    if found:
        return Device(kind, k.bf16, *found)
    tracks = safe_load(peaks.TABLE.read_text()).get("track_mfu") or {}
    return Device(kind, k.bf16, k.mfu, "stated defaults (src/kernattn/bench/gpus.yaml)"
                  + "".join(f"; {t} {v['mfu']}" for t, v in tracks.items()),
                  {t: float(v["mfu"]) for t, v in tracks.items()})


def profile_gpus(profile: str | Path | None):
    """stage -> GPUs per run from a profile file's set-resources (profile_doc_gpus); a missing
    file gives 1 everywhere."""
    doc = safe_load(Path(profile).read_text()) if profile and Path(profile).is_file() else {}
    return profile_doc_gpus(doc)


def profile_doc_gpus(doc: dict | None):
    """stage -> GPUs per run from a parsed profile's set-resources: the run's world, `ranks` (per
    node) x `nodes` as the training rules launch it, else its `gpu`, else 1."""
    resources = (doc or {}).get("set-resources") or {}

    def gpus_of(stage: str) -> int:
        res = resources.get(stage) or {}
        if "ranks" in res:
            return int(res["ranks"] or 1) * int(res.get("nodes", 1) or 1)
        return int(res.get("gpu", 1) or 1)
    return gpus_of


# ----------------------------------------------------------------------------- the input pipeline
@dataclass(frozen=True)
class Loader:
    """What one DataLoader worker decodes and augments, in images/s, and where that was measured."""
    per_worker: float
    source: str


def measured_loader(root: str | Path = LOADER_ROOT) -> Loader | None:
    """The median images/s of one worker of the ImageNet pipeline on JPEGs over every
    bench-loader CSV under `root` (results/*/loader-*.csv), or None when none was measured."""
    values, files = [], []
    for path in sorted(Path(root).glob("*/loader-*.csv")):
        with path.open() as fh:
            got = [float(r["images_per_s"]) for r in csv.DictReader(fh)
                   if r.get("pipeline") == LOADER_PIPELINE and r.get("source", "").startswith("jpeg")]
        if got:
            values += got
            files.append(str(path))
    return Loader(statistics.median(values), f"bench-loader ({', '.join(files)})") if values else None


def input_hours(job: Job, loader: Loader | None) -> float:
    """Wall hours the job's data loading needs at the least (0: not bounded or not known): a run
    whose unit names loader workers (a ViT on ImageNet JPEGs), each of its GPUs fed by that many."""
    workers = job.info.get("loader_workers", 0)
    if loader is None or workers < 1:
        return 0.0
    return job.info["samples"] / (job.gpus * workers * loader.per_worker) / 3600.0


# ----------------------------------------------------------------------------- the plan
@dataclass
class Plan:
    scale: str
    device: Device
    n_gpus: int
    jobs: list[Job]
    wall: dict[str, float]          # planned jobs' wall hours
    hours: dict[str, float]         # planned jobs' GPU-hours
    critical_h: float
    critical: list[str]
    makespan_h: float
    bound: dict[str, str] = field(default_factory=dict)  # planned jobs: COMPUTE or INPUT
    loader: Loader | None = None

    @property
    def gpu_hours(self) -> float:
        return sum(self.hours.values())


def make_plan(p: Params, table: dict[str, Stage], device: Device, n_gpus: int, gpus_of,
              loader: Loader | None = None) -> Plan:
    """The plan (module docstring); `loader`: the input pipeline's rate (measured_loader), None
    when the ViT is taken to be compute-bound."""
    jobs = plan_jobs(p, table, gpus_of)
    too_big = [j for j in jobs if j.gpus > n_gpus]
    if too_big:
        from ..errors import UsageError
        raise UsageError(f"{too_big[0].id} asks for {too_big[0].gpus} GPUs per run; the cluster has {n_gpus} "
                         f"(raise --gpus-per-node / --nodes or lower the profile's ranks/nodes)")
    wall, hours, bound = {}, {}, {}
    for j in (j for j in jobs if j.gpus):
        compute = gpu_hours(j.flops, device.peak, device.mfu_for(j.info["track"], j.stage)) / j.gpus + device.startup_s / 3600
        feed = input_hours(j, loader)
        wall[j.id], bound[j.id] = (feed, INPUT) if feed > compute else (compute, COMPUTE)
        hours[j.id] = wall[j.id] * j.gpus
    length, path = critical_path(jobs, wall)
    return Plan(p.scale, device, n_gpus, jobs, wall, hours, length, path, schedule(jobs, wall, n_gpus), bound, loader)


def slurm_minutes(wall_h: float, safety: float = SAFETY, margin: int = MARGIN_MIN) -> int:
    """A job's time limit: its planned wall time x safety + the start-up margin, whole minutes."""
    return math.ceil(wall_h * 60 * safety) + margin


def stage_minutes(plan: Plan, safety: float = SAFETY) -> dict[str, int]:
    """Each planned stage's time limit: its longest run's (the profile keys resources by stage)."""
    out: dict[str, int] = {}
    for j in plan.jobs:
        if j.id in plan.wall:
            out[j.stage] = max(out.get(j.stage, 0), slurm_minutes(plan.wall[j.id], safety))
    return out


def table(plan: Plan, safety: float = SAFETY):
    """One row per planned job (pandas)."""
    import pandas as pd

    rows = [{"stage": j.stage, "run": j.info["run"], "track": j.info["track"], "source": j.info["source"],
             "study": j.info.get("study", ""), "paper": j.info.get("paper", ""),
             "steps": j.info["steps"], "flops_per_step": j.info["flops_per_step"], "flops": j.flops,
             "gpus": j.gpus, "mfu": plan.device.mfu_for(j.info["track"], j.stage), "gpu_hours": plan.hours[j.id], "wall_h": plan.wall[j.id],
             "bound": plan.bound.get(j.id, COMPUTE),
             "slurm_minutes": slurm_minutes(plan.wall[j.id], safety)} for j in plan.jobs if j.id in plan.wall]
    return pd.DataFrame(rows)


def summary(plan: Plan) -> dict:
    frame = table(plan)
    by_track = frame.groupby("track")["gpu_hours"].sum().to_dict() if len(frame) else {}
    by_source = frame.groupby("source")["gpu_hours"].sum().to_dict() if len(frame) else {}
    by_table = hours_by_paper_table(frame) if len(frame) else {}
    studies = frame[frame["study"] != ""] if len(frame) else frame
    by_study = studies.groupby("study")["gpu_hours"].sum().to_dict() if len(studies) else {}
    return {"scale": plan.scale, "gpu": plan.device.kind, "peak_flops": plan.device.peak, "mfu": plan.device.mfu,
            "mfu_source": plan.device.mfu_source, "gpus": plan.n_gpus, "jobs": len(plan.wall),
            "flops": float(frame["flops"].sum()) if len(frame) else 0.0, "gpu_hours": plan.gpu_hours,
            "gpu_hours_by_track": by_track, "gpu_hours_by_source": by_source,
            "gpu_hours_main": plan.gpu_hours - sum(by_study.values()), "gpu_hours_by_study": by_study,
            "gpu_hours_by_paper_table": by_table, "critical_path_h": plan.critical_h,
            "critical_path": [j for j in plan.critical if j in plan.wall], "wall_h": plan.makespan_h,
            "input_bound_jobs": sorted(j for j, b in plan.bound.items() if b == INPUT),
            "loader_images_per_s_per_worker": plan.loader.per_worker if plan.loader else None,
            "loader_source": plan.loader.source if plan.loader else None}
