"""The `lm:` section of params.yaml: the nanochat-style language-model track (gka-paper section 5).

One dataclass of flat keys, the runtime ones (device, dtype, ...) inherited from
common.RunSettings (the loader validates every key, type and range, deep-merges the scales
and runs `check` whenever params are loaded). Paper defaults reproduce the depth-20 runs of gka-paper (Tables 6-8); the tiny and
micro scales shrink depth, context, vocabulary, steps and CORE-6 (GKA Table 7 tasks).

The model and schedule defaults are nanochat's at NANOCHAT_COMMIT, the last commit on its
master at or before 2026-02-28, the date the GKA paper cites nanochat as accessed (gka-paper,
ref. 13). What nanochat changed later (RoPE base 100000 and a QK gain in 6ed7d1d, 2026-03-09;
gain 1.2 in a825e63, 2026-03-14) are options, each field's comment says which.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ParamsError
from .common import RunSettings, run_default
from .rows import MATCH as MATCHED
from .rows import Row, check_lag_table, check_rows
from .schema import NOFP, fraction, nonneg, positive

NANOCHAT_COMMIT = "c7ba25214276d165eeefca7cb2060587975db189"  # 2026-02-20, "docs: fix typos in experiment log (#547)"
NANOCHAT_COMMIT_DATE = "2026-02-20"
ALIASES = {"base": ("softmax", {})}  # the LM's name for nanochat's attention (a row's variant)
# nanochat's flavour, for the options a row does not set (only those the variant has), with
# rope_base and qk_gain from lm (lm_defaults): softmax is then nanochat's attention exactly.
LM_DEFAULTS = {"position": "rope", "rope": True, "qk_norm": True}


def lm_defaults(rope_base: float, qk_gain: float) -> dict:
    """The attention options a row's variant takes when the row leaves them out."""
    return LM_DEFAULTS | {"rope_base": rope_base, "qk_gain": qk_gain}


def _unit_interval(v) -> str | None:
    return None if 0 <= v <= 1 else "must be between 0 and 1"


OPTIMIZERS = ("muon_adamw", "adamw")
CORE_TASKS = ("hellaswag_zeroshot", "copa", "openbook_qa", "lambada_openai", "winograd", "winogrande")


