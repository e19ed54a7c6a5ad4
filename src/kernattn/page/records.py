"""Published records: the files a scale's report reads, kept so that its claims rebuild at HEAD.

    kernattn records export --scale S --to results/records/<name>   # after the DAG, in its checkout
    kernattn records add --scale S --to results/records/<name>      # runs of the scale trained later
    kernattn records rebuild results/records/<name> --write results/claims/<name>.csv
    kernattn records rebuild results/records/<name> --check results/claims/<name>.csv

A published verdict is only as good as the ability to rebuild it: the claims CSV under
results/claims/ is `kernattn report` run at the current commit on these records, and the suite
checks that it still is (tests/test_records.py), so a change of a verdict rule shows up as a
changed published table, not as a table nobody can make again.

`export` copies, under <to>/ and at their repository paths, every file of results/<scale>/ but
the ones no part of the page reads and that make a folder large (PRUNED: checkpoints, exported
weights, the prepared data arrays and image tensors); the JUnit record of the fast tests beside
the params file (the unit-tested claims read it) and the benchmark folders the page reads
(report's default --bench-dir), so a later commit of new benchmark CSVs does not change them.
manifest.json names the scale, date, commit and machine, and each file's size and SHA-256.

`add` extends a records folder with the files of runs trained later, in another checkout of the
same scale (a recipe arm added to it): new files only, the same prepared data required, each
addition named in the manifest with its own commit.

`rebuild` runs the report in a scratch folder holding the records' files and a copy of the
given params file (the HEAD's by default), with the records' benchmark folders, and compares its
tables/claims.csv, claims-pairs.csv and budget-gaps.csv byte for byte with the published CSV and
the two beside it (<name>-pairs.csv, <name>-budget-gaps.csv) (--check: exit 1 and the first
differing line of each) or writes them there (--write, atomically)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from ..errors import UsageError
from ..io import atomic_write_bytes, atomic_write_json

# (folder part, file name suffix): a file whose path has the part and ends with the suffix is not
# published. Checkpoints and exported weights (the report reads metrics, final records, lr.npy and
# the bank traces, never a model); the prepared data (the corpus, the LM's token arrays, the ViT's
# image tensors): the manifest keeps their digests through the data folders' meta.json.
# A cooldown branch's parameter trace: the bank gates read the runs' own (report_bankgate), never a
# branch's (about half of a budget sweep's records).
PRUNED = (("", ".pt"), ("", ".safetensors"), ("/data/", ".npy"), ("/data/", ".bin"), ("/data/", ".tiktoken"),
          ("/runs/budgets/", "param_trace.npz"))
UNIT_TESTS = "results/unit-tests.xml"
BENCH_DIRS = ("results/cpu", "results/gpu")
MANIFEST = "manifest.json"


def published(path: str) -> bool:
    """Whether a file of results/<scale>/ (its repository path, '/'-separated) is kept."""
    return not any(part in f"/{path}" and path.endswith(suffix) for part, suffix in PRUNED)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _scale_files(root: Path, scale: str) -> dict[str, Path]:
    """repository path -> file, of every published file of results/<scale>/ in the checkout `root`."""
    found = (p for p in sorted((root / "results" / scale).rglob("*")) if p.is_file())
    return {rel: p for p in found if published(rel := p.relative_to(root).as_posix())}


def _copy_in(path: Path, into: Path, rel: str) -> dict:
    """Copy `path` to into/rel; its manifest entry (size and SHA-256)."""
    (into / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, into / rel)
    return {"bytes": path.stat().st_size, "sha256": _digest(path)}


def _made_by(root: Path) -> dict:
    """Date, commit and machine of what the checkout `root` trained (not this package's)."""
    from ..dag.timing_cli import machine
    from ..engine.runtime import git_info

    commit, dirty = git_info(root)
    return {"date": datetime.now(timezone.utc).date().isoformat(), "commit": commit, "dirty": dirty, **machine()}


def export(scale: str, to: Path, root: Path = Path(".")) -> dict:
    """Copy the scale's published files from the checkout `root` into `to` (which must not exist);
    returns the manifest it writes."""
    source = root / "results" / scale
    if not source.is_dir():
        raise UsageError(f"{source}: no results of scale {scale!r} here; run the DAG at that scale first")
    if to.exists():
        raise UsageError(f"{to}: exists; records are written once (remove it to export again)")
    files = _scale_files(root, scale)
    extra = [root / UNIT_TESTS] if (root / UNIT_TESTS).is_file() else []
    for folder in BENCH_DIRS:
        extra += sorted(p for p in (root / folder).rglob("*.csv") if p.is_file())
    files.update((p.relative_to(root).as_posix(), p) for p in extra)
    scratch = Path(tempfile.mkdtemp(prefix=f".{to.name}.tmp-", dir=to.parent if to.parent.exists() else None))
    try:
        listed = {rel: _copy_in(path, scratch, rel) for rel, path in files.items()}
        manifest = {"scale": scale, **_made_by(root), "files": listed}
        atomic_write_json(scratch / MANIFEST, manifest, indent=1)
        to.parent.mkdir(parents=True, exist_ok=True)
        os.replace(scratch, to)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return manifest


# when and how long a preparation took: a data folder's meta.json differs in them alone when the
# same data are prepared again
PREPARED_AT = ("created_utc", "seconds")


def _same_data(new: Path, recorded: Path) -> bool:
    """Whether two prepared data files hold the same data (a JSON record: but for PREPARED_AT)."""
    if new.suffix != ".json":
        return new.read_bytes() == recorded.read_bytes()
    def content(path):
        doc = json.loads(path.read_text())
        return {k: v for k, v in doc.items() if k not in PREPARED_AT} if isinstance(doc, dict) else doc
    return content(new) == content(recorded)


def add(scale: str, to: Path, root: Path = Path(".")) -> list[str]:
    """Add to the records `to` the files of results/<scale>/ in the checkout `root` that they lack:
    runs trained later in another checkout (a second recipe arm). A file both have is kept as
    recorded; the prepared data must be the same (its meta.json digests), or the new runs are
    not comparable. The manifest lists each addition with its own date, commit and machine.
    Returns the added paths."""
    manifest_path = to / MANIFEST
    if not manifest_path.is_file():
        raise UsageError(f"{manifest_path}: missing; `add` extends a records folder made by `kernattn records export`")
    manifest = json.loads(manifest_path.read_text())
    source = root / "results" / scale
    if manifest["scale"] != scale or not source.is_dir():
        raise UsageError(f"{to} records scale {manifest['scale']!r}; {source} must hold results of that scale")
    files = _scale_files(root, scale)
    differ = [rel for rel, p in files.items() if "/data/" in rel and rel in manifest["files"]
              and not _same_data(p, to / rel)]
    if differ:
        raise UsageError(f"{root}: its prepared data differ from the records' ({', '.join(differ)}); runs on other "
                         f"data are not comparable with them")
    new = [rel for rel in files if rel not in manifest["files"]]
    manifest["files"].update((rel, _copy_in(files[rel], to, rel)) for rel in new)
    manifest.setdefault("additions", []).append({**_made_by(root), "files": new})
    manifest["files"] = dict(sorted(manifest["files"].items()))
    atomic_write_json(manifest_path, manifest, indent=1)
    return new


# The tables a publication copies from the report (report/tables/<name>) and the name each takes
# beside the published claims CSV (<stem>.csv): the claims, the pairwise tests, the budget sweep.
TABLES = {"claims.csv": "", "claims-pairs.csv": "-pairs", "budget-gaps.csv": "-budget-gaps"}


def published_tables(csv: Path) -> dict[str, Path]:
    """report table name -> its published path, for the claims CSV `csv`."""
    return {name: csv.with_name(f"{csv.stem}{suffix}.csv") for name, suffix in TABLES.items()}


def rebuild(records: Path, params_file: Path = Path("params.yaml")) -> dict[str, bytes]:
    """The tables (TABLES) `kernattn report` writes at this commit from the records: name -> bytes
    (a table the report does not write at that scale is absent)."""
    manifest = records / MANIFEST
    if not manifest.is_file():
        raise UsageError(f"{manifest}: missing; not a records folder (make one with `kernattn records export`)")
    scale = json.loads(manifest.read_text())["scale"]
    with tempfile.TemporaryDirectory(prefix="kernattn-records-") as tmp:
        work = Path(tmp)
        shutil.copytree(records / "results", work / "results", symlinks=False)
        shutil.copy2(params_file, work / "params.yaml")
        benches = [a for d in BENCH_DIRS for a in ("--bench-dir", d)]
        cmd = [str(Path(sys.executable).with_name("kernattn")), "report", "--params", "params.yaml", "--scale", scale,
               "--out", "report", *benches]
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True,
                              env={**os.environ, "KERNATTN_DATA_MIRROR": "", "MPLBACKEND": "Agg"})
        if done.returncode != 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
            raise UsageError(f"kernattn report on {records} failed (exit {done.returncode}):\n{tail}")
        tables = work / "report" / "tables"
        return {name: (tables / name).read_bytes() for name in TABLES if (tables / name).is_file()}


