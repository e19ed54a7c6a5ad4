"""A finished LM run as a model of EleutherAI's lm-evaluation-harness (the `lm` extra pins it).

    kernattn lm-eval run --model kernattn --model_args run=results/tiny/lm/runs/base-s0 --tasks lambada_openai
    # or, in Python: import kernattn.tracks.lm.harness, then lm_eval.simple_evaluate(model="kernattn", ...)

The harness finds models through its own registry (lm_eval.api.registry); importing this module
registers `kernattn` there. lm-eval 0.4 discovers no models from other packages: its own
`lm_eval --model kernattn` finds this one when its --tasks is a folder `kernattn lm-eval tasks`
wrote (the folder's function module imports this one); `kernattn lm-eval run` is that command
with the model registered first, for any task (every argument is the harness's).

The model reads the run folder alone: config.json (the LM section it trained with, its variant
and options, its plugins), model.pt, and the tokenizer of its lm.data_dir (found from the folder
the run lies under; `data_dir=` overrides). Scoring follows the harness's causal-LM convention
(its HF model's): every sequence starts with BOS (nanochat's document delimiter, as the CORE-6
evaluator's prompts do), the context is cut from the left to the model's context, and a
continuation's log-likelihood is the sum of its tokens' log-probabilities, float32 logits, with
"is greedy" true when argmax reproduces every token. Rolling log-likelihood scores disjoint
windows of the context length; generation is greedy, stopped at any `until` string or
max_gen_toks."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from ...errors import UsageError
from . import tokenizer as tok

NAME = "kernattn"


def _data_dir(folder: Path, data_dir: str) -> Path:
    """lm.data_dir of the run (a path relative to the checkout that trained it): the first folder
    above the run folder that holds it, else as given (relative to the current folder)."""
    given = Path(data_dir)
    if given.is_absolute():
        return given
    for root in folder.resolve().parents:
        if (root / given).is_dir():
            return root / given
    return given


def load_run(folder: str | Path, data_dir: str | None = None, device: str = "cpu"):
    """(model in eval mode, tokenizer, context) of a finished LM run folder."""
    from ...attention import plugins
    from .model import GPT, GPTConfig

    folder = Path(folder)
    config_path, weights = folder / "config.json", folder / "model.pt"
    if not config_path.is_file() or not weights.is_file():
        raise UsageError(f"{folder}: no finished LM run (config.json, model.pt); train it with `kernattn train-lm`")
    cfg = json.loads(config_path.read_text())
    if cfg.get("track") != "lm":
        raise UsageError(f"{config_path}: a {cfg.get('track')!r} run, not an LM run (track 'lm')")
    lm, run = SimpleNamespace(**cfg["lm"]), cfg["run"]
    plugins.load([p["source"] for p in cfg.get("plugins") or []])
    enc = tok.load(data_dir or _data_dir(folder, lm.data_dir))
    model = GPT(GPTConfig.from_params(lm, enc.n_vocab, run["variant"], run["options"]))
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    return model.to(device).eval(), enc, int(lm.context)


def _device(name: str | None) -> torch.device:
    """The harness passes its own default ("cuda") unless told --device: as its HF model does, a
    machine without CUDA scores on the CPU, and says so."""
    if not name or name == "auto" or (str(name).startswith("cuda") and not torch.cuda.is_available()):
        if name and name != "auto":
            print(f"kernattn lm-eval: no CUDA device here; scoring on the CPU (asked: {name})", file=sys.stderr)
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@register_model(NAME)
class KernattnLM(TemplateLM):
    """lm-eval's model for a kernattn LM run folder (module docstring)."""

    def __init__(self, run: str, device: str = "cpu", batch_size: int | str = 8, max_gen_toks: int = 64,
                 data_dir: str | None = None, **_ignored) -> None:
        super().__init__()
        self.run_folder = Path(run)
        self._device = _device(device)
        device = str(self._device)
        self.model, self.enc, self.context = load_run(run, data_dir, device)
        self.bos = tok.bos_id(self.enc)
        self.batch_size = int(batch_size) if str(batch_size).isdigit() else 8
        self.max_gen_toks = int(max_gen_toks)

    # --------------------------------------------------------------- the harness's interface
    @property
    def eot_token_id(self) -> int:
        return self.bos

    @property
    def prefix_token_id(self) -> int:
        return self.bos

    @property
    def tokenizer_name(self) -> str:
        return f"kernattn:{self.run_folder}"

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        ids = self.enc.encode_ordinary(string)
        return ids if add_special_tokens is False else [self.bos, *ids]

    def tok_decode(self, ids: list[int]) -> str:
        return self.enc.decode(ids)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        out: list[tuple[float, bool] | None] = [None] * len(requests)
        order = sorted(range(len(requests)), key=lambda i: -len(requests[i][1]) - len(requests[i][2]))
        for start in range(0, len(order), self.batch_size):
            batch = order[start:start + self.batch_size]
            pairs = [(requests[i][1], requests[i][2]) for i in batch]
            for i, result in zip(batch, self.score_continuations(pairs)):
                out[i] = result
        return out  # type: ignore[return-value]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        totals = []
        for (text,) in (r.args for r in requests):
            windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
                self.tok_encode(text, add_special_tokens=False), self.bos, self.context, 1)]
            scored = self._loglikelihood_tokens([(None, ctx, cont) for ctx, cont in windows])
            totals.append(sum(logprob for logprob, _ in scored))
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        return [self.greedy(context, kwargs) for context, kwargs in (r.args for r in requests)]

    # --------------------------------------------------------------- scoring
    @torch.no_grad()
    def logits(self, rows: list[list[int]]) -> torch.Tensor:
        """float32 logits [B, N, V] of token rows (right-padded with BOS; a row's own positions only
        are read: the model is causal)."""
        width = max(map(len, rows))
        x = torch.tensor([r + [self.bos] * (width - len(r)) for r in rows], device=self._device)
        return self.model(x).float()

    def score_continuations(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(sum of log-probabilities, every token the argmax) of each continuation given its
        context, the pair cut from the left to context + 1 tokens (the last one is only predicted)."""
        rows, spans = [], []
        for ctx, cont in pairs:
            whole = (ctx + cont)[-(self.context + 1):]
            n = min(len(cont), len(whole) - 1)
            rows.append(whole[:-1])
            spans.append((len(whole) - 1 - n, whole[len(whole) - n:]))
        logprobs = F.log_softmax(self.logits(rows), dim=-1)
        out = []
        for row, (first, targets) in enumerate(spans):
            lp = logprobs[row, first:first + len(targets)]
            want = torch.tensor(targets, device=lp.device)
            picked = lp.gather(-1, want[:, None])[:, 0]
            out.append((float(picked.double().sum()), bool((lp.argmax(-1) == want).all())))
        return out

    def greedy(self, context: str, kwargs: dict) -> str:
        until = kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        limit = int(kwargs.get("max_gen_toks", self.max_gen_toks))
        ids, new = self.tok_encode(context), []
        for _ in range(limit):
            step = int(self.logits([(ids + new)[-self.context:]])[0, -1].argmax())
            if step == self.bos:
                break
            new.append(step)
            text = self.tok_decode(new)
            cut = min((text.find(u) for u in until if u and u in text), default=-1)
            if cut >= 0:
                return text[:cut]
        return self.tok_decode(new)
