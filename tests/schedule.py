"""The order in which the end-to-end job hands its tests to the xdist workers.

`make test-e2e` runs `--dist loadgroup --no-loadscope-reorder`: a worker that frees up takes
the next test (or the next xdist group, whole) in collection order, so that order is the
schedule. The job is CPU-bound on two cores with waits in between (the micro DAG's SLURM
polls, the MLflow server's queue), so what matters is that no core idles and no long test
starts last:

1. the xdist groups that need the micro DAG (tests/test_dvc.py's): the first of them builds it;
2. the long tests that do not need it, longest first: they fill the cores while the DAG trains;
3. the tests that read the DAG, longest first: they start as soon as it is there, each followed
   by a short test (xdist hands a worker the next test while it runs one: not another long one);
4. the rest, longest first, so that the job ends on short tests.

"Long" and "longest" come from `tests/e2e_durations.json` (node id -> seconds, a past run's
JUnit record: `python -m tests.schedule results/e2e-tests.xml` rewrites it). A test it does not
list counts as `UNKNOWN_S`. The order changes only when the suite ends, never what it checks."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("e2e_durations.json")
UNKNOWN_S = 10.0
LONG_S = 40.0
DAG_FIXTURE = "micro_dag"


def durations(path: Path = DURATIONS) -> dict[str, float]:
    return json.loads(path.read_text()) if path.is_file() else {}


def plain(nodeid: str) -> str:
    """The node id without the "@group" xdist appends to a grouped test's id."""
    return re.sub(r"@[\w-]+$", "", nodeid)


def _group(item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    if marker is None:
        return None
    return marker.args[0] if marker.args else marker.kwargs.get("name")


def order(items: list, seconds: dict[str, float]) -> list:
    """`items` in schedule order (a group's tests stay together, in their file order)."""
    units: dict[str, list] = {}
    for item in items:
        units.setdefault(_group(item) or item.nodeid, []).append(item)

    def rank(unit: list) -> tuple:
        total = sum(seconds.get(plain(item.nodeid), UNKNOWN_S) for item in unit)
        needs_dag = any(DAG_FIXTURE in getattr(item, "fixturenames", ()) for item in unit)
        if needs_dag and len(unit) > 1:
            tier = 0
        elif not needs_dag and total >= LONG_S:
            tier = 1
        elif needs_dag:
            tier = 2
        else:
            tier = 3
        return tier, -total

    ranked = sorted(((rank(unit), unit) for unit in units.values()), key=lambda pair: pair[0])  # stable
    return [item for unit in _interleave([(tier, unit) for (tier, _), unit in ranked]) for item in unit]


def _interleave(tiered: list[tuple[int, list]]) -> list:
    """A short test after each test that reads the DAG: a worker that starts a test is handed the
    next one at once (xdist queues one ahead), so two long ones in a row would run one after
    the other on one worker while another worker runs short ones."""
    short = [unit for tier, unit in tiered if tier == 3]
    out = []
    for tier, unit in tiered:
        if tier == 3:
            continue
        out.append(unit)
        if tier == 2 and short:
            out.append(short.pop(0))
    return out + short


class Ordering:
    """The plugin tests/conftest.py registers (a conftest holds one hook of a name, and its own
    collection hook runs first, to refuse e2e fixtures in the fast job)."""

    @pytest.hookimpl(trylast=True)  # after `-m` has deselected: the end-to-end job's own tests
    def pytest_collection_modifyitems(self, items):
        if items and all(item.get_closest_marker("e2e") is not None for item in items):
            items[:] = order(items, durations())


def from_junit(xml: Path) -> dict[str, float]:
    """node id -> seconds of each test case of a JUnit record (pytest's `--junitxml`)."""
    found = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        found[plain(f"{path}.py::{case.get('name')}")] = round(float(case.get("time", 0.0)), 1)
    return dict(sorted(found.items()))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.schedule results/e2e-tests.xml  (rewrites tests/e2e_durations.json)")
    DURATIONS.write_text(json.dumps(from_junit(Path(sys.argv[1])), indent=1) + "\n")
    print(f"{DURATIONS}: {len(durations())} tests")
