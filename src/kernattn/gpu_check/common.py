"""What the gpu-check parts share: the device and its folder name, shapes, outputs, results."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..bench.timing import device_name
from ..bench.typed_csv import write_csv_atomic
from ..errors import UsageError
from ..io import atomic_write_text

PARTS = ("tests", "kernels", "models", "train", "ddp", "vit_ddp")


@dataclass
class Context:
    """One gpu-check invocation: where it runs, at which size, where it writes."""
    device: torch.device
    tiny: bool                 # tiny shapes (always on CPU): the whole command in seconds
    out_dir: Path
    force: bool = False
    params: str = "params.yaml"
    corpus: str | None = None  # the train part's char corpus file (default: params.yaml's tiny mirror, Dickens)
    work_dir: str | None = None
    families: tuple[str, ...] = ("vit", "char_gpt", "lm")   # the models part's
    train_rows: tuple[str, ...] = ("rope", "gpa_m64_rope")   # the train part's matrix rows (the first is killed once)

    @property
    def is_gpu(self) -> bool:
        return self.device.type == "cuda"


@dataclass
class PartResult:
    """A part's outcome: `ok` False when a correctness check failed (the exit status is 1);
    targets missed are measurements, reported in `lines` and not failures."""
    part: str
    ok: bool
    lines: list[str] = field(default_factory=list)   # the summary's markdown lines
    files: list[str] = field(default_factory=list)   # the files written, relative to out_dir


def device_slug(device: torch.device) -> str:
    """Folder name of a device: 'nvidia-h100-80gb-hbm3', or 'cpu-<model>' for a CPU."""
    name = device_name(device)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug if device.type == "cuda" else f"cpu-{slug}"


def default_out_dir(device: torch.device) -> Path:
    return Path("results") / "gpu" / device_slug(device)


def guard(ctx: Context, names: list[str]) -> None:
    """Refuse to replace a result already there (results/gpu/ is committed) unless --force."""
    taken = [n for n in names if (ctx.out_dir / n).exists()]
    if taken and not ctx.force:
        raise UsageError(f"{ctx.out_dir / taken[0]} already exists (a kept result); pass --force to replace "
                         f"it or --out-dir to write elsewhere")


def write_csv(ctx: Context, name: str, schema: dict, rows: list[dict]) -> str:
    write_csv_atomic(ctx.out_dir / name, schema, rows)
    return name


def write_part_summary(ctx: Context, result: PartResult) -> str:
    """<part>.md, the part's section; summary.md is rebuilt from the sections present."""
    name = f"{result.part}.md"
    status = "passed" if result.ok else "FAILED"
    text = "\n".join([f"## {result.part} ({status})", "", *result.lines, ""])
    atomic_write_text(ctx.out_dir / name, text)
    sections = [(ctx.out_dir / f"{p}.md").read_text() for p in PARTS if (ctx.out_dir / f"{p}.md").exists()]
    head = [f"# gpu-check on {device_name(ctx.device)}", "",
            f"torch {torch.__version__}; {'tiny shapes' if ctx.tiny else 'full shapes'}; "
            f"files in this folder: one CSV per part, and this summary.", ""]
    atomic_write_text(ctx.out_dir / "summary.md", "\n".join(head) + "\n" + "\n".join(sections))
    return name


def scaled_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| in float64: one number per tensor, independent of its scale."""
    got, want = got.detach().double(), want.detach().double()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