@dataclass(frozen=True)
class LMParams(RunSettings):
    """The LM track; the runtime fields (device, dtype, grad_clip, ...) are RunSettings'."""

    # ---- data: FineWeb-Edu parquet shards (downloaded) or a local jsonl(.gz) mirror

    # The documents: a catalogue data set (kernattn/datasets/catalogue.yaml): a template one
    # (fineweb-edu-shards, nanochat's parquet shards) or a jsonl(.gz) of {"text": ...} documents.
    dataset: str | None = field(default="fineweb-edu-shards", metadata=NOFP)
    shards: int = field(default=240, metadata=positive("training shards (the last one is validation)"))
    # Expected sha256 per shard file, "index: hex" (empty: recorded in the manifest, not checked).
    shard_sha256: dict[str, str] = field(default_factory=dict)
    # A local jsonl(.gz) of {"text": ...} documents used instead of downloading.
    mirror: str | None = field(default=None, metadata=NOFP)
    val_docs: int = field(default=100, metadata=positive("mirror: the last val_docs documents are validation"))
    # At most this many documents (null: all): of a jsonl, the first max_docs before the
    # validation split; of the shards, the first max_docs training documents.
    max_docs: int | None = field(default=None, metadata=positive())
    # ---- tokenizer

    # The BPE vocabulary, its special tokens included (at most 65,536: the token streams are uint16).
    vocab_size: int = field(default=32768, metadata=positive())
    tokenizer_chars: int = field(default=2_000_000_000, metadata=positive("characters of training text the BPE sees"))
    # Folder of the prepared data (train.npy, val.npy, the tokenizer's files, meta.json); {scale} filled in.
    data_dir: str = "results/{scale}/lm/data"
    # ---- model (nanochat GPT)

    # Transformer blocks: the one size knob (model_dim = aspect_ratio x depth; paper: 20).
    depth: int = field(default=20, metadata=positive())
    aspect_ratio: int = field(default=64, metadata=positive("model_dim = aspect_ratio x depth"))
    # Channels per attention head: model_dim / head_dim heads (even, for RoPE; nanochat: 128).
    head_dim: int = field(default=128, metadata=positive())
    # Tokens per training sequence (nanochat: 2048).
    context: int = field(default=2048, metadata=positive())
    # The layers' attention windows: S (short_window keys) or L (the whole context), tiled over
    # the layers, the last layer always L (nanochat: SSSL).
    window_pattern: str = "SSSL"
    # Keys a query of an S layer sees, itself included; None: context // 2 + 1, nanochat's
    # window (context // 2, 0): context // 2 keys before the query and the query.
    short_window: int | None = field(default=None, metadata=positive())
    # nanochat's value embeddings (a vocab x dim table added to v on alternating layers through a
    # per-head gate), on variants with a value projection only (not gka, not valueless).
    value_embeds: bool = True
    # nanochat c7ba252: 10000; 100000 from 6ed7d1d (2026-03-09).
    rope_base: float = field(default=10000.0, metadata=positive())
    # q and k times qk_gain after their RMS norm; 1.0: no gain (c7ba252). 1.15 in 6ed7d1d, 1.2 in a825e63.
    qk_gain: float = field(default=1.0, metadata=positive("q and k are multiplied by it after the QK norm"))
    # Initial value of every layer's residual scalar a in x <- a x + b x0 (x0 the embedded
    # input; c7ba252: 1.0; per-layer ramp 1.15->1.05 from a825e63).
    resid_lambda_init: float = field(default=1.0, metadata=positive())
    # Initial value of every layer's scalar b on the embedded input x0 in x <- a x + b x0
    # (c7ba252: 0.1; 0.0 before the merge c88bbf8, 2026-01-27; per-layer ramp 0.20->0.05 from a825e63).
    x0_lambda_init: float = field(default=0.1, metadata=nonneg())
    # Logit soft-cap: logits = softcap x tanh(z / softcap) (nanochat: 15).
    softcap: float = field(default=15.0, metadata=positive())
    # RoPE cos/sin tables stored in bfloat16 before they multiply q and k (nanochat c7ba252
    # does; false: in the activations' dtype, which differs from nanochat in float32).
    rope_bf16: bool = True
    # ---- the runs

    # The rows (config.rows; a row's `compute` sets its length), each trained at every seed. Not
    # in a run's fingerprint as a whole: a run records its own row and planned steps instead.
    rows: tuple[Row, ...] = field(default=(), metadata=NOFP)
    # The seeds every row trains unless it names its own.
    seeds: tuple[int, ...] = (0,)
    # ---- training (a row without `compute` trains `steps`)
    batch_size: int = field(default=32, metadata=positive("sequences per micro-batch"))
    # Micro-batches per optimizer step: a step is batch_size x grad_accum sequences whatever the
    # ranks (32 x 16 x 2048 = 2^20 tokens a step: the batch nanochat's rule picks at depth 20).
    grad_accum: int = field(default=16, metadata=positive())
    # Steps of a row without compute; None: nanochat's rule, param_data_ratio x the row's scaling params tokens.
    steps: int | None = field(default=None, metadata=positive())
    # nanochat's param:data rule, training tokens = param_data_ratio x the model's scaling
    # parameters: it sets the steps of a row without compute when lm.steps is null.
    param_data_ratio: float = field(default=10.5, metadata=positive())
    # muon_adamw: nanochat c7ba252's MuonAdamW with its lrs and scalings (tracks/lm/optim.py);
    # adamw: one AdamW at lr, betas (0.9, 0.95), weight_decay on the Linear weights.
    optimizer: str = field(default="muon_adamw", metadata={"check": lambda v: None if v in OPTIMIZERS else
                                                             f"must be one of {', '.join(OPTIMIZERS)}"})
    # adamw: its one lr; muon_adamw: the lr of the attention's own parameters (banks, tables,
    # GKA's log sigma; nanochat has none), not scaled with the batch.
    lr: float = field(default=3e-3, metadata=positive())
    # muon_adamw (base_train.py's defaults at c7ba252; all x sqrt(tokens per step / 2^19), the
    # AdamW embedding and unembedding lrs also x (model_dim / 768)^-1/2):
    matrix_lr: float = field(default=0.02, metadata=positive("Muon lr of the blocks' matrices"))
    embedding_lr: float = field(default=0.3, metadata=positive("AdamW lr of wte and the value embeddings"))
    unembedding_lr: float = field(default=0.004, metadata=positive("AdamW lr of lm_head"))
    scalar_lr: float = field(default=0.5, metadata=positive("AdamW lr of x0_lambdas (x 0.01: resid_lambdas)"))
    adam_beta1: float = field(default=0.8, metadata=fraction("AdamW beta1 (x0_lambdas: 0.96)"))
    adam_beta2: float = field(default=0.95, metadata=fraction("AdamW beta2"))
    # Fraction of a run's steps of linear lr warm-up, round(warmup_frac x steps) (nanochat: 0).
    warmup_frac: float = field(default=0.0, metadata={"check": _unit_interval})
    # Fraction of a run's last steps over which every lr falls linearly to min_lr_ratio x its peak;
    # nanochat c7ba252: 0.5 (0.4 from ae0bf52 to 3c3a3d7, 2026-01; 0.65 from 6ed7d1d).
    warmdown_frac: float = field(default=0.5, metadata={"check": _unit_interval})
    # Every lr at the end of the warmdown, as a fraction of its peak (nanochat: 0).
    min_lr_ratio: float = field(default=0.0, metadata=nonneg())
    # muon_adamw: Muon's cautious weight decay (nanochat 0.2, scaled by batch and horizon, decaying
    # linearly to 0); adamw: AdamW's decoupled decay of the Linear weights.
    weight_decay: float = field(default=0.2, metadata=nonneg())
    grad_clip: float = run_default("grad_clip", 0.0)  # none, as nanochat
    # Steps between validation evaluations (also at step 0 and at the end).
    eval_every: int = field(default=250, metadata=positive(**NOFP))
    out_dir: str = run_default("out_dir", "results/{scale}/lm/runs")
    # ---- evaluation
    # nanochat c7ba252's base_eval: 40 x 524,288 tokens per split (80 x from 324e69c).
    bpb_tokens: int = field(default=20_971_520, metadata=positive("tokens scored per split for BPB", **NOFP))
    core_items: int | None = field(default=None, metadata=positive("first N items of each task (None: all)", **NOFP))
    # Few-shot examples per task (DCLM's CORE: 0 for all six of the paper's subset).
    core_fewshot: dict[str, int] = field(default_factory=lambda: {t: 0 for t in CORE_TASKS}, metadata=NOFP)
    # Seed of the CORE few-shot examples' choice (item i's: random.Random(core_seed + i)).
    core_seed: int = field(default=1234, metadata=nonneg(**NOFP))
    # The CORE task files: a catalogue data set, or your own folder of the same files (eval_dir wins).
    eval_set: str | None = field(default="core-tasks", metadata=NOFP)
    # Your own folder of the CORE task files, read instead of lm.eval_set (null: the catalogue's).
    eval_dir: str | None = field(default=None, metadata=NOFP)
    # MLflow experiment of the LM track's runs ({scale} filled in).
    experiment: str = field(default="kernattn-lm-{scale}", metadata=NOFP)

    def model_dim(self) -> int:
        return self.aspect_ratio * self.depth

    def defaults(self) -> dict:
        """The attention options a row's variant takes when the row leaves them out."""
        return lm_defaults(self.rope_base, self.qk_gain)