def first_difference(a: bytes, b: bytes) -> str:
    """The first line where two CSVs differ, both sides, for an error message."""
    la, lb = a.decode().splitlines(), b.decode().splitlines()
    for i, (x, y) in enumerate(zip(la, lb), start=1):
        if x != y:
            return f"line {i}:\n  published: {x[:300]}\n  rebuilt:   {y[:300]}"
    return f"line {min(len(la), len(lb)) + 1}: one has {len(la)} lines, the other {len(lb)}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    ex = sub.add_parser("export", help="copy the files the report reads of a scale into a records folder")
    ex.add_argument("--scale", required=True)
    ex.add_argument("--to", required=True, type=Path, help="records folder to create (results/records/<name>)")
    ad = sub.add_parser("add", help="add the runs of another checkout of the same scale to a records folder")
    ad.add_argument("--scale", required=True)
    ad.add_argument("--to", required=True, type=Path, help="the records folder to extend")
    rb = sub.add_parser("rebuild", help="rebuild the claims CSV from a records folder at this commit")
    rb.add_argument("records", type=Path)
    rb.add_argument("--params", type=Path, default=Path("params.yaml"), help="params file (default: params.yaml)")
    what = rb.add_mutually_exclusive_group(required=True)
    what.add_argument("--check", type=Path, metavar="CSV",
                      help="fail unless the rebuilt claims CSV and its -pairs and -budget-gaps CSVs equal these")
    what.add_argument("--write", type=Path, metavar="CSV", help="write the rebuilt claims CSV (and the two beside it) here")


def run(args: argparse.Namespace) -> int:
    if args.action == "export":
        manifest = export(args.scale, args.to)
        size = sum(f["bytes"] for f in manifest["files"].values())
        print(f"{args.to}: {len(manifest['files'])} files, {size / 2**20:.1f} MiB")
        return 0
    if args.action == "add":
        added = add(args.scale, args.to)
        print(f"{args.to}: {len(added)} files added")
        return 0
    built = rebuild(args.records, args.params)
    targets = published_tables(args.write or args.check)
    if args.write:
        for name, data in built.items():
            atomic_write_bytes(targets[name], data)
            print(targets[name])
        return 0
    stale = []
    for name, path in targets.items():
        if name not in built and not path.is_file():
            continue
        have = path.read_bytes() if path.is_file() else b""
        if have != built.get(name, b""):
            stale.append(f"{path}: differs from the report rebuilt on {args.records} at this commit, "
                         f"{first_difference(have, built.get(name, b''))}")
    if stale:
        print("\n".join(stale) + "\n(republish with --write if the change is meant)", file=sys.stderr)
        return 1
    print(f"{', '.join(str(targets[n]) for n in built)}: rebuilt byte for byte from {args.records}")
    return 0
