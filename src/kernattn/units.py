"""The pipeline's units in one list: the three tracks, each study and the benchmarks.

Every unit is a package of the same shape:

    <package>/stages.py     stages(params) -> [Stage]: its part of the DAG, and the only owner
                            of where its files live; run_roots(params): the folders its runs lie
                            in (what `kernattn sync-mlflow` uploads); report_inputs(params) and
                            REPORT_SECTIONS: what the page reads of it
    <package>/report.py     its part of the report (OUTLINE, CLAIM_KINDS, section, claims),
                            rendered with <package>/report.html.j2
    <package>/<module>.py   its commands (`kernattn <command>`), listed below

UNITS is what the DAG (kernattn.dag.stages), the CLI (kernattn.cli), the page
(kernattn.page.build) and the MLflow sync (kernattn.tracking.sync) loop over: a new track or
study is its folder and its entry here. This module imports nothing of the package (the CLI
reads it at start-up, before it knows which command runs). The Snakefile's `studies` target is
the stages the units name in `targets`.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Part:
    """One part of the report page: its context's name in the templates (`key`), its module
    and templates, relative to the unit's package."""
    key: str
    module: str = "report"
    template: str = "report.html.j2"
    provenance: str | None = None


@dataclass(frozen=True)
class Unit:
    name: str                                  # also its templates' prefix on the page
    package: str
    title: str                                 # its heading in `kernattn --help`
    commands: dict[str, tuple[str, str]]       # command -> (module in the package, one-line help)
    parts: tuple[Part, ...]
    track: bool = False                        # a track: the main experiment's runs, with provenance
    targets: tuple[str, ...] = ()              # a study outside `all`: its stages `snakemake studies` asks for

    def module(self, name: str) -> ModuleType:
        """<package>.<name>, imported on demand (the DAG must not pay for torch)."""
        return importlib.import_module(f"{self.package}.{name}")

    def has_module(self, name: str) -> bool:
        """Whether the unit has a module <package>.<name> (e.g. cost: a unit that trains nothing has none)."""
        return importlib.util.find_spec(f"{self.package}.{name}") is not None


def _track(name: str, title: str, commands: dict[str, tuple[str, str]], provenance: str | None = None) -> Unit:
    return Unit(name, f"kernattn.tracks.{name}", title, commands, (Part(name, provenance=provenance),), track=True)


UNITS: tuple[Unit, ...] = (
    _track("char", "char track", {
        "prepare": ("corpus", "download or read the char track's text corpus (data.corpus), clean, split, tokenize"),
        "train": ("track", "train one run of the experiment matrix (resumes from its checkpoint)"),
        "cooldown": ("cooldown", "budget sweep: branch a run's cooldown at one of train.budgets from its kept checkpoint"),
        "analyze-corpus": ("analysis.corpus", "histogram the newline separations of the corpus (gpa-long, Figure 5b)"),
        "analyze-gpa": ("analysis.analyze_gpa", "read one GPA run's kernel banks: shapes, bump, sampled text, head removal"),
        "analyze-cope": ("analysis.cope", "read one CoPE run's gates: the share of each head's count on newlines"),
    }, provenance="provenance.html.j2"),  # the corpus and every run's provenance
    _track("lm", "LM track", {
        "prepare-lm": ("data", "LM track: documents -> BPE tokenizer -> BOS-delimited token streams"),
        "train-lm": ("track", "LM track: train one run (nanochat GPT, baseline or GKA-LM; resumable)"),
        "eval-lm": ("evaluate", "LM track: bits per byte and CORE-6 (GKA Table 7's six tasks) of one trained run"),
        "import-lm": ("import_nanochat", "LM track: a nanochat c7ba252 checkpoint -> an LM run folder eval-lm scores"),
        "export-lm": ("export_nanochat", "LM track: a finished LM run -> a nanochat c7ba252 checkpoint folder"),
    }),
    _track("vision", "vision track", {
        "prepare-vision": ("data", "prepare the vision data set (Fashion-MNIST idx, CIFAR, ImageFolder manifest)"),
        "train-vision": ("track", "train one DeiT-style ViT run (deit / gka / vlt x seed) with the DeiT recipe"),
        "count-vision": ("counts", "Tables 2/3/5: parameters, sigma scalars, FLOPs, checkpoint size of the paper's ViTs"),
        "analyze-vision": ("viz", "section 7 figures of one vision run: sigma, rollout, CLS and patch maps"),
    }),
    # The studies (kernattn.studies): length extrapolation is in the main DAG (every trained run
    # scored at 1x..8x its context); the others are outside it (`snakemake --cores all studies`).
    Unit("extrapolation", "kernattn.studies.extrapolation", "length extrapolation", {
        "extrapolate-char": ("extrapolate", "char track: every run's validation loss at 1x, 2x, 4x, 8x its training context, not retrained"),
        "extrapolate-lm": ("extrapolate", "LM track: every run's validation loss and BPB at 1x, 2x, 4x, 8x its training context, not retrained"),
    }, (Part("extrapolation"),)),
    Unit("wrap", "kernattn.studies.wrap", "line-wrap study", {
        "prepare-wrap": ("data", "line-wrap study: rewrapped and unwrapped corpora (same split and vocabulary), their histograms"),
        "train-wrap": ("train", "line-wrap study: train one GPA run on a counterfactual corpus (engine, resumable)"),
        "wrap-study": ("study", "line-wrap study: first-layer bump per corpus and seed, newline peaks, verdict"),
    }, (Part("study_wrap"),), targets=("wrap_study",)),
    Unit("gka_init", "kernattn.studies.gka_init", "GKA init study", {
        "train-gka-init": ("train", "GKA init study: train one GKA run with an init_sigma of the ablation (engine, resumable)"),
        "gka-init-study": ("study", "GKA init study: final loss per init, sigma over training, diagonal weight at start and end"),
    }, (Part("study_gka_init"),), targets=("gka_init_study",)),
    Unit("prune", "kernattn.studies.prune", "prune study", {
        "prune": ("run", "prune study: remove one GPA run's weak heads, fine-tune beside a no-removal control"),
        "prune-study": ("study", "prune study: every pruned run's losses and savings in one table"),
    }, (Part("study_prune"),), targets=("prune_study",)),
    Unit("bench", "kernattn.bench", "benchmarks", {
        "bench": ("stage", "throughput, peak memory and MFU of whole models per attention variant (Table 4)"),
        "bench-attention": ("attention", "time forward+backward and peak memory of every attention variant"),
        "bench-loader": ("loader", "images/s per CPU worker of the ViT input pipeline (timm/PIL vs torchvision v2 on uint8)"),
    }, (Part("bench_models"),)),
)
TRACKS: tuple[str, ...] = tuple(u.name for u in UNITS if u.track)  # also the order of their parts on the page


def unit(name: str) -> Unit:
    for u in UNITS:
        if u.name == name:
            return u
    raise ValueError(f"unknown unit {name!r}; the units are {', '.join(u.name for u in UNITS)}")


def commands() -> dict[str, tuple[str, str]]:
    """Every unit's commands: command -> (module, one-line help), in UNITS order."""
    return {name: (f"{u.package}.{module}", help_text) for u in UNITS for name, (module, help_text) in u.commands.items()}
