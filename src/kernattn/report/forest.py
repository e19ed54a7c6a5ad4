"""Forest plots of the claims' effects: one figure per claim family, under the summary.

A family is a set of claims whose numbers share one axis. Claims that name a `family` in
paper_numbers.yaml (the comparisons of one figure of a paper, tested together with Holm's
correction: gpa-short's and 001's Figure 2) are one family, and each comparison of a pairwise
claim (order, noninferior: a − b in the judged validation loss) is a line, at the interval its
verdict is read at (claims.shown_interval). Every other claim with a single number and an interval is a
line of the family of its document and kind ("003-vision_top1": top-1 differences of three
model sizes): the kind fixes what the number is and so its unit, which a family per document
would mix (bits per byte, CORE scores, top-1 points, speed ratios). A claim with no interval
(a count, a claim not run) has no line; a family without a line has no figure.

Each line: the interval as a horizontal bar, the estimate as a point, the verdict's badge as
text at its right (so colour is never the only carrier), a grey band of ± its minimum
detectable effect where the comparison has one, a dashed tick at its non-inferiority margin
where it has one, and the zero line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import figures
from . import verdicts
from .claims import ClaimResult, shown_interval
from .part import num
from .summary import DOCUMENT_KEYS, OTHER_HEADINGS, SEEDS, fmt_number, verdict_badge

PAIRWISE_KINDS = ("order", "noninferior")   # char track: claims whose lines are their comparisons
STYLE = {"ok": ("tab:green", "o"), "bad": ("tab:red", "X"), "unk": ("tab:orange", "s"), "na": ("0.45", "D")}
CAPTIONS = {
    True: "Look for lines wholly left of 0 (a beats b, as claimed) or right of it (the reverse); a dashed tick is "
          "a no-worse-than margin the line must end left of; grey: ± the MDE.",
    False: "Look for lines clear of 0, on the side the claim's statement (table above) predicts; a line across 0 "
           "is a difference our runs do not resolve; grey: ± the MDE.",
}


@dataclass(frozen=True)
class Line:
    label: str
    est: float
    lo: float
    hi: float
    badge: str
    css: str
    mde: float | None = None
    margin: float | None = None

    @property
    def text(self) -> str:
        return f"{self.label}: {fmt_number(self.est)} [{fmt_number(self.lo)}, {fmt_number(self.hi)}] {self.badge}"


@dataclass
class Family:
    key: str
    paper: str
    kind: str
    pairwise: bool
    lines: list[Line]
    figure_title: str | None = None                         # the paper figure's, from paper_numbers.yaml
    wheres: dict[str, None] = field(default_factory=dict)   # where in the paper its lines' claims stand

    @property
    def id(self) -> str:
        return "forest-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", self.key)

    @property
    def title(self) -> str:
        """The figure's title, else "gka-paper, Table 2, Section 4: vision top1"."""
        if self.figure_title:
            return self.figure_title
        who = self.paper if self.paper in OTHER_HEADINGS else DOCUMENT_KEYS.get(self.paper, self.paper)
        return f"{who}, {'; '.join(self.wheres)}: {self.kind.replace('_', ' ')}"


def family_key(claim: dict) -> str:
    return str(claim.get("family") or f"{claim['paper']}-{claim['kind']}")


def is_pairwise(claim: dict) -> bool:
    return bool(claim.get("family")) or claim.get("kind") in PAIRWISE_KINDS


def _comparison_lines(c: ClaimResult) -> list[Line]:
    out = []
    for comp in c.comparisons:
        shown = shown_interval(comp)
        if shown is None:
            continue
        badge, css = verdict_badge(verdicts.at_scale(comp.verdict, c.scale, c.regime))
        out.append(Line(f"{c.claim['id']}: {comp.a} − {comp.b}", comp.ci.diff, shown[0], shown[1], badge, css,
                        num(comp.mde), num(comp.margin)))
    return out


