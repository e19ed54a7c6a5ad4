"""`kernattn data list|pull [--scale S]`: the data sets a scale reads, and fetching them.

    kernattn data list --scale paper     # each data set: the key asking, size, where it is now
    kernattn data pull --scale paper     # fetch whatever is missing into the cache (a login node)

`pull` is for clusters whose compute nodes have no internet: pull on a node that has one (into
a KERNATTN_DATA_HOME the compute nodes share, or then point KERNATTN_DATA_MIRROR at it), then
run the DAG. A folder the user provides (ImageNet) is only checked.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .errors import UsageError
from .fetch import DataError
from .datasets.catalogue import Need, needed
from .datasets.locate import Where, locate, status


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("list", "pull"), help="list: where each data set is; pull: fetch the missing")
    parser.add_argument("--files", action="store_true", help="list: one line per file, not per data set")


def _mb(n: int | None) -> str:
    return "size unknown" if n is None else f"{n / 1e6:,.1f} MB"


def size_text(files) -> str:
    """What `files` weigh, in MB: "12.3 MB", "12.3 MB + 2 of unknown size", or "size unknown"."""
    sizes = [f.size for f in files]
    total = sum(s for s in sizes if s)
    unknown = sum(1 for s in sizes if not s)
    return _mb(total) + (f" + {unknown} of unknown size" if unknown and total else "") if total else _mb(None)


def _where(need: Need, where: Where) -> str:
    if need.dataset.user_folder:
        ok = need.folder and Path(need.folder).is_dir()
        return f"your folder {need.folder}" if ok else f"missing: set {need.dataset.user_folder} to your copy"
    kinds = [status(f, where)[0] for f in need.files]
    return ", ".join(f"{k} {kinds.count(k)}/{len(kinds)}" for k in ("mirror", "cache", "missing") if k in kinds)


def list_needs(needs: list[Need], where: Where, files: bool) -> None:
    print(f"mirror: {where.mirror or '(none: set KERNATTN_DATA_MIRROR or datasets.mirror)'}")
    print(f"cache:  {where.home}")
    for need in needs:
        ds = need.dataset
        pinned = "" if ds.user_folder or all(f.pinned for f in need.files) else " [unpinned: no sha256 known]"
        host = need.files[0].sources[0].url.split("/")[2] if need.files else "-"
        print(f"{ds.name:<20} {need.key:<16} {len(need.files):>4} files {size_text(need.files):>16}  from {host:<32} "
              f"{_where(need, where)}{pinned}")
        for f in need.files if files else ():
            kind, path = status(f, where)
            print(f"    {f.path:<52} {_mb(f.size):>12}  {kind}{'' if path is None else ' ' + str(path)}")


def pull(needs: list[Need], where: Where) -> int:
    missing_folders = []
    for need in needs:
        if need.dataset.user_folder:
            if not (need.folder and Path(need.folder).is_dir()):
                missing_folders.append(f"{need.dataset.name}: set {need.dataset.user_folder} to your copy "
                                       f"(now {need.folder!r}); it is never downloaded")
            continue
        for f in need.files:
            locate(f, where)
        print(f"{need.dataset.name}: {_where(need, where)}")
    for line in missing_folders:
        print(line)
    return 1 if missing_folders else 0


def run(args: argparse.Namespace) -> int:
    from .config import ParamsError, params_from_args

    try:
        params = params_from_args(args)
        needs = needed(params)
        where = Where.from_params(params)
        if args.action == "list":
            list_needs(needs, where, args.files)
            return 0
        return pull(needs, where)
    except (ParamsError, DataError) as exc:
        raise UsageError(str(exc)) from None
