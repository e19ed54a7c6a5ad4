"""Issue 37, the GKA rows a reviewer asks for: the identity rule (a GKA still near identity at the
end is "not comparable", never "contradicted"), the diagonal weight it reads, the missing rows
(GKA-S/B against DeiT-S/B, Table 4's trends with size, VLT-Ti above GKA-Ti) and the GKA-init
study held to every init its statement names. Constructed data with known answers throughout."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from kernattn.config import load_params
from kernattn.report import gka_state, verdicts
from kernattn.report.verdicts import gka_identity, studies
from kernattn.page import build
from kernattn.bench.report import paper_table4
from kernattn.bench import report_table4
from kernattn.report.claims import ClaimResult
from kernattn.report.part import ReportContext
from kernattn.attention.gka_readings import gka_modules
from kernattn.studies.gka_init.report import named_init_readings
from kernattn.tracks.char.model import GPT
from kernattn.tracks.lm import report_claims as lm_claims
from kernattn.tracks.vision import report as vision_report
from kernattn.tracks.vision import stages as vision_stages

PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"
PAPERS = build.load_paper_numbers()
THRESHOLD = gka_identity.max_diagonal(PAPERS)


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _claim(cid: str) -> dict:
    return next(c for c in PAPERS["claims"] if c["id"] == cid)


def _reading(*values, row="gka") -> gka_state.DiagonalReading:
    return gka_state.DiagonalReading(row, {f"{row}-s{i}": v for i, v in enumerate(values)})


# ----------------------------------------------------------------------------- the rule
def test_the_threshold_is_the_pre_registered_one():
    assert THRESHOLD == 0.9
    assert gka_identity.max_diagonal({}) == 0.9  # a claims file of one's own: the shipped rule


def _vision_finals(gka_gap: float) -> dict:
    """Three ImageNet seeds: DeiT-Ti ~72.2, GKA-Ti `gka_gap` pp away, VLT-Ti ~73.5."""
    out = {}
    for s, d in enumerate((0.0, 0.1, -0.05)):
        out[f"deit-s{s}"] = {"top1_ema": 72.2 + d}
        out[f"gka-s{s}"] = {"top1_ema": 72.2 + gka_gap + d + 0.02 * s}
        out[f"vlt-s{s}"] = {"top1_ema": 73.5 + d + 0.03 * s}
    return out


def test_identity_turns_a_contradiction_into_not_comparable():
    """GKA-Ti 5 pp below DeiT-Ti is no "modest" gap: contradicted at the paper scale. With the GKA
    row's diagonal weight at 0.95 on its runs it reads not comparable; at 0.5 it is judged as before."""
    vp = load_params(PARAMS, "paper").vision
    section = {"finals": _vision_finals(-5.0), "vp": vp, "runs": []}
    res = vision_report._top1_claim(_claim("003-vit-top1"), section, "paper")
    assert res.verdict == verdicts.CONTRADICTED
    stuck = gka_identity.apply_identity(res, _reading(0.95, 0.96, 0.97), THRESHOLD)
    assert stuck.verdict.startswith("not comparable (sigma stayed at identity: gka's mean diagonal weight above 0.9 "
                                    "on 3 of 3 runs (gka-s0 0.950")
    assert "gka-s2 0.970" in stuck.detail and "identity above 0.9" in stuck.detail
    mixed = vision_report._top1_claim(_claim("003-vit-top1"), section, "paper")
    assert gka_identity.apply_identity(mixed, _reading(0.5, 0.95, 0.4), THRESHOLD).verdict.startswith(
        "not comparable (sigma stayed at identity: gka's mean diagonal weight above 0.9 on 1 of 3 runs (gka-s1 0.950)")
    learned = vision_report._top1_claim(_claim("003-vit-top1"), section, "paper")
    assert gka_identity.apply_identity(learned, _reading(0.5, 0.5, 0.5), THRESHOLD).verdict == verdicts.CONTRADICTED
    assert "gka-s0 0.500" in learned.detail


