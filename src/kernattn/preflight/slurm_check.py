"""Preflight item: the SLURM profile's partitions, GPUs, nodes and time limits against what the
cluster says (`sinfo`), when SLURM is installed here; one item per stage the profile sets.

A profile still holding install-profile's SITE_ placeholders fails: it was copied, not installed."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..yaml_text import safe_load
from .items import FAIL, OK, SKIP, WARN, Item

SINFO_FORMAT = "%P|%l|%G|%D"
PLACEHOLDER = "SITE_"


@dataclass
class Partition:
    name: str
    limit_min: float = 0.0            # the time limit, minutes (inf: none)
    gpus_per_node: int = 0            # the most GPUs any of its nodes has
    gpu_types: set[str] = field(default_factory=set)
    nodes: int = 0


def minutes(text: str) -> float:
    """A SLURM time ("infinite", "30", "30:00", "2:00:00", "1-12", "1-12:00:00") in minutes."""
    text = text.strip()
    if text in ("infinite", "UNLIMITED"):
        return math.inf
    days, _, rest = text.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    if days:  # days-hours[:minutes[:seconds]]
        h, m, s = (parts + [0, 0])[:3]
        return int(days) * 1440 + h * 60 + m + s / 60
    if len(parts) == 1:
        return float(parts[0])             # minutes
    if len(parts) == 2:
        return parts[0] + parts[1] / 60    # minutes:seconds
    return parts[0] * 60 + parts[1] + parts[2] / 60


def gres_gpus(gres: str) -> tuple[int, set[str]]:
    """GPUs per node and their types in a gres string ("gpu:h100:8(S:0-1),shard:4", "(null)")."""
    count, types = 0, set()
    for kind, n in re.findall(r"gpu(?::([A-Za-z][\w.-]*))?:(\d+)", gres):
        count += int(n)
        if kind:
            types.add(kind)
    return count, types


def parse_sinfo(text: str) -> dict[str, Partition]:
    out: dict[str, Partition] = {}
    for line in text.splitlines():
        if line.count("|") != 3:
            continue
        name, limit, gres, nodes = line.split("|")
        part = out.setdefault(name.rstrip("*"), Partition(name.rstrip("*")))
        part.limit_min = minutes(limit)
        gpus, types = gres_gpus(gres)
        part.gpus_per_node = max(part.gpus_per_node, gpus)
        part.gpu_types |= types
        part.nodes += int(nodes)
    return out


def runtime_minutes(value) -> float | None:
    """A profile's runtime: minutes, or a string with a unit (90, "90m", "2h", "1d")."""
    if isinstance(value, (int, float)):
        return float(value)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value))
    if not m:
        return None
    return float(m.group(1)) * {"s": 1 / 60, "": 1, "m": 1, "h": 60, "d": 1440}[m.group(2)]


def stage_gpus(res: dict) -> int:
    if "gpu" in res:
        return int(res["gpu"] or 0)
    return gres_gpus(str(res.get("gres", "")))[0]


def check_stage(stage: str, res: dict, parts: dict[str, Partition]) -> Item:
    """One stage's resources (defaults merged) against the cluster's partitions."""
    name = str(res.get("slurm_partition", ""))
    if not name or PLACEHOLDER in name:
        return Item("slurm", stage, FAIL, f"partition {name!r} is a placeholder: install the profile with your "
                                          f"site's values (kernattn install-profile --partition P ...)")
    if name not in parts:
        return Item("slurm", stage, FAIL, f"no partition {name!r} here (sinfo: {', '.join(sorted(parts))})")
    part, problems, warnings = parts[name], [], []
    runtime, gpus, nodes = runtime_minutes(res.get("runtime", 0)), stage_gpus(res), int(res.get("nodes", 1) or 1)
    if runtime is None:
        warnings.append(f"runtime {res.get('runtime')!r} not understood")
    elif runtime > part.limit_min:
        problems.append(f"runtime {runtime:g} min exceeds the partition's limit of {part.limit_min:g} min "
                        f"(lower it or pick a longer partition)")
    if gpus > part.gpus_per_node:
        problems.append(f"{gpus} GPUs per node asked, its nodes have at most {part.gpus_per_node}")
    if nodes > part.nodes:
        problems.append(f"{nodes} nodes asked, it has {part.nodes}")
    model = str(res.get("gpu_model", "") or "")
    if gpus and model and PLACEHOLDER not in model and part.gpu_types and model not in part.gpu_types:
        warnings.append(f"gpu_model {model!r} not among its GPU types ({', '.join(sorted(part.gpu_types))})")
    limit = "no limit" if math.isinf(part.limit_min) else f"limit {part.limit_min:g} min"
    text = f"partition {name} ({limit}, {part.gpus_per_node} GPUs/node, {part.nodes} nodes): " + (
        "; ".join(problems + warnings) if problems or warnings
        else f"runtime {runtime:g} min, {gpus} GPUs x {nodes} node{'s' if nodes > 1 else ''} fit")
    values = {"partition": name, "runtime_min": runtime, "gpus": gpus, "nodes": nodes,
              "limit_min": None if math.isinf(part.limit_min) else part.limit_min}
    return Item("slurm", stage, FAIL if problems else WARN if warnings else OK, text, values)


def slurm_items(profile: str | Path | None) -> list[Item]:
    """One item per stage the profile sets (and its defaults); one SKIP item without SLURM here."""
    if not shutil.which("sinfo"):
        return [Item("slurm", "profile", SKIP, "no sinfo on this machine: run the preflight on the cluster's "
                                               "login node to check the profile against its partitions")]
    path = Path(profile) if profile else None
    if path is None or not path.is_file():
        return [Item("slurm", "profile", FAIL, f"no profile at {profile}; pass --profile FILE (a snakemake "
                                               f"profile's config.yaml)")]
    doc = safe_load(path.read_text()) or {}
    try:
        out = subprocess.run(["sinfo", "-h", "-o", SINFO_FORMAT], capture_output=True, text=True, check=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        why = (getattr(exc, "stderr", "") or str(exc)).strip().splitlines()[-1:] or [""]
        return [Item("slurm", "profile", WARN, f"sinfo failed ({why[0]}): the profile was not checked against the "
                                               f"cluster; is slurmctld reachable from here?")]
    parts = parse_sinfo(out)
    defaults = _mapping(doc.get("default-resources"))
    stages = {"default-resources": {}, **(doc.get("set-resources") or {})}
    return [check_stage(stage, {**defaults, **_mapping(res)}, parts) for stage, res in stages.items()]


def _mapping(resources) -> dict:
    """A profile's resources as a mapping (it may also write them as a list of "key=value")."""
    if isinstance(resources, list):
        return {k.strip(): safe_load(v) for k, _, v in (str(r).partition("=") for r in resources)}
    return dict(resources or {})
