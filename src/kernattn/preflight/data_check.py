"""Preflight item: every data set the scale reads is present (mirror or cache) or pullable (each
missing file has a public URL in the catalogue: `kernattn data pull` fetches it). Nothing is
downloaded and no network is needed: a login node without one still gets its answer. A folder
the user provides (ImageNet) that is not visible here is a warning, not a failure: clusters
often mount data sets on the compute nodes only."""

from __future__ import annotations

from pathlib import Path

from ..datasets import Where, needed, status
from ..data_cli import size_text
from .items import FAIL, OK, WARN, Item


def data_items(params) -> list[Item]:
    where = Where.from_params(params)
    items = []
    for need in needed(params):
        ds = need.dataset
        if ds.user_folder:
            there = bool(need.folder) and Path(need.folder).is_dir()
            items.append(Item("data", ds.name, OK if there else WARN,
                              f"your folder {need.folder}" if there else
                              f"not found here at {need.folder!r}: training reads it on the nodes; if it is "
                              f"elsewhere, set {ds.user_folder} to your copy", {"folder": need.folder, "found": there}))
            continue
        kinds = [status(f, where)[0] for f in need.files]
        missing = [f for f, k in zip(need.files, kinds) if k == "missing"]
        no_url = [f.path for f in missing if not f.sources]
        held = len(need.files) - len(missing)
        text = f"{held}/{len(need.files)} files here"
        if missing:
            text += f"; {len(missing)} to pull ({size_text(missing)}: `kernattn data pull`)"
        if no_url:
            text += f"; no public URL for {', '.join(no_url[:3])}: put them in the data mirror"
        items.append(Item("data", ds.name, FAIL if no_url else OK, text,
                          {"files": len(need.files), "here": held, "to_pull": len(missing),
                           "pull_bytes": sum(f.size or 0 for f in missing)}))
    return items
