"""The report's first screen: verdict badges (report/summary.py), the forest plots of the claims'
effects (report/forest.py), and the built page read back: its first table after the h1 is the
verdict summary, every claim with its badge and interval, the reasoning folded under each row."""

from __future__ import annotations

import csv
import glob
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kernattn.config import load_params
from kernattn.report import forest, summary, verdicts
from kernattn.report.verdicts import comparisons
from kernattn.page import build
from kernattn.report.claims import ClaimResult

from .test_report import PNG, write_params, write_runs

REPO = Path(__file__).resolve().parents[1]
CLAIMS_CSVS = sorted(glob.glob(str(REPO / "results" / "claims" / "small-*.csv")))
KNOWN = {label for _, label, _ in summary.BADGES}


# ----------------------------------------------------------------------------- verdict_badge
@pytest.mark.parametrize("text, badge", [
    ("reproduced", ("reproduced", "ok")),
    ("contradicted", ("contradicted", "bad")),
    ("consistent at tiny", ("consistent", "ok")),
    ("inconsistent at small", ("inconsistent", "bad")),
    ("holds by construction", ("by construction", "ok")),
    ("at scale small: holds by construction", ("by construction", "ok")),
    ("holds (test test_a, test_b)", ("holds", "ok")),
    ("fails (test test_b)", ("fails", "bad")),
    ("inconclusive", ("inconclusive", "unk")),
    ("at scale tiny: not judged (2 seeds)", ("not judged", "unk")),
    ("variance not estimable", ("not estimable", "unk")),
    ("at scale tiny: variance not estimable", ("not estimable", "unk")),
    ("at scale small: supported", ("supported", "ok")),
    ("at scale small: not supported", ("not supported", "unk")),
    ("at scale small: premise not met (no bank below threshold 0.1; weakest 5.75)", ("premise unmet", "unk")),
    ("at scale tiny: not run", ("not run", "na")),
    ("not comparable (architecture differs: x)", ("not comparable", "na")),
    ("not measured here", ("not measured", "na")),
    # a gap read across a budget sweep (report.budget_trend): each word its own badge
    ("at scale small_long (early training, 0.9 epoch): holds, and persists with budget (a + b/L over 250–2,000 steps)",
     ("holds, persists", "ok")),
    ("at scale small_long: holds at this budget, shrinking toward zero (a + b/L over 250–2,000 steps)",
     ("holds, shrinking", "ok")),
    ("at scale small_long: holds at this budget, its limit unresolved (a + b/L over 250–2,000 steps)",
     ("holds, limit open", "ok")),
    ("at scale small_long: reverses with budget (crosses near 1,200 steps; a + b/L over 250–2,000 steps)",
     ("reverses", "bad")),
    ("at scale small_long (early training, 0.9 epoch): no difference ≥ δ (δ = 0.01; a + b/L over 250–2,000 steps)",
     ("no difference", "bad")),
    ("consistent at small (early training, 0.4 epoch)", ("consistent", "ok")),
    # a verdict the table does not know keeps its first two words, never vanishes
    ("at scale tiny: faster everywhere (GPU)", ("faster everywhere", "unk")),
    ("", ("no verdict", "unk")),
])
def test_verdict_badge_constructed(text, badge):
    assert summary.verdict_badge(text) == badge


def test_verdict_badge_reads_the_head_not_the_reason_or_the_arm():
    """The recipe's arm after "; " and words inside the reason never change the badge."""
    arm = ("at scale small: not judged (gap not stable at this budget: a − b -0.0210 at the end (upper 97.5% bound "
           "+128% over 5 seeds (paired); threshold 50% closing)); with the variant-owned parameters at the papers' "
           "one lr (×1, not ×10): inconsistent at small — the verdict depends on the recipe")
    assert summary.verdict_badge(arm) == ("not judged", "unk")
    assert summary.verdict_badge("consistent at small; with the ×1 arm: inconsistent at small") == ("consistent", "ok")
    assert summary.verdict_badge("at scale small: not comparable (data set differs: holds, reproduced)")[0] == \
        "not comparable"
    assert summary.verdict_badge("  consistent   at\nsmall") == ("consistent", "ok")  # whitespace as a cell holds it