def test_identity_keeps_the_comparisons_in_step_and_the_other_reasons():
    """A compared pair's own verdict follows the claim's (the pairs table never keeps a
    contradiction the claim dropped); a verdict that was not comparable already keeps its reason."""
    vp = load_params(PARAMS, "paper").vision
    finals = _vision_finals(0.0)
    for s in range(3):
        finals[f"gka-s{s}"]["top1_ema"] = 75.0 + 0.1 * s  # GKA-Ti above VLT-Ti: contradicted
    res = vision_report._vlt_claim(_claim("003-vlt-above-gka"), {"finals": finals, "vp": vp}, "paper")
    assert res.verdict == verdicts.CONTRADICTED and res.comparisons[0].verdict == verdicts.CONTRADICTED
    assert res.ours.startswith("VLT − GKA top-1 EMA: -")
    gka_identity.apply_identity(res, _reading(0.99, 0.99, 0.99), THRESHOLD)
    assert res.verdict.startswith("not comparable (sigma stayed at identity")
    assert [c.verdict for c in res.comparisons] == [res.verdict]
    other = verdicts.not_comparable("data set differs: fashion_mnist, not ImageNet-1k")
    assert gka_identity.identity_verdict(other, _reading(0.95), THRESHOLD) == (
        "not comparable (sigma stayed at identity: gka's mean diagonal weight above 0.9 on 1 of 1 runs "
        "(gka-s0 0.950); data set differs: fashion_mnist, not ImageNet-1k)")
    assert gka_identity.identity_verdict(verdicts.NOT_RUN, _reading(0.95), THRESHOLD) == verdicts.NOT_RUN


def test_a_weight_not_read_withholds_a_tested_verdict_and_no_other():
    unread = gka_state.DiagonalReading("gka", {"gka-s0": 0.4, "gka-s1": None}, {"gka-s1": "no ckpt.pt in x"})
    assert gka_identity.identity_verdict(verdicts.REPRODUCED, unread, THRESHOLD) == \
        "not judged (diagonal weight not read: gka-s1: no ckpt.pt in x)"
    assert gka_identity.identity_verdict(verdicts.INCONCLUSIVE, unread, THRESHOLD).startswith("not judged (diagonal")
    assert gka_identity.identity_verdict("not judged (2 seeds)", unread, THRESHOLD) == "not judged (2 seeds)"
    assert gka_identity.identity_text(unread, THRESHOLD).startswith(
        "gka: mean diagonal weight at the end gka-s0 0.400, gka-s1 not read (no ckpt.pt in x)")
    # a run above the threshold decides even when another was not read
    above = gka_state.DiagonalReading("gka", {"gka-s0": 0.93, "gka-s1": None}, {"gka-s1": "x"})
    assert gka_identity.identity_verdict(verdicts.CONTRADICTED, above, THRESHOLD).startswith("not comparable (sigma")


def test_lm_claims_that_compare_the_gka_row_follow_the_rule():
    """003-lm-bpb (a comparison) becomes not comparable; 003-lm-size (a count) does not."""
    ctx = SimpleNamespace(papers=PAPERS)
    bpb = ClaimResult(_claim("003-lm-bpb"), verdicts.CONTRADICTED, scale="paper")
    size = ClaimResult(_claim("003-lm-size"), verdicts.BY_CONSTRUCTION, scale="paper")
    lm_claims._with_identity(ctx, [bpb, size], _reading(0.96, 0.97, 0.95, row="gka_paper"))
    assert bpb.verdict.startswith("not comparable (sigma stayed at identity: gka_paper's")
    assert size.verdict == verdicts.BY_CONSTRUCTION and size.detail == ""
    core = ClaimResult(_claim("003-lm-core"), verdicts.INCONCLUSIVE, scale="paper")
    lm_claims._with_identity(ctx, [core], _reading(0.3, 0.2, 0.25, row="gka_paper"))
    assert core.verdict == verdicts.INCONCLUSIVE and "gka_paper-s1 0.200" in core.detail


# ----------------------------------------------------------------------------- the measurement
CONTEXT = 12


