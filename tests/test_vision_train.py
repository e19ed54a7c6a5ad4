"""The vision stages at micro scale: Fashion-MNIST preparation from the idx files (sha256
pinned), one-line errors, training with EMA and the final files, the section 7 figures and
the report section; every registry variant as a row of vision.rows trains, resumes and
evaluates, or (a 1-D position scheme) stops the params load with one line (parametrised over
the registry), and issue 15's row nwg trains with --run nwg-s0. Bit-exact resume, SIGTERM and
divergence of train-vision are test_engine.py's, shared by every track."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from kernattn import attention, cli
from kernattn.config import ParamsError, load_params
from kernattn.fetch import DataError
from kernattn.tracks.vision import data as vdata
from kernattn.yaml_text import safe_dump, safe_load
from tests import paths

REPO = Path(__file__).resolve().parents[1]
# the shared data beside the checkout (a worktree's parent may not hold it: then the workspace's)
FASHION = paths.FASHION


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def make_params(folder: Path, **vision) -> Path:
    doc = safe_load((REPO / "params.yaml").read_text())
    doc["scale"] = "micro"
    v = doc["scales"]["micro"]["vision"]
    v.update({"data_root": str(FASHION), "data_dir": str(folder / "data"), "out_dir": str(folder / "runs"),
              "analysis_dir": str(folder / "analysis"), "counts_dir": str(folder / "counts"), **vision})
    doc["scales"]["micro"]["tracking"] = {"enabled": False}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "params.yaml").write_text(safe_dump(doc))
    return folder / "params.yaml"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("vision")
    params = make_params(folder)
    assert cli.main(["prepare-vision", "--params", str(params)]) == 0
    return params


def test_prepare_reads_the_idx_files(prepared):
    vp = load_params(prepared).vision
    meta = vdata.read_meta(vp)
    assert (meta["n_train"], meta["n_val"], meta["num_classes"], meta["in_chans"]) == (96, 32, 10, 1)
    train = vdata.load_split(vp, "train")
    assert train["images"].dtype == torch.uint8 and train["images"].shape == (96, 1, 28, 28)
    # the first training image of Fashion-MNIST is an ankle boot (label 9), the first test image too
    assert int(train["labels"][0]) == 9 and int(vdata.load_split(vp, "val")["labels"][0]) == 9
    assert set(meta["sha256"].values()) == set(vdata.FASHION_FILES.values())


def test_parse_idx_and_its_errors():
    body = bytes(range(6))
    idx = b"\x00\x00\x08\x02" + (2).to_bytes(4, "big") + (3).to_bytes(4, "big") + body
    assert vdata.parse_idx(idx, "x").tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(DataError, match="truncated"):
        vdata.parse_idx(idx[:-1], "x")
    with pytest.raises(DataError, match="not an unsigned-byte IDX"):
        vdata.parse_idx(b"\x00\x00\x0d\x01" + idx[4:], "x")


def test_a_file_with_the_wrong_content_is_refused(tmp_path):
    for name in vdata.FASHION_FILES:
        (tmp_path / name).write_bytes(gzip.compress((FASHION / name).read_bytes()[:10]))  # not the real content
    with pytest.raises(DataError, match="content sha256"):
        vdata.fashion_file(str(tmp_path), "train-labels-idx1-ubyte.gz")


def test_errors_are_one_line(tmp_path, capsys):
    empty = tmp_path / "imagenet"
    (empty / "train").mkdir(parents=True)
    (empty / "val").mkdir()
    params = make_params(tmp_path / "p", dataset="imagenet", data_root=str(empty))
    assert cli.main(["prepare-vision", "--params", str(params)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no class folders" in err and not (tmp_path / "p" / "data").exists()
    with pytest.raises(ParamsError, match=r"vision.rows\[1\] \(v\): unknown attention variant 'vit'"):
        load_params(make_params(tmp_path / "q", rows=[{"name": "deit", "variant": "deit"}, {"name": "v", "variant": "vit"}]))
    assert cli.main(["train-vision", "--params", str(make_params(tmp_path / "r")), "--run", "gka-s7"]) == 2
    assert "no vision run 'gka-s7'" in capsys.readouterr().err


def _state(run_dir: Path) -> dict:
    return torch.load(run_dir / "ckpt.pt", weights_only=True)


def test_train_analyze_and_report(prepared, tmp_path):
    params = str(prepared)
    vp = load_params(prepared).vision
    assert cli.main(["train-vision", "--params", params, "--run", "gka-s0"]) == 0
    run_dir = Path(vp.out_dir) / "gka-s0"
    final = json.loads((run_dir / "final.json").read_text())
    assert final["steps"] == 3 and final["variant"] == "gka" and final["attention"] == "gka" and final["row"] == "gka"
    assert 0 <= final["top1"] <= 100 and 0 <= final["top1_ema"] <= 100
    assert len(final["sigma"]) == 2 and len(final["sigma"][0]) == 2
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if x["split"] == "val"] == [0, 3]
    full = _state(run_dir)
    # EMA weights differ from the raw ones after training
    assert not torch.equal(full["ema"]["blocks.0.attn.inner.log_sigma"], full["model"]["blocks.0.attn.inner.log_sigma"])

    # section 7 from the trained model, and the report section
    assert cli.main(["analyze-vision", "--params", params, "--run", "gka-s0"]) == 0
    out = Path(vp.analysis_dir) / "gka-s0"
    summary = json.loads((out / "summary.json").read_text())
    assert {"sigma.png", "rollout.png", "cls_layer1.png", "cls_layer2.png", "patch_to_patch.png", "evolution.png",
            "diag_masked.png"} == set(summary["figures"])
    assert summary["sigma"] == final["sigma"] and len(summary["rollout"]["0.9"]) == 4
    assert cli.main(["count-vision", "--params", params]) == 0
    from kernattn.report.part import ReportContext
    from kernattn.tracks.vision import report as rv

    report = ReportContext(load_params(prepared), str(prepared), tmp_path / "report", papers={})
    report.assets.mkdir(parents=True)
    report.tables.mkdir()
    ctx = rv.section(report)
    assert [r["model"] for r in ctx["counts_table"]][:2] == ["DeiT-Ti", "GKA-Ti"]
    assert all(r["params_ok"] and r["flops_ok"] for r in ctx["counts_table"])
    assert [r["row"] for r in ctx["top1"]] == [r.name for r in vp.rows]  # every row, trained or not
    gka = next(r for r in ctx["top1"] if r["variant"] == "gka")
    assert gka["n_seeds"] == 1 and gka["top1_ema_mean"] == final["top1_ema"]
    # deit and vlt were not trained here: listed as missing with the command that makes them
    assert any("--run deit-s0" in cmd for _, cmd in ctx["missing"])
    assert (tmp_path / "report" / "assets" / "vision" / "gka-s0" / "rollout.png").is_file()
    _training_claims(report, ctx, final)


def _training_claims(report, section: dict, final: dict) -> None:
    """Issue 25's training claims read from the real run: its metrics.jsonl (stability; the
    learning rates for the sigma gate) and final.json's sigma."""
    import dataclasses

    from kernattn.page import build
    from kernattn.tracks.vision import report as rv

    got = {r.claim["id"]: r for r in rv.claims(dataclasses.replace(report, papers=build.load_paper_numbers()), section)}
    stable = got["003-vit-stable"]
    # a micro run of a few steps and one seed is too short to read (issue 37)
    assert stable.verdict.startswith("not judged (too short: ") and "100 needed" in stable.verdict, stable.verdict
    sigma = got["003-vit-sigma-heads"]
    ratio = sorted(max(x) / min(x) for x in final["sigma"])
    assert sigma.estimate == pytest.approx(sum(ratio) / 2)  # the median of two layers
    # one seed: withheld by the first failing gate (sigma's travel, or the seed count)
    assert sigma.verdict.startswith("not judged ("), sigma.verdict