def test_verdict_badge_on_real_claims_csv():
    """Every verdict of the shipped claims files (claims and pairs) gets a badge of the table (none falls through),
    and the strings the 2026-11-28 small run printed read as a reader would say them."""
    assert CLAIMS_CSVS, "results/claims/small-*.csv missing"
    for path in CLAIMS_CSVS:
        with open(path, newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                for text in (row.get("verdict"), row.get("claim_verdict")):  # claims, and the pairs' files
                    if text:
                        label, css = summary.verdict_badge(text)
                        assert label in KNOWN and css in ("ok", "bad", "unk", "na"), (path, row["claim"], text)
    with open(REPO / "results" / "claims" / "small-2026-11-28.csv", newline="", encoding="utf-8") as fh:
        real = {r["claim"]: summary.verdict_badge(r["verdict"])[0] for r in csv.DictReader(fh)}
    assert real["000-fig2-order"] == "not judged"           # "at scale small: not judged (gap not stable ...); with ..."
    assert real["001-extra-params"] == "by construction"    # "at scale small: holds by construction"
    assert real["001-model-size"] == "not comparable"
    assert real["001-corpus-newline-peak"] == "consistent"  # "consistent at small"
    assert real["001-last-layer-bank-zero"] == "not comparable"
    assert real["001-layer1-banks-identical"] == "inconsistent"
    assert real["002-nw"] == "not measured"
    assert real["003-lm-bpb"] == "not run"
    assert real["003-lm-size"] == "by construction"
    assert real["003-lm-stable"] == "not judged"             # "at scale small: not judged (too short: ...)"
    assert real["001-bump-paragraph-scale"] == "premise unmet"
    assert real["003-gka-init-sigma"] == "supported"


def test_build_verdict_class_is_the_badge_class():
    for text in ("consistent at tiny", "inconsistent at tiny", "at scale tiny: not run", "fails (test x)"):
        assert build._verdict_class(text) == summary.verdict_badge(text)[1]


@pytest.mark.parametrize("x, text", [(None, "—"), (float("nan"), "—"), (-0.017511, "-0.0175"), (0.0, "0.0000"),
                                     (2.5, "2.5000"), (256.0, "256"), (4096, "4,096"), (123.456, "123.5"),
                                     (0.00012, "1.20e-04")])
def test_fmt_number(x, text):
    assert summary.fmt_number(x) == text


# ----------------------------------------------------------------------------- forest plots
def _claim(cid: str, paper: str, kind: str, **extra) -> dict:
    return {"id": cid, "paper": paper, "where": "w", "statement": f"statement of {cid}", "kind": kind, **extra}


def _constructed() -> list[ClaimResult]:
    """A pairwise family of two claims (one with a margin), a claim with one number turned to
    the paper's direction, one without an interval, and one of another document."""
    order = comparisons.compare_ordering([("a", [1.0, 2.0, 3.0], "b", [1.2, 2.21, 3.19]),
                                    ("b", [1.2, 2.21, 3.19], "c", [1.21, 2.2, 3.2])], paired=True)
    same = comparisons.compare_noninferior("d", [1.0, 2.0, 3.01], "c", [1.0, 2.0, 3.0], margin=0.05, paired=True)
    top1 = comparisons.compare_less("base", [70.0, 71.0, 72.5], "gka", [71.0, 72.2, 73.4], paired=True)
    flip = ClaimResult(_claim("003-top1", "003", "vision_top1"), top1.verdict, [top1], scale="tiny",
                       estimate=-top1.ci.diff, lo=-top1.ci.hi, hi=-top1.ci.lo)
    return [
        ClaimResult(_claim("001-order", "001", "order", family="001-fig2"), verdicts.combine([c.verdict for c in order]),
                    order, scale="tiny"),
        flip,
        ClaimResult(_claim("001-same", "001", "noninferior", family="001-fig2"), same.verdict, [same], scale="tiny",
                    estimate=same.ci.diff, lo=same.ci.lo, hi=same.ci.hi),
        ClaimResult(_claim("001-count", "001", "count"), verdicts.BY_CONSTRUCTION, scale="tiny", estimate=4096.0),
        ClaimResult(_claim("000-not-run", "000", "order"), verdicts.NOT_RUN, scale="tiny"),
    ]


def test_forest_families_lines_mde_and_margin():
    papers = {"figures": [{"id": "001-fig2", "title": "gpa-long, Figure 2: the rows"}]}
    fams = forest.families(_constructed(), papers)
    assert [f.key for f in fams] == ["001-fig2", "003-vision_top1"]  # 001-count and 000-not-run: no interval
    fig2, top1 = fams
    assert fig2.title == "gpa-long, Figure 2: the rows" and fig2.pairwise and not top1.pairwise
    assert top1.title == "gka-paper, w: vision top1"  # no figure of its own: where its claims stand, and their kind
    assert [x.label for x in fig2.lines] == ["001-order: a − b", "001-order: b − c", "001-same: d − c"]
    order, same = _constructed()[0].comparisons, _constructed()[2].comparisons[0]
    for line, comp in zip(fig2.lines, [*order, same]):
        assert (line.est, line.mde, line.margin) == (comp.ci.diff, comp.mde, comp.margin)
        assert (line.lo, line.hi) == forest.shown_interval(comp)  # the Holm-level interval its verdict reads
        assert (line.badge, line.css) == summary.verdict_badge(verdicts.at_scale(comp.verdict, "tiny"))
    assert fig2.lines[2].margin == 0.05 and fig2.lines[0].margin is None
    (line,) = top1.lines  # GKA − base, the claim's own direction; the test's MDE, no margin
    flip = _constructed()[1]
    assert (line.label, line.est, line.lo, line.hi) == ("003-top1", flip.estimate, flip.lo, flip.hi)
    assert line.mde == flip.comparisons[0].mde and line.mde > 0 and line.margin is None


def test_forest_figures_are_written_with_alt_and_caption(tmp_path):
    assets = tmp_path / "assets"
    assets.mkdir()
    out = forest.write_figures(_constructed(), {}, assets)
    assert [f["id"] for f in out] == ["forest-001-fig2", "forest-003-vision_top1"]
    for f in out:
        png = tmp_path / f["src"]
        assert png.read_bytes()[:8] == PNG and png.stat().st_size > 5000
        assert "\n" not in f["caption"] and f["caption"].startswith("Look for ")  # one line: what to look for
    assert "001-same: d − c" in out[0]["alt"] and "[" in out[0]["alt"]  # the numbers, for a reader without the image
    assert forest.write_figures([_constructed()[3]], {}, assets) == []  # nothing to draw: no figure


# ----------------------------------------------------------------------------- the page
class Page(HTMLParser):
    """The page as a sequence of headings and tables, and the verdict tables' rows."""

    HEADS = ("h1", "h2", "h3", "h4", "h5", "h6")

    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, dict]] = []     # (tag, attrs) of headings, tables, captions, figures
        self.rows: dict[str, dict] = {}              # claim id -> {cell class: text} in the verdict tables
        self.th_scopes: list[str | None] = []        # scope of every th in the verdict tables
        self.captions: dict[str, str] = {}           # figure id -> its figcaption text
        self.uncaptioned: list[str] = []             # images of figures without a figcaption
        self._table = self._row = self._figure = None
        self._cells: list[tuple[str, list[str]]] = []   # open cells (a dd inside a td), innermost last

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in (*self.HEADS, "table", "caption", "thead", "figure", "figcaption", "img"):
            self.events.append((tag, a))
        if tag == "table":
            self._table = a if "verdicts" in a.get("class", "").split() else None
        elif tag == "figure":
            self._figure = {"id": a.get("id"), "img": None, "caption": None}
        elif tag == "img" and self._figure is not None:
            self._figure["img"] = a.get("src")
        elif tag == "figcaption":
            self._cells.append(("figcaption", []))
        if self._table is None:
            return
        if tag == "th":
            self.th_scopes.append(a.get("scope"))
        if tag == "tr" and "data-claim" in a:
            self._row = self.rows.setdefault(a["data-claim"], {"_table": self._table["id"], "_details": 0})
        elif self._row is not None and tag in ("td", "th"):
            self._cells.append(((a.get("class", "").split() or ["?"])[-1], []))
        elif self._row is not None and tag == "dd" and "data-verdict-text" in a:
            self._cells.append(("verdict-text", []))
        elif self._row is not None and tag == "details":
            self._row["_details"] += 1

    def handle_data(self, data):
        for _, text in self._cells:
            text.append(data)

    def handle_endtag(self, tag):
        ends = {"td": "td", "th": "th", "dd": "verdict-text", "figcaption": "figcaption"}
        if tag in ends and self._cells and (tag in ("td", "th") or self._cells[-1][0] == ends[tag]):
            key, text = self._cells.pop()
            text = " ".join("".join(text).split())
            if key == "figcaption" and self._figure is not None:
                self._figure["caption"] = text
            elif self._row is not None:
                self._row.setdefault(key, text)
        elif tag == "tr":
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "figure" and self._figure is not None:
            if self._figure["caption"]:
                self.captions[self._figure["id"] or self._figure["img"]] = self._figure["caption"]
            else:
                self.uncaptioned.append(self._figure["img"])
            self._figure = None


