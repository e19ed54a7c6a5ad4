"""report/index.html of the micro pipeline (trained through the MLflow server) in headless
Chromium: the first screen answers "what held?" (the first document's verdict table starts
inside a laptop's viewport, every badge carries its verdict as text, a row's folded reasoning
opens), the summary table read back equals tables/claims.csv, every entry of the table of
contents leads to a section that is present and non-empty, every image loaded, every section
and table present and non-empty, no console errors, readable at laptop width, and every link
to an MLflow run opens that run in the MLflow UI while the server runs. A full-page
screenshot goes to the test's output folder. The first screen is also checked on a report
built from synthetic runs (tests/test_report.py's), which needs Chromium only, not the DAG."""

from __future__ import annotations

import csv
import json
import re
import shutil
import urllib.parse

import pytest

from kernattn.config import load_params
from kernattn.page import build

from ..test_report import write_params, write_runs
from .conftest import MICRO_RUNS, http_json

pytestmark = [pytest.mark.infra, pytest.mark.e2e]

# The report's fixed skeleton (src/kernattn/report/templates/index.html.j2 and the char track's
# part, src/kernattn/tracks/char/report.html.j2 and provenance.html.j2); any further <section>
# or <table> it grows is checked the same way (present and non-empty).
SECTIONS = ("header", "summary", "toc", "main", "figures", "claims", "provenance")
TABLES = ("summary-000", "summary-001", "summary-table", "main-table", "claims-table", "runs-table")
SUMMARY_COLUMNS = ("paper", "where", "statement", "paper_value", "ours", "verdict", "detail")
LAPTOP = {"width": 1366, "height": 768}


def _console_collector(page):
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    page.on("requestfailed", lambda req: errors.append(f"requestfailed: {req.url} {req.failure}"))
    return errors


def check_first_screen(page, viewport: dict) -> None:
    """The first document's verdict table starts, and its first row ends, inside the first
    screen; every badge carries its verdict as text; a row's folded reasoning and the folded
    whole summary open on a click (the page loaded, not scrolled)."""
    first = page.locator("table.verdicts").first
    assert first.get_attribute("id") == "summary-000"
    box = first.bounding_box()
    row = first.locator("tbody tr").first.bounding_box()
    assert box and box["y"] < viewport["height"], box
    assert row and row["y"] + row["height"] <= viewport["height"], row
    badges = page.eval_on_selector_all("table.verdicts tbody tr", "trs => trs.map(tr => [tr.dataset.badge, "
                                       "tr.querySelector('.badge').innerText.trim()])")
    assert badges and all(label and label == text for label, text in badges), badges
    why = first.locator("details.why").first
    verdict = why.locator("dd[data-verdict-text]")
    assert not why.evaluate("d => d.open") and not verdict.is_visible()
    why.locator("summary").click()
    assert why.evaluate("d => d.open") and verdict.is_visible() and verdict.inner_text().strip()
    whole = page.locator("details.all-claims")
    assert not page.locator("#summary-table").is_visible()
    whole.locator("summary").click()
    assert whole.evaluate("d => d.open") and page.locator("#summary-table").is_visible()


def test_first_screen_in_chromium(chromium, tmp_path, infra_out):
    """A report of synthetic runs: the first screen holds the verdicts; every image (the forest
    plots among them) loaded; nothing fetched from elsewhere; no sideways scroll at laptop width."""
    params_path = write_params(tmp_path)
    write_runs(params_path)
    index = build.build_report(load_params(params_path), params_file=str(params_path), bench_dirs=[])
    context = chromium.new_context(viewport=LAPTOP)
    try:
        page = context.new_page()
        errors = _console_collector(page)
        requests: list[str] = []
        page.on("request", lambda req: requests.append(req.url))
        page.goto(index.as_uri(), wait_until="load", timeout=60_000)
        page.screenshot(path=str(infra_out / "report-first-screen.png"))
        check_first_screen(page, LAPTOP)
        images = page.eval_on_selector_all("img", "els => els.map(e => [e.getAttribute('src'), e.complete && "
                                                  "e.naturalWidth > 0])")
        assert any(src.startswith("assets/forest-") for src, _ in images), images
        assert all(ok for _, ok in images), images
        assert all(url.startswith("file:") for url in requests), requests  # readable offline
        width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1] + 1, width
        assert not errors, errors
    finally:
        context.close()


