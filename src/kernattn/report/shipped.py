"""The shipped paper_numbers.yaml, read as it is (no claim checked): the pre-registered rules
(gates, budget_trend, gka_identity) that the verdicts and the studies fall back on, and the
text `kernattn.page.build.load_paper_numbers` checks claim by claim. A fresh document each call:
its readers fill in defaults."""

from __future__ import annotations

from importlib import resources

from ..yaml_text import safe_load

WHERE = "kernattn/report/paper_numbers.yaml"


def paper_numbers_text() -> str:
    return resources.files("kernattn.report").joinpath("paper_numbers.yaml").read_text(encoding="utf-8")


def paper_numbers() -> dict:
    return safe_load(paper_numbers_text())
