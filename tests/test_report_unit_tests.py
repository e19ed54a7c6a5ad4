"""Claims that are properties of the library, read from the test suite's JUnit record
(report/unit_tests.py): holds where every named test passed, fails where one failed, not
measured here without a record."""

from __future__ import annotations

from pathlib import Path

from kernattn.report import unit_tests, verdicts
from kernattn.page import build

CLAIM = {"id": "x", "paper": "000", "where": "w", "statement": "s", "kind": "unit_test",
         "test": "test_a, test_b", "test_file": "tests/test_claims_seed000.py"}


def _junit(path: Path, cases: dict[str, str]) -> Path:
    body = []
    for name, outcome in cases.items():
        inner = {"passed": "", "failed": '<failure message="x"/>', "skipped": '<skipped message="x"/>'}[outcome]
        body.append(f'<testcase classname="tests.test_claims_seed000" name="{name}" time="0.1">{inner}</testcase>')
    path.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest">' + "".join(body)
                    + "</testsuite></testsuites>")
    return path


def test_verdicts_from_the_record(tmp_path):
    ok = unit_tests.read_junit(_junit(tmp_path / "a.xml", {"test_a": "passed", "test_b[1]": "passed",
                                                           "test_b[2]": "passed"}))
    res = unit_tests.judge(CLAIM, "tiny", ok)
    assert res.verdict == "holds (test test_a, test_b)" and res.shown == res.verdict  # scale-free
    assert build._verdict_class(res.shown) == "ok"
    bad = unit_tests.read_junit(_junit(tmp_path / "b.xml", {"test_a": "passed", "test_b[1]": "passed",
                                                            "test_b[2]": "failed"}))
    res = unit_tests.judge(CLAIM, "tiny", bad)
    assert res.verdict == "fails (test test_b)" and build._verdict_class(res.verdict) == "bad"
    skipped = unit_tests.read_junit(_junit(tmp_path / "c.xml", {"test_a": "passed", "test_b": "skipped"}))
    res = unit_tests.judge(CLAIM, "tiny", skipped)
    assert res.verdict == verdicts.NOT_MEASURED and "no record of test_b" in res.detail
    assert unit_tests.read_junit(tmp_path / "missing.xml") is None
    res = unit_tests.judge(CLAIM, "tiny", None)
    assert res.verdict == verdicts.NOT_MEASURED and "pytest --junitxml=results/unit-tests.xml" in res.detail


def test_shipped_unit_test_claims_name_real_tests():
    """Every test a unit_test claim names exists in its file (a renamed test would leave the
    claim without a record)."""
    repo = Path(__file__).resolve().parents[1]
    claims = [c for c in build.load_paper_numbers()["claims"] if c["kind"] == "unit_test"]
    assert {c["paper"] for c in claims} == {"000", "002"}
    for c in claims:
        text = (repo / c.get("test_file", unit_tests.DEFAULT_FILE)).read_text()
        for name in c["test"].split(","):
            assert f"def {name.strip()}(" in text, (c["id"], name)