class CharRun:
    """A char track's stand-in over a hand-built GKA GPT: what run_diagonal reads (probe_input as
    the char track's)."""

    name, command, seed = "char", "train", 0

    def __init__(self, folder: Path, log_sigma: float | None = None):
        self.run_id, self.run_dir = "gka-s0", folder
        self.params = SimpleNamespace(model=SimpleNamespace(n_layer=2, n_head=2, d_model=32, context=CONTEXT,
                                                            mlp_ratio=2, dropout=0.0))
        self.log_sigma = log_sigma

    def build(self, device):
        self.model = GPT(40, self.params.model, "gka", {"init_sigma": "paper"}).to(device)
        # every window holds 12 different characters: no two tokens share features
        self.val_data = torch.arange(40, device=device)
        self.val_starts = torch.tensor([[0, 5, 10, 20]])

    def probe_input(self, rows=None):
        from kernattn.tracks.char.data import windows

        return windows(self.val_data, self.val_starts[0][:rows], CONTEXT)[0]

    def save(self, part: str = "model") -> "CharRun":
        """A finished run: its checkpoint (every log sigma set) and the final.json naming it."""
        self.build(torch.device("cpu"))
        with torch.no_grad():
            for m in gka_modules(self.model):
                m.log_sigma.fill_(self.log_sigma)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torch.save({part: self.model.state_dict(), "fingerprint": "f", "step": 3}, self.run_dir / "ckpt.pt")
        (self.run_dir / "final.json").write_text(json.dumps({"fingerprint": "f", "steps": 3}))
        return self


def test_diagonal_weight_of_uniform_and_identity_attention(tmp_path):
    """sigma huge: every allowed key weighs the same, so causal query i puts 1 / (i + 1) on
    itself; the first query (only itself allowed) is left out: the mean over i = 1..n-1.
    sigma tiny: every other token's kernel underflows to 0 and each token keeps all its weight."""
    uniform = sum(1 / (i + 1) for i in range(1, CONTEXT)) / (CONTEXT - 1)
    huge = CharRun(tmp_path / "huge", log_sigma=30.0).save()
    assert gka_state.run_diagonal(huge) == pytest.approx(uniform, rel=1e-6)
    tiny = CharRun(tmp_path / "tiny", log_sigma=-10.0).save()
    assert gka_state.run_diagonal(tiny) == pytest.approx(1.0, abs=1e-12)
    reading = gka_state.read_row("gka", {"gka-s0": tiny.run_dir}, lambda rid: CharRun(tiny.run_dir))
    assert reading.values == {"gka-s0": pytest.approx(1.0)}
    res = ClaimResult(_claim("003-vit-top1"), verdicts.REPRODUCED)
    assert gka_identity.apply_identity(res, reading, THRESHOLD).verdict.startswith("not comparable (sigma stayed")