def test_imagefolder_with_the_full_deit_recipe(tmp_path):
    """The paper scale's path on a small ImageFolder: timm's PIL transforms with RandAugment and
    random erasing, Mixup/CutMix with SoftTargetCrossEntropy, repeated augmentation, drop path."""
    from PIL import Image

    root = tmp_path / "imagenet"
    gen = torch.Generator().manual_seed(0)
    for split, n in (("train", 8), ("val", 4)):
        for cls in ("cat", "dog"):
            (root / split / cls).mkdir(parents=True)
            for i in range(n // 2):
                arr = torch.randint(0, 256, (40, 48, 3), generator=gen, dtype=torch.uint8).numpy()
                Image.fromarray(arr).save(root / split / cls / f"{i}.png")
    params = make_params(tmp_path / "p", dataset="imagenet", data_root=str(root), img_size=32, patch_size=16,
                         batch_size=4, lr_batch=4, epochs=1, mixup=0.8, cutmix=1.0, rand_augment_n=2,
                         random_erasing=0.25, repeated_aug=3, crop_scale_min=0.08, drop_path=0.1,
                         label_smoothing=0.1)
    assert cli.main(["prepare-vision", "--params", str(params)]) == 0
    meta = json.loads((tmp_path / "p" / "data" / "meta.json").read_text())
    assert (meta["n_train"], meta["n_val"], meta["classes"]) == (8, 4, ["cat", "dog"])
    assert cli.main(["train-vision", "--params", str(params), "--run", "vlt-s0"]) == 0
    final = json.loads((tmp_path / "p" / "runs" / "vlt-s0" / "final.json").read_text())
    assert final["steps"] == 2 and final["n_val"] == 4


# issue 15's "done when" row: a Nadaraya-Watson Gaussian kernel in the ViT
NWG = {"name": "nwg", "variant": "nw", "options": {"kernel": "gaussian"}}
VARIANT_ROWS = [NWG, *({"name": f"v_{name}", "variant": name} for name in attention.available())]


@pytest.mark.parametrize("row", VARIANT_ROWS, ids=lambda r: r["name"])
def test_every_registry_variant_trains_resumes_and_evaluates(prepared, tmp_path, row, capsys):
    """A row of each registry variant (vision defaults for the options it leaves out): one
    that is causal only or applies a 1-D position scheme fails the params load in one line
    naming vision.rows[0] and the fix; every other trains 1 of 3 steps, resumes, finishes and evaluates (top-1)."""
    from kernattn.tracks.vision.model import ViTSpec

    name, options = ViTSpec(row["variant"], attention_options=tuple(row.get("options", {}).items())).attention
    params = make_params(tmp_path, rows=[row], data_dir=str(load_params(prepared).vision.data_dir))
    run_id = f"{row['name']}-s0"
    args = ["train-vision", "--params", str(params), "--run", run_id, "--no-progress"]
    if not attention.make_options(name, options).allows_bidirectional():  # FIRE, FoX, CoPE
        capsys.readouterr()
        assert cli.main(args) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"vision.rows[0] ({row['name']}): vision attention" in err and "causal only" in err
        return
    probe = attention.build(name, d_model=32, n_head=2, causal=False, **options)
    if probe.position_scheme() is not None:
        capsys.readouterr()
        assert cli.main(args) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"vision.rows[0] ({row['name']}): vision attention" in err and "raster" in err
        return
    assert cli.main([*args, "--stop-after", "1"]) == 0
    capsys.readouterr()
    assert cli.main(args) == 0 and "resuming at step 1" in capsys.readouterr().out
    final = json.loads((tmp_path / "runs" / run_id / "final.json").read_text())
    assert final["steps"] == 3 and final["row"] == row["name"] and final["attention"] == name
    assert final["options"] == row.get("options", {}) and 0 <= final["top1"] <= 100 and final["val_loss"] > 0