def layer_windows(pattern: str, depth: int, context: int, short: int | None) -> list[int | None]:
    """Per layer: the number of keys a query may see (itself included), None for all.

    The pattern is tiled over the layers and the last layer is always L. S defaults to
    nanochat's short window: flash-attention's window_size (context // 2, 0) lets a query see
    the context // 2 keys before it and itself, context // 2 + 1 keys (1,025 at 2048)."""
    short = context // 2 + 1 if short is None else short
    chars = [pattern.upper()[i % len(pattern)] for i in range(depth)]
    chars[-1] = "L"
    return [None if c == "L" or short >= context else short for c in chars]


def row_check(lm: LMParams):
    """What the GPT cannot take of a row, known before building it: a window where the variant
    has no window form, a lag table shorter than the context (AttentionConfigError, one line)."""
    windows = [w for w in layer_windows(lm.window_pattern, lm.depth, lm.context, lm.short_window) if w]

    def check(name: str, options: dict) -> None:
        from ..attention import AttentionConfigError, make_options

        if windows and not make_options(name, options).allows_window(True):
            raise AttentionConfigError(
                f"attention {name!r} with {options} has no sliding-window form, and lm.window_pattern="
                f"{lm.window_pattern!r} gives layers a window of {windows[0]}; use window_pattern L or another variant")
        check_lag_table(options, lm.context, "lm.context")
    return check


def check(lm: LMParams, where: str) -> None:
    """The cross-key checks the per-key schema cannot express; `where` names file and scale."""
    problems = []
    dim = lm.model_dim()
    if dim % lm.head_dim:
        problems.append(f".head_dim={lm.head_dim} must divide model_dim = aspect_ratio x depth = {dim}")
    if lm.head_dim % 2:
        problems.append(f".head_dim={lm.head_dim} must be even (RoPE)")
    if not lm.window_pattern or set(lm.window_pattern.upper()) - {"S", "L"}:
        problems.append(f".window_pattern={lm.window_pattern!r} must be a non-empty string of S and L")
    for task in lm.core_fewshot:
        if task not in CORE_TASKS:
            problems.append(f".core_fewshot has unknown task {task!r}; tasks: {', '.join(CORE_TASKS)}")
    if lm.vocab_size > 65535 + 1:
        problems.append(f".vocab_size={lm.vocab_size} must be <= 65536 (token streams are uint16)")
    if lm.vocab_size < 256 + 16:
        problems.append(f".vocab_size={lm.vocab_size} must be >= 272 (256 bytes + special tokens)")
    if not lm.seeds:
        problems.append(".seeds is empty; give at least one seed")
    if lm.warmup_frac + lm.warmdown_frac > 1:
        problems.append(f".warmup_frac={lm.warmup_frac} + warmdown_frac={lm.warmdown_frac} must be <= 1 "
                        f"(the warmup and the warmdown would overlap)")
    if problems:
        raise ParamsError(f"{where}lm{problems[0]}")
    check_rows(lm.rows, "lm.rows", where, ALIASES, lm.defaults(), compute=True, track_check=row_check(lm))