def test_diagonal_weight_without_causal_mask_is_one_over_n():
    """Bidirectional (the ViT's): uniform weights give every query 1 / n on itself."""
    from kernattn import attention
    from kernattn.attention.gka_readings import mean_diagonal_weight

    attn = attention.build("gka", d_model=16, n_head=2, causal=False, impl="fast").double()
    with torch.no_grad():
        attn.log_sigma.fill_(30.0)
    x = torch.randn(3, 7, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert float(mean_diagonal_weight(attn, lambda: attn(x)).mean()) == pytest.approx(1 / 7, rel=1e-9)
    with torch.no_grad():
        attn.log_sigma.fill_(-10.0)
    assert float(mean_diagonal_weight(attn, lambda: attn(x)).mean()) == pytest.approx(1.0, abs=1e-12)


def test_a_run_that_cannot_be_read_says_why(tmp_path):
    """No checkpoint, or a ViT checkpoint without the EMA weights its claims judge: not read,
    with the reason, and the claim withholds its verdict rather than guessing."""
    run = CharRun(tmp_path / "gone")
    reading = gka_state.read_row("gka", {"gka-s0": run.run_dir}, lambda rid: run)
    assert reading.values == {"gka-s0": None} and reading.why["gka-s0"].startswith("no final.json and no ckpt.pt")
    vit = CharRun(tmp_path / "vit", log_sigma=0.0).save(part="model")
    vit.name = "vision"  # its checkpoint has no "ema" part
    reading = gka_state.read_row("gka", {"gka-s0": vit.run_dir}, lambda rid: vit)
    assert reading.why["gka-s0"] == "KeyError: 'ema'"
    res = ClaimResult(_claim("003-vit-top1"), verdicts.CONTRADICTED)
    assert gka_identity.apply_identity(res, reading, THRESHOLD).verdict == \
        "not judged (diagonal weight not read: gka-s0: KeyError: 'ema')"


# ----------------------------------------------------------------------------- the vision part, wired
def test_vision_claims_apply_the_rule_and_the_missing_rows_read_not_run(tmp_path, monkeypatch):
    """The vision part at the paper scale on constructed finals: the GKA-Ti claims read not
    comparable when the GKA row stayed at identity (the weights stubbed: the rule's wiring is under
    test), VLT-Ti above DeiT-Ti is untouched, and the S and B rows, which no scale trains, read
    "not run" saying how a scale would add them; the benchmarks' part reads Table 4's trend
    "not run" when no benchmark measured both sizes."""
    monkeypatch.chdir(tmp_path)  # vision.out_dir and bench.out_dir are relative
    p = load_params(PARAMS, "paper")
    finals = _vision_finals(-5.0)
    for rid in finals:
        folder = vision_stages.run_dir(p, rid)
        folder.mkdir(parents=True)
        (folder / "final.json").write_text("{}")
        (folder / "ckpt.pt").write_bytes(b"")
    monkeypatch.setattr("kernattn.tracks.vision.track.VisionTrack", lambda params, rid: SimpleNamespace(run_id=rid))
    monkeypatch.setattr(gka_state, "run_diagonal", lambda track: 0.95)
    monkeypatch.setattr(vision_report, "_loss_gated", lambda res, *args: res)  # no training curves here
    ctx = ReportContext(params=p, params_file=str(PARAMS), folder=tmp_path, papers=PAPERS)
    section = {"enabled": True, "finals": finals, "vp": p.vision, "runs": [], "counts_table": []}
    got = {r.claim["id"]: r for r in vision_report.claims(ctx, section)}
    for cid in ("003-vit-top1", "003-vlt-above-gka"):
        assert got[cid].verdict.startswith("not comparable (sigma stayed at identity: gka's mean diagonal weight "
                                           "above 0.9 on 3 of 3 runs"), cid
    assert got["003-vlt-above-deit"].verdict == verdicts.REPRODUCED
    for cid, size, dim in (("003-vit-top1-s", "S", 384), ("003-vit-top1-b", "B", 768)):
        assert got[cid].verdict == verdicts.NOT_RUN
        assert f"GKA-{size}: no row of vision.rows names it" in got[cid].detail
        assert f"so no {size} row can run here" in got[cid].detail and f"embed_dim {dim}" in got[cid].detail
    assert "003-table4-trends" not in got  # Table 4's claims are the benchmarks' part's
    from kernattn.bench import report as bench_report

    bench = {r.claim["id"]: r for r in bench_report.claims(ctx, {"measured": []})}
    assert bench["003-table4-trends"].verdict == verdicts.NOT_RUN
    assert "paper (RTX 5090): infer img/s B 0.54x vs Ti 0.88x (holds)" in bench["003-table4-trends"].detail


# ----------------------------------------------------------------------------- Table 4 across sizes
def _bench(device: str, ratio: dict[str, tuple[float, float, float]], mfu=None) -> pd.DataFrame:
    """deit and gka at each size of `ratio` (size -> GKA / DeiT throughput: infer, train b64, b128)."""
    rows = []
    for size, (inf, b64, b128) in ratio.items():
        for variant, f in (("deit", (1.0, 1.0, 1.0)), ("gka", (inf, b64, b128))):
            head = {"family": "vit", "status": "ok", "shape": "224px/16 d192 12x3", "model": f"{variant}_{size}",
                    "device": device, "mfu": mfu}
            rows += [{**head, "mode": "infer", "batch": 64, "items_per_s": 100.0 * f[0], "peak_mib": 10.0},
                     {**head, "mode": "train", "batch": 64, "items_per_s": 50.0 * f[1], "peak_mib": 20.0},
                     {**head, "mode": "train", "batch": 128, "items_per_s": 90.0 * f[2], "peak_mib": 40.0}]
    return pd.DataFrame(rows)


def test_table4_trends_on_the_papers_numbers_and_constructed_benchmarks():
    claim = _claim("003-table4-trends")
    table4 = paper_table4()
    paper = report_table4.paper_frame(table4)
    verdict, words = report_table4.trend({s: report_table4.size_ratios(paper, s) for s in report_table4.SIZES})
    assert verdict == verdicts.REPRODUCED and len(words) == 6  # the table supports its own sentence
    growing = {"tiny": (0.9, 0.6, 0.55), "base": (0.5, 0.5, 0.4)}
    res = report_table4.table4_trend_claim(claim, [("gpu", _bench("NVIDIA H100", growing))], table4, "paper")
    assert res.verdict == verdicts.REPRODUCED, res.ours
    shrinking = {"tiny": (0.5, 0.5, 0.6), "base": (0.9, 0.8, 0.9)}  # GKA closes in on DeiT with size and batch
    res = report_table4.table4_trend_claim(claim, [("gpu", _bench("NVIDIA H100", shrinking))], table4, "paper")
    assert res.verdict == verdicts.CONTRADICTED
    mixed = {"tiny": (0.9, 0.6, 0.55), "base": (0.95, 0.5, 0.4)}  # inference alone goes the other way
    res = report_table4.table4_trend_claim(claim, [("gpu", _bench("NVIDIA H100", mixed))], table4, "paper")
    assert res.verdict == verdicts.INCONCLUSIVE and "infer img/s B 0.95x vs Ti 0.90x (fails)" in res.ours
    cpu = report_table4.table4_trend_claim(claim, [("cpu", _bench("cpu", growing))], table4, "small")
    assert cpu.verdict.startswith("not comparable (measured on a CPU (cpu)")
    only_ti = report_table4.table4_trend_claim(claim, [("gpu", _bench("NVIDIA H100", {"tiny": (0.9, 0.6, 0.5)}))],
                                            table4, "paper")
    assert only_ti.verdict == verdicts.NOT_RUN and "both tiny and base" in only_ti.detail


# ----------------------------------------------------------------------------- the GKA-init study
def _init_summary(inits: list[str], seeds=range(6)) -> dict:
    """Char runs whose loss falls with a larger init (sigma = 1 worst)."""
    loss = {"1": 1.50, "sqrt_d_half": 1.40, "sqrt_d": 1.38, "median": 1.39}
    return {"inits": inits, "runs": [{"track": "char", "init": i, "seed": s, "val_loss": loss[i] + 0.001 * s * (k + 1)}
                                     for k, i in enumerate(inits) for s in seeds]}


def test_an_init_study_missing_median_says_so():
    claim = _claim("003-gka-init-sigma")
    assert list(claim["inits"]) == ["sqrt_d_half", "sqrt_d", "median"]
    summary = _init_summary(["1", "sqrt_d_half", "sqrt_d"])
    values = {i: {r["seed"]: r["val_loss"] for r in summary["runs"] if r["init"] == i} for i in summary["inits"]}
    _, comps = studies.init_family_comparisons({"char": ("1", values)})
    lines = named_init_readings(claim, summary, comps, "small")
    assert lines[-1] == "median feature distance: not judged (init median not run at this scale)"
    assert lines[0].startswith("sqrt(d)/2: char ") and "not run" not in lines[0]
    assert len(lines) == 3
    everything = _init_summary(["1", "sqrt_d_half", "sqrt_d", "median"])
    assert not any("not run" in x for x in named_init_readings(claim, everything, [], "small"))
    no_baseline = _init_summary(["sqrt_d"])
    assert named_init_readings(claim, no_baseline, [], "small")[0] == \
        "sigma = 1: not judged (init 1 not run at this scale)"