def test_report_in_chromium(chromium, micro_dag, mlflow_server, tmp_path, infra_out):
    assert micro_dag.returncode == 0, micro_dag.output[-3000:]
    index = micro_dag.ws / "report" / "index.html"
    context = chromium.new_context(viewport=LAPTOP)
    try:
        page = context.new_page()
        errors = _console_collector(page)
        page.goto(index.as_uri(), wait_until="load", timeout=60_000)
        page.wait_for_selector("#main-table tbody tr", timeout=30_000)

        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        shutil.copy(tmp_path / "report.png", infra_out / "report.png")
        # opens the folded summary table too, so its cells below read as rendered
        check_first_screen(page, LAPTOP)
        images = page.eval_on_selector_all(
            "img", "els => els.map(e => ({src: e.getAttribute('src'), complete: e.complete, w: e.naturalWidth, "
                   "h: e.naturalHeight, alt: e.getAttribute('alt')}))")
        # textContent, not innerText: a table inside a closed <details> is present, not empty
        tables = page.eval_on_selector_all(
            "table", "els => els.map(t => ({id: t.id, rows: t.querySelectorAll('tbody tr').length || "
                     "Math.max(0, t.rows.length - 1), text: t.textContent.trim().length}))")
        sections = page.eval_on_selector_all("section", "els => els.map(s => [s.id, s.textContent.trim().length])")
        layout = page.evaluate("""() => ({
            scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
            font: parseFloat(getComputedStyle(document.body).fontSize)})""")
        (infra_out / "report-layout.json").write_text(json.dumps(
            {"layout": layout, "images": images, "tables": tables, "sections": sections}, indent=2))

        # every image loaded (decoded, non-zero natural size), with alt text; at least one
        assert images, "no <img> in the report"
        broken = [i for i in images if not (i["complete"] and i["w"] > 0 and i["h"] > 0)]
        assert not broken, broken
        assert all(i["alt"] for i in images), [i["src"] for i in images if not i["alt"]]

        # every expected section and table present and non-empty; so is every other one
        for sid in SECTIONS:
            assert page.locator(f"#{sid}").count() == 1, f"section #{sid} missing"
            assert page.locator(f"#{sid}").inner_text().strip(), f"section #{sid} is empty"
        for tid in TABLES:
            assert page.locator(f"#{tid}").count() == 1, f"table #{tid} missing"
        assert tables and all(t["rows"] > 0 and t["text"] > 0 for t in tables), tables
        assert all(n > 0 for _, n in sections), sections
        # the summary table, read back as the browser renders it, equals tables/claims.csv
        shown = page.eval_on_selector_all(
            "#summary-table tbody tr", "trs => trs.map(tr => ({claim: tr.dataset.claim, section: tr.dataset.section, "
                                       "cells: [...tr.cells].map(td => td.innerText.trim())}))")
        with open(micro_dag.ws / "report" / "tables" / "claims.csv", newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        assert [r["claim"] for r in shown] == [r["claim"] for r in rows]
        for got, want in zip(shown, rows):
            assert got["cells"] == [" ".join(want[c].split()) for c in SUMMARY_COLUMNS], (got, want)
            assert got["section"] == want["section"]
            # stats.at_scale: below the paper scale, the scale (and a char verdict's regime) leads
            below = re.match(r"(at scale micro( \([^)]*\))?: |(in)?consistent at micro)", want["verdict"])
            assert bool(below) == (want["scale"] == "micro"), want["verdict"]
        # every entry of the table of contents leads to a section that is there and not empty
        toc = page.eval_on_selector_all("#toc a", "as => as.map(a => a.getAttribute('href'))")
        assert toc and all(h.startswith("#") for h in toc), toc
        for href in toc:
            target = page.locator(href)
            assert target.count() == 1, f"table of contents entry {href}: no such element"
            assert len(target.inner_text().strip()) > 40, f"table of contents entry {href}: empty"
        # each summary row's link lands on a section the table of contents lists
        links = page.eval_on_selector_all("#summary-table a", "as => as.map(a => a.getAttribute('href'))")
        assert len(links) == len(rows) and all(page.locator(h).count() == 1 for h in set(links)), links

        main_text = page.locator("#main-table").inner_text()
        assert "static RoPE" in main_text and "decaying periodic kernel" in main_text
        runs_text = page.locator("#runs-table").inner_text()
        assert all(run_id in runs_text for run_id in MICRO_RUNS)
        assert not errors, errors

        # readable at laptop width: text not tiny, the page itself does not scroll sideways
        assert layout["font"] >= 12, layout
        assert layout["scroll"] <= layout["inner"] + 1, (
            f"the report is {layout['scroll']} px wide at a {layout['inner']} px laptop viewport "
            f"(screenshot: {infra_out / 'report.png'})")

        # links to MLflow runs: one per run, each opens that run while the server runs
        links = page.eval_on_selector_all(f'a[href^="{mlflow_server.url}"]', "els => els.map(e => e.href)")
        finals = {r: json.loads((micro_dag.ws / "results/micro/runs" / r / "final.json").read_text())
                  for r in MICRO_RUNS}
        for run_id, final in finals.items():
            assert any(final["mlflow_run_id"] in link for link in links), (run_id, links)
        # and each experiment's runs page (provenance; every track's), in the UI's Model training view
        experiments = {f["mlflow_experiment_id"] for f in finals.values()}
        exp_links = [link for link in links if "#/experiments/" in link]
        assert experiments <= {urllib.parse.urlparse(x).fragment.split("/")[2] for x in exp_links}, exp_links
        for link in exp_links:
            assert link.endswith("/runs?workflowType=machine_learning"), link
            exp_id = urllib.parse.urlparse(link).fragment.split("/")[2]
            assert http_json(f"{mlflow_server.url}/api/2.0/mlflow/experiments/get?experiment_id={exp_id}")
        for link in sorted(set(links) - set(exp_links)):
            fragment = urllib.parse.urlparse(link).fragment
            mlflow_run_id = fragment.rstrip("/").split("/")[-1]
            got = http_json(f"{mlflow_server.url}/api/2.0/mlflow/runs/get?run_id={mlflow_run_id}")
            name = got["run"]["info"]["run_name"]
            ui = context.new_page()
            ui.goto(link, wait_until="load", timeout=60_000)
            ui.wait_for_selector(f"text={name}", timeout=60_000)
            assert mlflow_run_id in ui.url
            ui.close()
    finally:
        context.close()