def _claim_line(c: ClaimResult) -> list[Line]:
    est, lo, hi = num(c.estimate), num(c.lo), num(c.hi)
    if est is None or lo is None or hi is None:
        return []
    # the claim's number is one of its comparisons', maybe turned to the paper's direction
    # (GKA − base where the test read base − GKA): its MDE holds either way, its margin turns too
    mde = margin = None
    for comp in c.comparisons:
        if comp.ci is not None and abs(abs(comp.ci.diff) - abs(est)) <= 1e-12 * max(1.0, abs(est)):
            sign = 1.0 if comp.ci.diff * est >= 0 else -1.0
            mde, margin = num(comp.mde), (None if num(comp.margin) is None else sign * comp.margin)
            break
    badge, css = verdict_badge(c.shown)
    return [Line(str(c.claim["id"]), est, lo, hi, badge, css, mde, margin)]


def families(claims: list[ClaimResult], papers: dict) -> list[Family]:
    """The families with at least one line, by document (seed order), then first appearance."""
    titles = {f["id"]: f["title"] for f in papers.get("figures") or []}
    found: dict[str, Family] = {}
    for c in claims:
        pairwise = is_pairwise(c.claim)
        lines = _comparison_lines(c) if pairwise else _claim_line(c)
        key = family_key(c.claim)
        if key not in found:
            found[key] = Family(key, str(c.claim["paper"]), str(c.claim["kind"]), pairwise, [], titles.get(key))
        found[key].lines.extend(lines)
        if lines:
            found[key].wheres.setdefault(str(c.claim["where"]))
    rank = {p: i for i, p in enumerate(SEEDS)}
    kept = [f for f in found.values() if f.lines]
    return sorted(kept, key=lambda f: rank.get(f.paper, len(SEEDS)))   # stable: first appearance within a seed


def draw(family: Family, path: Path) -> None:
    """The family's forest plot as a PNG: one row per line, top to bottom in table order."""
    n = len(family.lines)
    fig = figures.new_figure(8.0, 1.2 + 0.42 * n)
    ax = fig.add_subplot()
    for i, line in enumerate(family.lines):
        y = n - 1 - i
        colour, marker = STYLE.get(line.css, STYLE["unk"])
        if line.mde is not None:
            ax.plot([-line.mde, line.mde], [y, y], color="0.85", lw=10, solid_capstyle="butt", zorder=1)
        if line.margin is not None:
            ax.plot([line.margin] * 2, [y - 0.32, y + 0.32], color="black", ls="--", lw=1.2, zorder=2)
        ax.plot([line.lo, line.hi], [y, y], color=colour, lw=2.2, zorder=3)
        ax.plot([line.est], [y], marker=marker, color=colour, ms=7, zorder=4)
        ax.annotate(line.badge, xy=(1.01, y), xycoords=("axes fraction", "data"), va="center", fontsize=8.5)
    ax.axvline(0.0, color="0.25", lw=0.9, zorder=2)
    ax.set_yticks(range(n), [x.label for x in reversed(family.lines)], fontsize=8.5)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("a − b in the judged validation loss (below 0: a lower)" if family.pairwise
                  else "our estimate, in the claim's unit (see its row above)", fontsize=9)
    fig.suptitle(family.title, fontsize=9.5, x=0.01, ha="left")   # the axes' title would run past a long label column
    ax.grid(axis="x", color="0.92")
    fig.savefig(path, dpi=100)


def write_figures(claims: list[ClaimResult], papers: dict, assets: Path) -> list[dict]:
    """Draw every family's plot into `assets`; the template's list: id, src, alt, title, caption."""
    out = []
    for fam in families(claims, papers):
        draw(fam, assets / f"{fam.id}.png")
        out.append({"id": fam.id, "paper": fam.paper, "src": f"{assets.name}/{fam.id}.png", "title": fam.title,
                    "alt": f"forest plot, {fam.title}: " + "; ".join(x.text for x in fam.lines),
                    "caption": CAPTIONS[fam.pairwise]})
    return out
