"""kernattn bench-loader (issue 24, item 6): the JPEGs it writes, both pipelines on them (same
output shape and dtype, the recipe's), the Fashion-MNIST path, the rows, the cores-per-GPU
rule; timings are never asserted, only recorded and positive."""

from __future__ import annotations

import pytest
import torch

from kernattn.bench import loader
from kernattn.bench.typed_csv import read_rows
from kernattn.cli import main
from kernattn.config import load_params

from .paths import FASHION, REPO

PARAMS = REPO / "params.yaml"
# torchvision 0.29 deprecates its JPEG decoder for TorchCodec's (README, Input pipeline): still the one measured
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


def test_jpegs_decode_to_their_sizes_and_both_pipelines_give_the_recipe_tensor(tmp_path):
    from PIL import Image
    from torchvision.io import decode_jpeg, read_file

    paths = loader.write_jpegs(tmp_path, 3)
    for path, (w, h) in zip(paths, loader.SIZES):
        assert Image.open(path).size == (w, h) and decode_jpeg(read_file(str(path))).shape == (3, h, w)
    vp = loader.recipe(load_params(PARAMS, "micro"))
    assert (vp.img_size, vp.dataset, vp.rand_augment_n > 0, vp.random_erasing > 0) == (224, "imagenet", True, True)
    from kernattn.tracks.vision.data import imagenet_transform, tensor_transforms

    pil = imagenet_transform(vp, True)(Image.open(paths[0]).convert("RGB"))
    tv2 = tensor_transforms(vp, True)(decode_jpeg(read_file(str(paths[0]))))
    assert pil.shape == tv2.shape == (3, 224, 224) and pil.dtype == tv2.dtype == torch.float32


def test_cores_per_gpu_rule():
    assert loader.cores_per_gpu(3323, 251.3) == 15  # 13.2 workers -> 14, + the training process
    assert loader.cores_per_gpu(1000, 250) == 5


def test_bench_loader_writes_a_row_per_pipeline(tmp_path, capsys):
    out = tmp_path / "loader.csv"
    assert main(["bench-loader", "--params", str(PARAMS), "--scale", "micro", "--jpegs", "4", "--reps", "1",
                 "--fashion", str(FASHION), "--out", str(out)]) == 0
    rows = read_rows(out, loader.SCHEMA)
    assert [(r["pipeline"], r["img_size"]) for r in rows] == [("timm-pil", 224), ("tv2-uint8", 224), ("mixup", 224),
                                                              ("tv2-uint8", 28)]
    assert all(r["images"] == 4 and r["images_per_s"] > 0 and r["cpu_seconds"] > 0 and r["threads"] == 1 for r in rows)
    assert "img/s per worker" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [(["--jpegs", "1"], "--jpegs 1 --reps 2"),
                                         (["--fashion", "/nonexistent"], "--fashion /nonexistent: no such folder")])
def test_bench_loader_bad_arguments_are_one_line(argv, words, capsys, tmp_path):
    assert main(["bench-loader", "--params", str(PARAMS), "--out", str(tmp_path / "x.csv"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err


def test_the_report_shows_a_loader_csv(tmp_path):
    from kernattn.bench import report_attention as bench_attention

    assert tuple(loader.SCHEMA) == bench_attention.LOADER_COLUMNS
    main(["bench-loader", "--params", str(PARAMS), "--jpegs", "2", "--reps", "1", "--out", str(tmp_path / "loader-x.csv")])
    [entry] = bench_attention.tables([tmp_path])
    assert entry["kind"] == "loader" and entry["note"] == ""
    table = entry["csv"]["bench-loader-x.csv"]
    assert list(table.index) == ["timm-pil", "tv2-uint8", "mixup"] and (table["images_per_s"] > 0).all()
