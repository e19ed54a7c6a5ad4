"""params.yaml: the scales merge as documented and every bad value fails in one line."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest

from kernattn.config import ParamsError, load_params, run_matrix
from kernattn.yaml_text import safe_dump, safe_load

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"


def write(tmp_path, doc) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(safe_dump(doc) if not isinstance(doc, str) else doc)
    return path


@functools.cache
def _shipped() -> dict:
    return safe_load(PARAMS.read_text())


def base():
    """A fresh copy of the shipped params.yaml (parsed once: the cases below build 20 at collection)."""
    return copy.deepcopy(_shipped())


def test_shipped_scales():
    paper = load_params(PARAMS, "paper")
    assert (paper.model.n_layer, paper.model.n_head, paper.model.d_model, paper.model.context) == (4, 4, 512, 256)
    assert (paper.train.batch_size, paper.train.max_steps, paper.data.val_fraction) == (256, 200_000, 0.1)
    assert len(run_matrix(paper)) == 22 * 3   # the documents' 15 rows and the 7 controls of issue 50
    tiny = load_params(PARAMS)  # the file's own scale
    assert tiny.scale == "tiny" and tiny.train.device == "cpu"
    # every row but the bank-size ablation's M = 1, 4, 16; two seeds where a claim compares the row,
    # one for ALiBi, T5, the lag table, GPA M=8 and GKA
    assert len(run_matrix(tiny)) == 7 * 2 + 5
    assert tiny.data.val_fraction == 0.1  # not overridden: inherited from the defaults
    micro = load_params(PARAMS, "micro")
    assert [r.run_id for r in run_matrix(micro)] == ["rope-s0", "gpa_dp_m8-s0"]
    assert paper.digest() != tiny.digest()


def test_matrix_has_the_rows_the_papers_need():
    rows = {r.name: r for r in load_params(PARAMS, "paper").matrix.rows}
    assert rows["gpa_decay_m8"].options == {"n_kernels": 8, "kernel": "decay", "combine": "mult"}
    assert rows["gpa_dp_m8"].options == {"n_kernels": 8, "kernel": "decay_periodic", "combine": "mult"}
    assert rows["gpa_m64"].options["combine"] == "add" and rows["gpa_m64"].options["n_kernels"] == 64
    assert rows["gpa_m64_rope"].options["rope"] is True
    assert {rows[n].options.get("position") for n in ("rope", "learned_rope", "alibi", "t5", "lag_table")} == {
        "rope", "learned_rope", "alibi", "t5", "lag_table"}
    assert rows["gka"].variant == "gka"
    # the bank-size ablation: gpa-long's GPA (add, no RoPE) at every M; tiny keeps M = 8 and 64
    for m in (1, 4, 8, 16, 64):
        name = f"gpa_m{m}"
        assert rows[name].options == {"n_kernels": m, "kernel": "decay_periodic", "combine": "add"}, name
    tiny_rows = {r.row for r in run_matrix(load_params(PARAMS, "tiny"))}
    assert {"gpa_m8", "gpa_m64"} <= tiny_rows and not {"gpa_m1", "gpa_m4", "gpa_m16"} & tiny_rows


def test_analysis_section():
    paper, micro = load_params(PARAMS, "paper"), load_params(PARAMS, "micro")
    a = paper.analysis
    assert (a.sample_chars, a.streams, a.temperature, a.bump_min_lag) == (50_000, 50, 1.0, 10)
    assert a.out_dir == "results/paper/analysis" and micro.analysis.out_dir == "results/micro/analysis"
    assert micro.analysis.sample_chars < a.sample_chars  # tests keep the micro analysis fast
    assert micro.analysis.temperature == 1.0  # not overridden: inherited


def test_environment_overrides(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNATTN_SCALE", "micro")
    assert load_params(PARAMS).scale == "micro"
    # the data mirror is a machine's folder, read where files are located, never a params value
    monkeypatch.setenv("KERNATTN_DATA_MIRROR", str(tmp_path))
    assert load_params(PARAMS).data.mirror is None and load_params(PARAMS).data.dataset == "silesia-dickens"


def mutate(fn):
    doc = base()
    fn(doc)
    return doc


BAD = [
    ("yaml syntax", "scale: tiny\nmodel: {n_layer: 2\n", "YAML syntax error"),
    ("unknown top key", mutate(lambda d: d.update(modle={})), "unknown key 'modle'"),
    ("unknown section key", mutate(lambda d: d["train"].update(learning_rate=1)), "unknown key 'train.learning_rate'"),
    ("unknown scale key", mutate(lambda d: d["scales"]["tiny"]["train"].update(lrr=1)), "unknown key 'scales.tiny.train.lrr'"),
    ("wrong type", mutate(lambda d: d["model"].update(n_layer="four")), "model.n_layer must be int"),
    ("bool is not int", mutate(lambda d: d["model"].update(n_head=True)), "model.n_head must be int"),
    ("negative lr", mutate(lambda d: d["train"].update(lr=-1e-3)), "train.lr must be > 0"),
    ("bad choice", mutate(lambda d: d["train"].update(dtype="fp8")), "train.dtype must be one of bfloat16, float32"),
    ("bad fraction", mutate(lambda d: d["data"].update(val_fraction=1.5)), "data.val_fraction must be between 0 and 1"),
    ("unknown scale", mutate(lambda d: d.update(scale="huge")), "unknown scale 'huge'; allowed: controls, micro, paper, small, small_long, tiny"),
    ("unknown variant", mutate(lambda d: d["matrix"]["rows"].append({"name": "x", "variant": "flash"})),
     "unknown attention variant 'flash'; valid names: cope, differential, favor, fire, fox, gka, gpa, nw, rbf, "
     "sigmoid, softmax, valueless"),
    ("unknown option", mutate(lambda d: d["matrix"]["rows"][0]["options"].update(positon="rope")),
     "unknown option 'positon'"),
    ("bad option value", mutate(lambda d: d["matrix"]["rows"][2]["options"].update(combine="sum")),
     "must be one of add, mult"),
    ("duplicate row", mutate(lambda d: d["matrix"]["rows"].append(dict(d["matrix"]["rows"][0]))), "two rows named 'rope'"),
    ("only unknown row", mutate(lambda d: d["scales"]["micro"]["matrix"].update(only=["ropee"])), "unknown row 'ropee'"),
    ("context longer than lag table", mutate(lambda d: d["model"].update(context=512)), "max_len=256 is shorter than model.context=512"),
    ("heads do not divide width", mutate(lambda d: d["model"].update(n_head=3)), "multiple of model.n_head=3"),
    ("bad value in another scale", mutate(lambda d: d["scales"]["micro"]["train"].update(max_steps=0)),
     "scales.micro -> train.max_steps must be > 0"),
    ("section not a mapping", mutate(lambda d: d.update(train=[1, 2])), "train must be a mapping"),
    ("zero temperature", mutate(lambda d: d["analysis"].update(temperature=0)), "analysis.temperature must be > 0"),
    ("unknown analysis key", mutate(lambda d: d["analysis"].update(samples=10)), "unknown key 'analysis.samples'"),
]


@pytest.mark.parametrize("case,doc,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_params_fail_in_one_line(tmp_path, case, doc, needle):
    path = write(tmp_path, doc)
    scale = "micro" if case == "only unknown row" else ("paper" if case != "unknown scale" else None)
    with pytest.raises(ParamsError) as err:
        load_params(path, scale)
    msg = str(err.value)
    assert needle in msg, msg
    assert msg.startswith(str(path)) and "\n" not in msg


def test_missing_file(tmp_path):
    with pytest.raises(ParamsError, match="no such params file"):
        load_params(tmp_path / "nope.yaml")


def test_each_scale_writes_its_own_outputs():
    tiny, micro = load_params(PARAMS, "tiny"), load_params(PARAMS, "micro")
    assert tiny.data.out_dir == "results/tiny/data/dickens" and micro.data.out_dir == "results/micro/data/dickens"
    assert tiny.train.out_dir != micro.train.out_dir
    assert tiny.tracking.experiment == "kernattn-char-dickens-tiny"


# ----------------------------------------------------------------------------- cross-key checks on load
CROSS = [
    ("lm head_dim", lambda d: d["lm"].update(head_dim=100), "scale paper: lm.head_dim=100 must divide"),
    ("lm variant", lambda d: d["lm"]["rows"].append({"name": "m", "variant": "mamba"}),
     "scale paper: lm.rows[10] (m): unknown attention variant 'mamba'; valid names: base, cope, differential"),
    ("lm option", lambda d: d["lm"]["rows"].append({"name": "g", "variant": "gpa", "options": {"n_kernel": 8}}),
     "lm.rows[10] (g): unknown option 'n_kernel' for attention variant 'gpa'"),
    ("lm no window form", lambda d: d["lm"]["rows"].append({"name": "lin", "variant": "nw",
                                                            "options": {"kernel": "linear"}}),
     "lm.rows[10] (lin): attention 'nw' with {'kernel': 'linear'} has no sliding-window form, and lm.window_pattern='SSSL'"),
    ("lm lag table", lambda d: d["lm"]["rows"].append({"name": "lt", "variant": "softmax",
                                                       "options": {"position": "lag_table", "max_len": 512}}),
     "lm.rows[10] (lt): options.max_len=512 is shorter than lm.context=2048; raise max_len or lower the context"),
    ("lm compute row", lambda d: d["lm"]["rows"][1].update(compute={"match": "tokens", "row": "bas"}),
     "lm.rows[1] (gka_tokens): compute.row names unknown row 'bas'; rows of lm.rows: base, gka_tokens"),
    ("lm compute half", lambda d: d["lm"]["rows"][1].update(compute={"match": "tokens"}),
     "lm.rows[1] (gka_tokens): compute needs both match (tokens, flops) and row, or tokens"),
    ("lm compute both", lambda d: d["lm"]["rows"][1].update(compute={"match": "tokens", "row": "base", "tokens": 9}),
     "lm.rows[1] (gka_tokens): compute has tokens and match/row"),
    ("lm compute cycle", lambda d: d["lm"]["rows"][0].update(compute={"match": "flops", "row": "gka_tokens"}),
     "lm.rows: the compute of row 'base' refers back to itself (base -> gka_tokens -> base)"),
    ("lm duplicate row", lambda d: d["lm"]["rows"].append({"name": "base", "variant": "gka"}),
     "lm.rows has two rows named 'base'"),
    ("lm vocab", lambda d: d["lm"].update(vocab_size=70000), "lm.vocab_size=70000 must be <= 65536"),
    ("lm schedule", lambda d: d["lm"].update(warmup_frac=0.6, warmdown_frac=0.97),
     "scale paper: lm.warmup_frac=0.6 + warmdown_frac=0.97 must be <= 1"),
    ("vision variant", lambda d: d["vision"]["rows"].append({"name": "v", "variant": "vit"}),
     "vision.rows[6] (v): unknown attention variant 'vit'; valid names: deit, vlt, gka, cope"),
    ("vision causal only", lambda d: d["vision"]["rows"].append({"name": "fx", "variant": "fox"}),
     "vision.rows[6] (fx): vision attention 'fox' is causal only (no bidirectional form); use a variant with one"),
    ("vision 1-D positions", lambda d: d["vision"]["rows"].append({"name": "al", "variant": "softmax",
                                                                   "options": {"position": "alibi"}}),
     "vision.rows[6] (al): vision attention 'softmax' applies alibi along the token order"),
    ("vision compute", lambda d: d["vision"]["rows"][0].update(compute={"tokens": 5}),
     "vision.rows[0] (deit): compute applies to lm rows only; remove it"),
    # (micro's lm and vision sections are YAML anchors the controls, small and small_long scales
    # share, and scales are checked in name order: the first scale holding the bad value is named)
    ("rows a scale replaces", lambda d: d["scales"]["micro"]["lm"]["rows"].append({"name": "x", "variant": "gpa",
                                                                                "options": {"combine": "sum"}}),
     "scales.controls -> lm.rows[3] (x): option 'combine' of attention variant 'gpa' must be one of add, mult"),
    ("vision patch", lambda d: d["vision"].update(patch_size=15), "vision.img_size=224 must be a multiple"),
    ("lm in another scale", lambda d: d["scales"]["micro"]["lm"].update(window_pattern="SXL"),
     "scales.controls -> lm.window_pattern='SXL'"),
    ("char check in another scale", lambda d: d["scales"]["micro"]["matrix"].update(seeds=[]),
     "scales.micro -> matrix.seeds is empty"),
]


@pytest.mark.parametrize("case,fn,needle", CROSS, ids=[c[0] for c in CROSS])
def test_every_cross_key_check_runs_on_every_load(tmp_path, case, fn, needle):
    """A bad lm: or vision: section (of any scale) fails load_params itself, so the Snakemake
    parse and `kernattn dvc-yaml` stop on it, not the first job of that track."""
    path = write(tmp_path, mutate(fn))
    for scale in ("paper", "tiny"):
        with pytest.raises(ParamsError) as err:
            load_params(path, scale)
        msg = str(err.value)
        assert msg.startswith(str(path)) and "\n" not in msg, msg
        if scale == "paper" or "scales." in needle:
            assert needle in msg, msg


# ----------------------------------------------------------------------------- overrides
def test_overrides_merge_over_the_chosen_scale_and_reach_every_section():
    tiny = load_params(PARAMS, "tiny")
    over = load_params(PARAMS, "tiny", {"train": {"lr": 0.5}, "lm.depth": 3, "vision": {"epochs": 7}})
    assert (over.train.lr, over.lm.depth, over.vision.epochs) == (0.5, 3, 7)
    assert over.train.max_steps == tiny.train.max_steps  # the scale's own values stay
    assert over.raw["train"]["lr"] == 0.5 and over.digest() != tiny.digest()
    # later sources win; a mapping is merged key by key, not replaced
    both = load_params(PARAMS, "tiny", [("a.yaml", {"train": {"lr": 0.5, "beta1": 0.8}}), ("--config", {"train": {"lr": 0.25}})])
    assert (both.train.lr, both.train.beta1) == (0.25, 0.8)


OVERRIDE_BAD = [
    ({"learning_rat_typo": 1}, "--config: unknown key 'learning_rat_typo'; allowed: data, model"),
    ({"train": {"lrr": 1}}, "--config: unknown key 'train.lrr'; allowed: batch_size"),
    ({"train": {"lr": "fast"}}, "--config: train.lr must be float, got 'fast'"),
    ({"train": {"lr": -1}}, "--config: train.lr must be > 0"),
    ({"lm": {"head_dim": 100}}, "--config: scale tiny: lm.head_dim=100 must divide"),
    ({"train": 3}, "--config: train must be a mapping"),
]


@pytest.mark.parametrize("over,needle", OVERRIDE_BAD, ids=[o[1].split(":")[1].strip()[:30] for o in OVERRIDE_BAD])
def test_bad_overrides_fail_in_one_line_naming_their_source(over, needle):
    with pytest.raises(ParamsError) as err:
        load_params(PARAMS, "tiny", [("--config", over)])
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_overrides_file_of_a_command(tmp_path):
    """`kernattn <command> --overrides FILE` (what the Snakefile's rules hand every stage, so the
    command sees the values the rule was scheduled with): the stage's params_from_args applies
    it, and its Params remember the file for the processes the stage starts."""
    from kernattn.cli import build_parser
    from kernattn.config import params_from_args

    over = tmp_path / "over.yaml"
    over.write_text("train: {lr: 0.5}\n")
    args = build_parser("train").parse_args(["train", "--params", str(PARAMS), "--scale", "tiny", "--overrides",
                                             str(over), "--run", "x"])
    assert (args.overrides, args.run) == (str(over), "x")
    params = params_from_args(args)
    assert params.train.lr == 0.5 and params.overrides == str(over)
    args.overrides = None
    plain = params_from_args(args)
    assert plain.train.lr == load_params(PARAMS, "tiny").train.lr != 0.5 and plain.overrides is None
    args.overrides = str(over)
    over.write_text("train: {lrr: 0.5}\n")
    with pytest.raises(ParamsError, match=f"{over}: unknown key 'train.lrr'"):
        params_from_args(args)
    over.unlink()
    with pytest.raises(ParamsError) as err:
        params_from_args(args)
    assert str(err.value) == f"{over}: no such overrides file (--overrides)"  # one line naming it


# The environment variable that used to carry a command's overrides file to every load_params
# of its process and its children; spelt in two parts so that a grep for it finds only the
# CHANGELOG's line.
RETIRED_VARIABLE = "_".join(("KERNATTN", "OVERRIDES"))


def test_no_environment_variable_adds_overrides(monkeypatch, tmp_path):
    """Neither a load_params in this process nor a `kernattn` process started with it set."""
    import os
    import subprocess
    import sys

    over = tmp_path / "over.yaml"
    over.write_text("train: {lr: 0.5}\ndata: {dataset: gutenberg-dickens}\n")
    monkeypatch.setenv(RETIRED_VARIABLE, str(over))
    assert load_params(PARAMS, "tiny").train.lr != 0.5
    assert load_params(PARAMS, "tiny", [("a.yaml", {"train": {"lr": 0.25}})]).train.lr == 0.25  # not 0.5 after it
    proc = subprocess.run([sys.executable, "-m", "kernattn.cli", "data", "list", "--params", str(PARAMS), "--scale",
                           "tiny"], env=os.environ, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "silesia-dickens" in proc.stdout, proc.stdout + proc.stderr
    assert "gutenberg-dickens" not in proc.stdout, proc.stdout


def test_fingerprint_flag_leaves_out_what_does_not_change_a_run():
    from kernattn.config import LMParams, TrainParams, VisionParams, fingerprinted, not_fingerprinted

    tiny = load_params(PARAMS, "tiny")
    fp = fingerprinted(tiny.train)
    assert "lr" in fp and "max_steps" in fp and not {"out_dir", "threads", "device", "compile"} & set(fp)
    assert set(not_fingerprinted(TrainParams)) == {"out_dir", "checkpoint_every", "threads", "compile", "device",
                                                   "micro_batch", "dist_timeout_s"}
    assert {"out_dir", "eval_dir", "mirror"} <= set(not_fingerprinted(LMParams)) and "depth" not in not_fingerprinted(LMParams)
    assert {"workers", "data_root"} <= set(not_fingerprinted(VisionParams)) and "lr" not in not_fingerprinted(VisionParams)


def test_the_track_sections_are_typed():
    from kernattn.config.lm import LMParams
    from kernattn.config.vision import VARIANTS, VisionParams

    tiny = load_params(PARAMS, "tiny")
    assert isinstance(tiny.lm, LMParams)
    assert isinstance(tiny.vision, VisionParams) and set(VARIANTS) <= {r.variant for r in tiny.vision.rows}


def test_one_row_schema_runs_and_a_scale_replacing_rows():
    """matrix.rows, lm.rows and vision.rows are one Row type; a run is <row>-s<seed> in every
    track, a row's own seeds replace the section's; a scale's rows replace the defaults' (a
    list is not merged)."""
    from kernattn.config import Row, runs_of
    from kernattn.tracks.lm.stages import lm_runs
    from kernattn.tracks.vision.stages import run_ids

    paper, micro = load_params(PARAMS, "paper"), load_params(PARAMS, "micro")
    assert {type(r) for r in (*micro.matrix.rows, *micro.lm.rows, *micro.vision.rows)} == {Row}
    assert [r.name for r in micro.lm.rows] == ["base", "gka_tokens", "gka_flops"]
    assert "gka_paper" in [r.name for r in paper.lm.rows] and "gka_paper" not in [r.name for r in micro.lm.rows]
    assert [r.run_id for r in lm_runs(micro.lm)] == ["base-s0", "gka_tokens-s0", "gka_flops-s0"]
    assert run_ids(micro.vision) == ["deit-s0", "gka-s0", "vlt-s0"]
    over = load_params(PARAMS, "micro", {"lm.seeds": [0, 1], "lm.rows": [
        {"name": "a", "variant": "gpa", "seeds": [3]}, {"name": "b", "variant": "base"}]})
    assert [r.run_id for r in lm_runs(over.lm)] == ["a-s3", "b-s0", "b-s1"]
    assert [r.run_id for r in runs_of(over.lm.rows, (7,), only=["b"])] == ["b-s7"]
    table8 = next(r for r in paper.lm.rows if r.name == "gka_paper")
    assert table8.compute.tokens == 2_778_726_400 and table8.compute.describe() == "2,778,726,400 tokens"


# ----------------------------------------------------------------------------- RunSettings
def test_the_runtime_fields_are_declared_once():
    """train, lm and vision inherit RunSettings' fields with their checks and fingerprint
    flags unchanged (a section redeclares one only for another default), and what is
    fingerprinted is what it was before RunSettings (a run's identity must not move)."""
    import dataclasses

    from kernattn.config import LMParams, RunSettings, TrainParams, VisionParams, not_fingerprinted
    from kernattn.config import common

    base = {f.name: f for f in dataclasses.fields(RunSettings)}
    assert set(base) == {"device", "dtype", "compile", "threads", "grad_clip", "checkpoint_every", "out_dir",
                         "micro_batch", "dist_timeout_s"}
    for cls in (TrainParams, LMParams, VisionParams):
        assert issubclass(cls, RunSettings)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert all(fields[n].metadata == f.metadata for n, f in base.items()), cls
    assert (TrainParams().checkpoint_every, LMParams().checkpoint_every, VisionParams().checkpoint_every) == (5000, 1000, 1000)
    assert (TrainParams().out_dir, LMParams().out_dir, VisionParams().out_dir) == (
        "results/runs", "results/{scale}/lm/runs", "results/{scale}/vision/runs")
    # micro_batch and dist_timeout_s (issue 24) change how a step is computed, never what
    assert set(not_fingerprinted(TrainParams)) == {"checkpoint_every", "compile", "threads", "device", "out_dir",
                                                   "micro_batch", "dist_timeout_s"}
    assert set(not_fingerprinted(LMParams)) == {
        "dataset", "mirror", "rows", "eval_every", "checkpoint_every", "compile", "threads", "device", "out_dir",
        "bpb_tokens", "core_items", "core_fewshot", "core_seed", "eval_set", "eval_dir", "experiment", "micro_batch",
        "dist_timeout_s"}
    assert set(not_fingerprinted(VisionParams)) == {
        "data_root", "download", "data_dir", "rows", "seeds", "checkpoint_every", "workers", "compile", "threads",
        "device", "out_dir", "viz_image", "viz_seed", "viz_max_tokens", "analysis_dir", "counts_dir", "micro_batch",
        "dist_timeout_s"}
    # the sections no track owns live beside RunSettings; the package exports them as before
    from kernattn import config

    assert (config.TrackingParams, config.ReportParams, config.BenchParams, config.BENCH_FAMILIES) == (
        common.TrackingParams, common.ReportParams, common.BenchParams, common.BENCH_FAMILIES)


INHERITED_BAD = [
    (lambda d: d["train"].update(device="gpu"), "", "train.device must be one of auto, cpu, cuda; got 'gpu'"),
    (lambda d: d["scales"]["tiny"]["lm"].update(threads=0), "scales.tiny -> ", "lm.threads must be > 0; got 0"),
    (lambda d: d["vision"].update(dtype="fp8"), "", "vision.dtype must be one of bfloat16, float32"),
    (lambda d: d["scales"]["micro"]["vision"].update(grad_clip=-1.0), "scales.controls -> ", "vision.grad_clip must be >= 0"),
    (lambda d: d["lm"].update(out_dri="x"), "", "unknown key 'lm.out_dri'; allowed: dataset, "),
]


@pytest.mark.parametrize("fn,where,needle", INHERITED_BAD, ids=[c[2].split(" ")[0] for c in INHERITED_BAD])
def test_inherited_fields_are_checked_like_the_others(tmp_path, fn, where, needle):
    path = write(tmp_path, mutate(fn))
    with pytest.raises(ParamsError) as err:
        load_params(path, "paper")
    assert str(err.value).startswith(f"{path}: {where}") and needle in str(err.value), str(err.value)