def _parse(index: Path) -> Page:
    p = Page()
    p.feed(index.read_text(encoding="utf-8"))
    return p


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("summary")
    params_path = write_params(tmp)
    write_runs(params_path)
    return build.build_report(load_params(params_path), params_file=str(params_path), bench_dirs=[])


def _csv_rows(index: Path) -> list[dict]:
    with open(index.parent / "tables" / "claims.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_first_table_after_h1_is_the_verdict_summary(built):
    page = _parse(built)
    tags = [t for t, _ in page.events]
    h1 = tags.index("h1")
    first = tags.index("table", h1)
    assert page.events[first][1]["id"] == "summary-000" and "verdicts" in page.events[first][1]["class"]
    assert tags[first + 1] == "caption" and tags[first + 2] == "thead"  # a caption, then the header row
    # the verdict tables come first, one per document in seed order, before any other table
    tables = [a for t, a in page.events if t == "table"]
    verdicts = [a["id"] for a in tables if "verdicts" in a.get("class", "")]
    assert verdicts == ["summary-000", "summary-001", "summary-002", "summary-003", "summary-ours", "summary-reviewers"]
    assert [a["id"] for a in tables[:len(verdicts)]] == verdicts
    assert set(page.th_scopes) == {"col", "row"}  # header cells say what they head
    # every claim, in its document's table, with its badge, effect, interval and scale
    rows = _csv_rows(built)
    assert sorted(page.rows) == sorted(r["claim"] for r in rows)
    for r in rows:
        got = page.rows[r["claim"]]
        assert got["_table"] == f"summary-{r['paper']}"
        assert got["badge-cell"] == summary.verdict_badge(r["verdict"])[0], r["claim"]
        assert got["scale"] == r["scale"] and got["claim-id"] == r["claim"]
        lo, hi = (float(r[k]) if r[k] else None for k in ("ci_lo", "ci_hi"))
        if lo is not None:
            assert got["interval"] == f"[{summary.fmt_number(lo)}, {summary.fmt_number(hi)}]", r["claim"]
            assert got["effect"] == summary.fmt_number(float(r["estimate"]))
        # the whole reasoning, folded under the row: the verdict as tables/claims.csv has it
        assert got["_details"] == 1 and got["verdict-text"] == " ".join(r["verdict"].split())
    # the synthetic runs: 000's Figure 2 ordering compared over three pairs (drawn, not one number);
    # its verdicts are test_report.py's to check
    assert page.rows["000-fig2-order"]["interval"] == "3 pairs: forest plot"


def test_headings_in_order_and_figures_captioned(built):
    page = _parse(built)
    levels = [int(t[1]) for t, _ in page.events if t in Page.HEADS]
    assert levels[0] == 1 and levels.count(1) == 1
    assert all(b <= a + 1 for a, b in zip(levels, levels[1:])), levels  # no level skipped going down
    figures = [a.get("id") for t, a in page.events if t == "figure"]
    assert {"forest-000-fig2", "forest-001-fig2"} <= set(figures)
    for fid in ("forest-000-fig2", "forest-001-fig2"):
        assert page.captions[fid].count(". ") <= 2 and "Look for lines" in page.captions[fid]
        assert (built.parent / "assets" / f"{fid}.png").read_bytes()[:8] == PNG
    # every figure of the page says what it shows, and nothing is fetched from elsewhere
    assert not page.uncaptioned, page.uncaptioned
    html = built.read_text(encoding="utf-8")
    assert "<script src" not in html and 'rel="stylesheet"' not in html
    assert all(not a["src"].startswith(("http:", "https:", "//")) for t, a in page.events if t == "img")


def test_tally_counts_badges_in_all_and_per_document_key():
    from kernattn.report.claims import ClaimResult

    claims = [ClaimResult({"id": "000-a", "paper": "000"}, verdicts.CONTRADICTED, scale="paper"),
              ClaimResult({"id": "000-b", "paper": "000"}, verdicts.NOT_RUN, scale="small"),
              ClaimResult({"id": "003-c", "paper": "003"}, verdicts.CONTRADICTED, scale="paper")]
    assert summary.tally(claims) == {"claims": 3, "by_verdict": {"contradicted": 2, "not run": 1},
                                     "by_document": {"gpa-short": {"contradicted": 1, "not run": 1},
                                                     "gka-paper": {"contradicted": 1}}}
