"""Claims that are properties of the library (kr-blog's asserts, gpa-short's RoPE and bank
properties), read from the test suite's own record: a JUnit XML file pytest writes with
`--junitxml` (UNIT_TESTS, next to the params file). A claim names its tests (`test`: names,
comma-separated) and their file (`test_file`, default tests/test_blog_claims.py).

Verdicts: every named test in the record and passed -> "holds (test ...)"; any failed or
errored -> "fails (test ...)"; any absent or skipped, or no record -> "not measured here",
with the command that writes the record.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from . import verdicts
from .claims import ClaimResult

UNIT_TESTS = "results/unit-tests.xml"
DEFAULT_FILE = "tests/test_blog_claims.py"
FAILS = "fails"


def read_junit(path: Path) -> dict[tuple[str, str], str] | None:
    """{(module stem, test name): passed | failed | skipped} of a pytest JUnit XML; None if absent
    or unreadable. A parametrised test counts as failed if any of its cases failed."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    out: dict[tuple[str, str], str] = {}
    for case in root.iter("testcase"):
        key = (case.get("classname", "").rsplit(".", 1)[-1], case.get("name", "").split("[", 1)[0])
        outcome = ("failed" if case.find("failure") is not None or case.find("error") is not None
                   else "skipped" if case.find("skipped") is not None else "passed")
        if out.get(key) != "failed":
            out[key] = outcome if out.get(key) in (None, "passed") else out[key]
    return out


def judge(claim: dict, scale: str, record: dict | None) -> ClaimResult:
    names = [t.strip() for t in str(claim["test"]).split(",") if t.strip()]
    file = claim.get("test_file", DEFAULT_FILE)
    stem = Path(file).stem
    run = f"pytest --junitxml={UNIT_TESTS} {file}"
    outcomes = {n: (record or {}).get((stem, n), "absent") for n in names}
    listed = f"{file}: {', '.join(names)}"
    # the record as the repository names it, beside the params file: the same words in every clone
    # (a published claims CSV must rebuild byte for byte wherever its records are read)
    where = UNIT_TESTS
    if record is not None and all(o == "passed" for o in outcomes.values()):
        verdict, detail = verdicts.holds_by_test(", ".join(names)), f"passed in {where}"
    elif failed := [n for n, o in outcomes.items() if o == "failed"]:
        verdict, detail = f"{FAILS} (test {', '.join(failed)})", f"failed in {where}"
    else:
        missing = [n for n, o in outcomes.items() if o != "passed"]
        verdict = verdicts.NOT_MEASURED
        detail = (f"no record of {', '.join(missing)} in {where}" if record is not None else f"no {where}") + \
            f"; write it with: {run}"
    return ClaimResult(claim, verdict, scale=verdicts.PAPER_SCALE, ours=f"unit-tested: {listed}", detail=detail)
