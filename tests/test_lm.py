"""LM track units: tokenizer, bits per byte, CORE task kinds, sliding windows, depth-20 counts."""

from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path

import pytest
import torch

from kernattn.attention.fused import attend
from kernattn.config import ParamsError, load_params
from kernattn.tracks.lm import core_eval as core, flops, tokenizer as tok
from kernattn.tracks.lm.bpb import bits_per_byte, evaluate_bpb
from kernattn.tracks.lm.data import DataError, read_jsonl_docs
from kernattn.tracks.lm.model import GPT, Attention, GPTConfig, build_model, layer_windows
from tests import paths

REPO = Path(__file__).resolve().parents[1]
C4 = paths.C4
EVAL = paths.EVAL


@pytest.fixture(scope="module")
def enc():
    docs = [json.loads(line)["text"] for line in gzip.open(C4, "rt")][:200]
    return tok.train_bpe(docs + ["héllo wörld — 日本語 🙂 naïve café"], 600)


# ----------------------------------------------------------------------------- tokenizer
def _random_text(rng: random.Random, n: int) -> str:
    """Code points from every plane that has text (surrogates excluded), plus ASCII runs."""
    ranges = [(0x0, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFF), (0x10000, 0x10FFFF)]
    out = []
    for _ in range(n):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)) if rng.random() < 0.7 else rng.choice(["the ", "123456", " \n", "<|bos|>"]))
    return "".join(out)


def test_tokenizer_round_trip_on_arbitrary_unicode(enc, tmp_path):
    tok.save(enc, tmp_path)
    loaded = tok.load(tmp_path)
    table = tok.load_token_bytes(tmp_path)
    rng = random.Random(0)
    for _ in range(200):
        text = _random_text(rng, rng.randint(0, 60))
        ids = enc.encode_ordinary(text)
        assert enc.decode(ids) == text
        assert loaded.encode_ordinary(text) == ids
        # the BPB denominator: the tokens' byte lengths add up to the text's UTF-8 length
        assert int(table[ids].sum()) == len(text.encode("utf-8"))
    assert enc.n_vocab == 600 and tok.bos_id(enc) == 600 - len(tok.SPECIAL_TOKENS)


def test_tokenizer_split_pattern_digits_in_groups_of_two(enc):
    pieces = [enc.decode([i]) for i in enc.encode_ordinary("12345")]
    assert all(len(p) <= 2 for p in pieces) and "".join(pieces) == "12345"


def test_documents_are_bos_delimited(enc):
    docs = ["first doc", "second <|bos|> doc"]
    ids = tok.encode_docs(enc, docs)
    bos = tok.bos_id(enc)
    assert [d[0] for d in ids] == [bos, bos]
    assert sum(i == bos for d in ids for i in d) == 2  # the literal "<|bos|>" text is not the token
    assert enc.decode(ids[1][1:]) == docs[1]


def test_token_bytes_multibyte_and_special(enc):
    table = tok.token_bytes(enc)
    assert table[tok.bos_id(enc)] == 0 and (table[-len(tok.SPECIAL_TOKENS):] == 0).all()
    eacute = enc.encode_single_token("é".encode()) if "é".encode() in enc._mergeable_ranks else None
    if eacute is not None:
        assert table[eacute] == 2
    assert table[enc.encode_single_token(b"a")] == 1


# ----------------------------------------------------------------------------- bits per byte
def test_bpb_hand_computed_with_multibyte_and_special_token():
    # ids: 0 = "a" (1 byte), 1 = "é" (2 bytes), 2 = "🙂" (4 bytes), 3 = <|bos|> (special: 0 bytes)
    table = torch.tensor([1, 2, 4, 0])
    targets = torch.tensor([0, 1, 3, 2])
    nats = torch.tensor([0.5, 1.0, 9.0, 2.0])  # the BOS target's 9 nats are not counted
    bpb, total_nats, total_bytes = bits_per_byte(nats, targets, table)
    assert total_bytes == 7 and total_nats == pytest.approx(3.5)
    assert bpb == pytest.approx(3.5 / (math.log(2) * 7))


def test_evaluate_bpb_on_a_uniform_model():
    """A model with a zero unembedding predicts uniformly: every counted token costs ln V."""
    vocab, context = 50, 8
    model = GPT(GPTConfig(vocab_size=vocab, depth=1, aspect_ratio=32, head_dim=16, context=context))
    torch.nn.init.zeros_(model.lm_head.weight)
    table = torch.ones(vocab, dtype=torch.long)
    table[3], table[4] = 0, 3  # a special token and a 3-byte token
    stream = torch.tensor([3, 1, 4, 2, 3, 4, 4, 1, 3, 0, 2, 4, 1, 1, 3, 2, 1], dtype=torch.int32)
    res = evaluate_bpb(model, stream, table, context, batch_size=2, max_tokens=16)
    targets = stream[1:17].long()
    counted = table[targets]
    expected = math.log(vocab) * int((counted > 0).sum()) / (math.log(2) * int(counted.sum()))
    assert res["tokens"] == 16 and res["bytes"] == int(counted.sum())
    assert res["bpb"] == pytest.approx(expected, rel=1e-6)


# ----------------------------------------------------------------------------- CORE
BOS = 256
NEXT = {"a": "b", "b": "c", "c": " ", " ": "d", "d": "e", "e": "f", "f": "g"}


def _bigram_model():
    """A real (if tiny) byte-level language model: a bigram table with one preferred successor."""
    table = torch.zeros(257, 257)
    for a, b in NEXT.items():
        table[ord(a), ord(b)] = 5.0
    emb = torch.nn.Embedding.from_pretrained(table)
    return lambda x: emb(x)


def _encode(s: str) -> list[int]:
    return list(s.encode())


def _score(item: core.Item, shots=()) -> bool:
    seqs, ranges = core._crop(*core.spans(item, core.render(item, list(shots)), _encode, BOS), 64)
    return core.score_item(_bigram_model(), item, seqs, ranges, pad=BOS)


def test_core_multiple_choice_picks_lowest_mean_loss():
    assert _score(core.Item("multiple_choice", context="ab", choices=("defg", "xyzw"), gold=0))
    assert not _score(core.Item("multiple_choice", context="ab", choices=("defg", "xyzw"), gold=1))
    assert _score(core.Item("multiple_choice", context="ab", choices=("qqq", "defg", "zz"), gold=1))


def test_core_schema_picks_the_context_that_explains_the_continuation():
    item = core.Item("schema", contexts=("xyz", "abc"), continuation="defg", gold=1)
    seqs, ranges = core.spans(item, core.render(item, []), _encode, BOS)
    assert [s[a:b] for s, (a, b) in zip(seqs, ranges)] == [_encode(" defg")] * 2  # the shared suffix
    assert _score(item)
    assert not _score(core.Item("schema", contexts=("xyz", "abc"), continuation="defg", gold=0))


def test_core_language_modeling_needs_the_exact_greedy_continuation():
    assert _score(core.Item("language_modeling", context="zab", continuation="cdefg")) is False  # "c" then " "
    assert _score(core.Item("language_modeling", context="zabc", continuation="defg"))
    assert not _score(core.Item("language_modeling", context="zabc", continuation="defx"))


def test_core_fewshot_is_fixed_and_excludes_the_item():
    a = core.fewshot_indices(10, 3, 4, seed=1234)
    assert a == core.fewshot_indices(10, 3, 4, seed=1234) and 3 not in a and len(set(a)) == 4
    assert core.fewshot_indices(10, 3, 0, seed=1234) == []
    shot = core.Item("multiple_choice", context="Q1", choices=("x", "y"), gold=1)
    item = core.Item("multiple_choice", context="Q2", choices=("u", "v"), gold=0)
    assert core.render(item, [shot]) == ["Q1 y\n\nQ2 u", "Q1 y\n\nQ2 v"]


def test_centered_score_formula():
    assert core.centered(0.75, 0.5) == pytest.approx(0.5)
    assert core.centered(0.25, 0.25) == 0.0
    assert core.centered(0.3, 0.0) == pytest.approx(0.3)
    assert core.centered(0.0, 0.5) == pytest.approx(-1.0)


def test_evaluate_core_on_the_shared_files_is_the_mean_of_centered_scores(enc):
    model = GPT(GPTConfig(vocab_size=enc.n_vocab, depth=1, aspect_ratio=32, head_dim=16, context=64))
    res = core.evaluate_core(lambda x: model(x), enc, EVAL, 64, 2, {"copa": 1}, 1234, tok.bos_id(enc))
    assert set(res["tasks"]) == set(core.KINDS)
    for task, r in res["tasks"].items():
        assert r["items"] == 2 and r["random_baseline"] == core.RANDOM_BASELINE[task]
        assert r["centered"] == pytest.approx(core.centered(r["accuracy"], r["random_baseline"]))
    assert res["tasks"]["copa"]["fewshot"] == 1
    assert res["core"] == pytest.approx(sum(r["centered"] for r in res["tasks"].values()) / 6)


@pytest.mark.parametrize("name, text, line", [
    ("copa.jsonl", '{"query": "a", "choices": ["b", "c"], "gold": 0}\n{"query": "a", "choices": ["b"]}\n', 2),
    ("copa.jsonl", '{"query": "a", "choices": ["b", "c"], "gold": 0}\n\n{not json\n', 3),
    ("winograd_wsc.jsonl", '{"context_options": ["a", "b"], "continuation": "c", "gold": 5}\n', 1),
    ("hellaswag_val_full.txt.gz", "ctx\n1\ne1\ne2\ne3\ne4\nctx\nseven\ne1\ne2\ne3\ne4\n", 8),
])
def test_malformed_eval_line_names_file_and_line(tmp_path, name, text, line):
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    task = {v: k for k, v in core.FILES.items()}[name]
    with pytest.raises(core.EvalDataError) as exc:
        core.load_task(tmp_path, task)
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg and f"line {line}:" in msg


def test_malformed_mirror_line_names_file_and_line(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "one"}\n{"url": "no text"}\n')
    with pytest.raises(DataError, match=r"docs\.jsonl: line 2: "):
        read_jsonl_docs(path)


# ----------------------------------------------------------------------------- windows and model
def test_layer_windows_tile_the_pattern_and_end_long():
    # nanochat's window (2048 // 2, 0): the 1,024 keys before a query and the query itself
    assert layer_windows("SSSL", 6, 2048, None) == [1025, 1025, 1025, None, 1025, None]
    assert layer_windows("SL", 3, 256, 64) == [64, None, None]
    assert layer_windows("S", 2, 64, 64) == [None, None]  # a window as long as the context is no window


def _dense_attention(q, k, v, window):
    n = q.shape[-2]
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    allowed = (j <= i) & (i - j < window)  # the definition: causal, the last `window` keys
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    return torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v


@pytest.mark.parametrize("backend", ["auto", "flex"])  # CPU: SDPA per query block; FlexAttention block mask
@pytest.mark.parametrize("n, window", [(40, 7), (200, 64), (130, 1)])
def test_sliding_window_attention_equals_dense_definition(backend, n, window):
    g = torch.Generator().manual_seed(n + window)
    q, k, v = (torch.randn(2, 3, n, 16, generator=g, dtype=torch.float64) for _ in range(3))
    if backend == "flex":
        q, k, v = q.float(), k.float(), v.float()
    got = attend(q, k, v, causal=True, window=window, backend=backend)
    want = _dense_attention(q.double(), k.double(), v.double(), window)
    torch.testing.assert_close(got.double(), want, atol=1e-5 if backend == "flex" else 1e-10, rtol=1e-5)


# nanochat c7ba252 (RoPE base 10000, no QK gain) and the later 6ed7d1d / a825e63 options
@pytest.mark.parametrize("rope_base, gain", [(10000.0, 1.0), (100000.0, 1.2)])
def test_base_attention_matches_explicit_reference_forward_and_backward(rope_base, gain):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=64, depth=2, aspect_ratio=32, head_dim=16, context=48, short_window=9,
                    variant="base", rope_base=rope_base, qk_gain=gain)
    attn = Attention(cfg, layer=1, window=9).double()
    assert attn.inner.registry_name == "softmax" and attn.inner.options.qk_gain == gain
    # the base is visible in the rotary frequencies: base^(-2i/d) for pair i
    torch.testing.assert_close(attn.inner.rope.inv_freq.double(),
                               rope_base ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16), rtol=1e-6, atol=0)
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(2, 48, 64, dtype=torch.float64, requires_grad=True)
    ve = torch.randn(2, 48, 64, dtype=torch.float64)
    y = attn(x, ve)

    def explicit(x):
        h = lambda t: t.view(2, 48, 4, 16).transpose(1, 2)  # noqa: E731
        w_q, w_k, w_v = attn.inner.proj_in.weight.chunk(3, dim=0)
        q, k, v = h(x @ w_q.T), h(x @ w_k.T), h(x @ w_v.T)
        gate = 2 * torch.sigmoid(x[..., :32] @ attn.ve_gate.weight.T)
        v = v + gate.transpose(1, 2)[..., None] * h(ve)
        rms = lambda t: t / t.pow(2).mean(-1, keepdim=True).add(torch.finfo(t.dtype).eps).sqrt()  # noqa: E731
        q, k = rms(attn.inner.rope(q)) * gain, rms(attn.inner.rope(k)) * gain
        o = _dense_attention(q, k, v, 9)
        return o.transpose(1, 2).reshape(2, 48, 64) @ attn.inner.proj_out.weight.T

    want = explicit(x)
    torch.testing.assert_close(y, want, atol=1e-10, rtol=1e-9)
    g1, = torch.autograd.grad(y.square().sum(), x)
    g2, = torch.autograd.grad(want.square().sum(), x)
    torch.testing.assert_close(g1, g2, atol=1e-9, rtol=1e-8)


def test_without_qk_gain_q_and_k_are_exactly_rms_normed():
    """qk_gain 1.0 (c7ba252): every head's rotated q and k have mean square 1, nothing more."""
    cfg = GPTConfig(vocab_size=64, depth=1, aspect_ratio=32, head_dim=16, context=24, variant="base")
    inner = Attention(cfg, layer=0, window=None).inner.double()
    p = inner.prepare(3 * torch.randn(2, 24, 32, dtype=torch.float64))
    for t in (p.q, p.k):
        torch.testing.assert_close(t.pow(2).mean(-1), torch.ones(t.shape[:-1], dtype=torch.float64),
                                   rtol=0, atol=1e-12)


def test_defaults_are_nanochat_c7ba252():
    """The model and schedule defaults, of the dataclasses and of params.yaml's paper scale, are
    nanochat's at the commit the paper accessed (read from its gpt.py, base_train.py, base_eval.py)."""
    from kernattn.config.lm import NANOCHAT_COMMIT, LMParams

    assert NANOCHAT_COMMIT.startswith("c7ba252") and len(NANOCHAT_COMMIT) == 40
    cfg = GPTConfig(vocab_size=64, depth=2)
    assert (cfg.rope_base, cfg.qk_gain, cfg.resid_lambda_init, cfg.x0_lambda_init, cfg.softcap) == (
        10000.0, 1.0, 1.0, 0.1, 15.0)
    paper = load_params(REPO / "params.yaml", "paper").lm
    for lm in (LMParams(), paper):
        assert (lm.rope_base, lm.qk_gain, lm.resid_lambda_init, lm.x0_lambda_init, lm.softcap) == (
            10000.0, 1.0, 1.0, 0.1, 15.0)
        assert (lm.warmup_frac, lm.warmdown_frac, lm.min_lr_ratio, lm.param_data_ratio) == (0.0, 0.5, 0.0, 10.5)
        assert lm.bpb_tokens == 40 * 524_288 and flops.tokens_per_step(lm) == 2**20
        assert lm.short_window is None and lm.window_pattern == "SSSL"  # S sees context // 2 + 1 keys
        assert lm.rope_bf16 and lm.grad_clip == 0.0 and lm.optimizer == "muon_adamw"
        assert (lm.matrix_lr, lm.embedding_lr, lm.unembedding_lr, lm.scalar_lr) == (0.02, 0.3, 0.004, 0.5)
        assert (lm.adam_beta1, lm.adam_beta2, lm.weight_decay) == (0.8, 0.95, 0.2)
    base = GPTConfig.from_params(paper, 32768, "base")
    assert base.attention == ("softmax", {"position": "rope", "qk_norm": True, "rope_base": 10000.0, "qk_gain": 1.0})


@pytest.mark.parametrize("resid, x0", [(1.0, 0.1), (0.9, 0.0)])
def test_residual_scalars_start_at_their_configured_inits(resid, x0):
    model = GPT(GPTConfig(vocab_size=64, depth=3, aspect_ratio=32, head_dim=16, context=16,
                          resid_lambda_init=resid, x0_lambda_init=x0))
    for _ in range(2):  # at construction, and again after reset_parameters
        assert torch.equal(model.resid_lambdas.data, torch.full((3,), resid))
        assert torch.equal(model.x0_lambdas.data, torch.full((3,), x0))
        model.x0_lambdas.data.fill_(7.0)
        model.reset_parameters()


def test_value_embeddings_start_at_the_scale_of_v():
    """nanochat inits a value embedding like c_v: uniform(+-sqrt(3 / d)), std d^-1/2 (not N(0, 1),
    sqrt(d) times too large); the token embedding stays N(0, 1)."""
    torch.manual_seed(0)
    d = 512
    model = GPT(GPTConfig(vocab_size=8192, depth=1, aspect_ratio=d, head_dim=128, context=16))
    ve = model.value_embeds["0"].weight  # 4.2M entries: the sample std is within 0.1% of the law's
    assert ve.std().item() == pytest.approx(d ** -0.5, rel=5e-3)
    assert ve.abs().max().item() <= math.sqrt(3 / d)
    assert model.wte.weight.std().item() == pytest.approx(1.0, rel=5e-3)


def test_gka_lm_uses_the_registry_gka_with_rope_and_qk_norm():
    cfg = GPTConfig(vocab_size=64, depth=2, aspect_ratio=32, head_dim=16, context=32, short_window=8, variant="gka")
    model = GPT(cfg)
    inner = model.blocks[0].attn.inner
    assert inner.options.rope and inner.options.qk_norm and inner.window == 8 and inner.causal
    assert not model.value_embeds and not any("proj_in" in n for n, _ in model.named_parameters())
    y = model(torch.randint(0, 64, (2, 32)))
    assert y.shape == (2, 32, 64) and torch.isfinite(y).all() and y.abs().max() <= cfg.softcap


def test_depth20_parameter_counts_and_flops_match_table8():
    base = build_model(GPTConfig(vocab_size=32768, depth=20), "meta")
    gka = build_model(GPTConfig(vocab_size=32768, depth=20, variant="gka"), "meta")
    b, g = base.param_counts(), gka.param_counts()
    assert b["total"] == 896_535_720 and b["total"] // 10**6 == 896
    assert b["value_embeds"] == 10 * 32768 * 1280 == 419_430_400
    assert g["total"] == 378_798_320 and g["total"] // 10**6 == 378 and g["value_embeds"] == 0
    assert round(g["total"] / b["total"], 2) == 0.42
    # Table 8 is nanochat's estimate_flops: an S layer counted at 1,024 keys
    fb, fg = flops.flops_per_token(base), flops.flops_per_token(gka)
    assert fb["nanochat"] == pytest.approx(3.0042e9, rel=2e-5)
    assert fg["nanochat"] == pytest.approx(2.4143e9, rel=2e-5)
    # a query of an S layer sees 1,025: 15 S layers x 12 x 10 heads x 128 dims x 1 key more
    assert fb["total"] - fb["nanochat"] == 15 * 12 * 10 * 128
    assert fg["total"] - fg["nanochat"] == 15 * 12 * 10 * 128


def test_paper_scale_budgets_are_table8():
    """At paper scale, 2^20 tokens a step (nanochat's batch rule at depth 20): the base row's
    param:data rule gives int(10.5 x 435,162,240 scaling params) // 2^20 = 4,357 steps =
    4,568,645,632 tokens, and gka_paper's {tokens: 2778726400} is 2,650 steps: Table 8's 4.5686e9
    and 2.7787e9 tokens, and with its FLOPs/token its 1.3725e19 and 6.7088e18 training FLOPs."""
    from kernattn.tracks.lm.stages import lm_runs
    from kernattn.tracks.lm.track import plan

    lm = load_params(REPO / "params.yaml", "paper").lm
    runs = {r.run_id: r for r in lm_runs(lm)}
    base, paper = plan(lm, 32768, runs["base-s0"]), plan(lm, 32768, runs["gka_paper-s0"])
    assert base["params"]["scaling"] == 435_162_240 and int(10.5 * 435_162_240) // 2**20 == 4357
    assert (base["steps"], base["train_tokens"]) == (4357, 4_568_645_632)
    assert (paper["steps"], paper["train_tokens"]) == (2650, 2_778_726_400)
    assert f"{base['train_tokens']:.4e}" == "4.5686e+09" and f"{paper['train_tokens']:.4e}" == "2.7787e+09"
    assert base["train_flops"] == pytest.approx(1.3725e19, rel=1e-4)
    assert paper["train_flops"] == pytest.approx(6.7088e18, rel=1e-4)
    # the matched rows: GKA at the base's 4,357 steps, or as many as spend its FLOPs
    assert plan(lm, 32768, runs["gka_tokens-s0"])["steps"] == 4357
    flop = plan(lm, 32768, runs["gka_flops-s0"])
    assert flop["steps"] == round(4357 * base["flops_per_token"]["total"] / flop["flops_per_token"]["total"])
    assert abs(flop["train_flops"] - base["train_flops"]) <= flop["flops_per_token"]["total"] * 2**20  # one step


def test_matched_steps_give_equal_tokens_or_equal_flops():
    assert flops.matched_steps(100, 3.0, 2.0, "tokens") == 100
    assert flops.matched_steps(100, 3.0, 2.0, "flops") == 150  # 100 x 3 = 150 x 2
    with pytest.raises(ValueError):
        flops.matched_steps(100, 3.0, 2.0, "time")


def test_lm_params_bad_values_name_the_file_and_key(tmp_path):
    text = (REPO / "params.yaml").read_text().replace("  head_dim: 128\n", "  head_dim: 100\n", 1)
    (tmp_path / "params.yaml").write_text(text)
    with pytest.raises(ParamsError, match=r"params\.yaml: scale paper: lm\.head_dim=100 must divide"):
        load_params(tmp_path / "params.yaml", "paper").lm
    text = (REPO / "params.yaml").read_text().replace("  softcap: 15.0\n", "  softcap: 15.0\n  depht: 3\n", 1)
    (tmp_path / "params.yaml").write_text(text)
    with pytest.raises(ParamsError, match=r"unknown key 'lm\.depht'"):
        load_params(tmp_path / "params.yaml")


def test_flops_per_token_equals_flop_counter_mode_on_forward_and_backward():
    """nanochat's formula against torch's FlopCounterMode (SDPA's math backend, so the
    attention matmuls are visible to it; full attention, where the formula's keys = context)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    model = GPT(GPTConfig(vocab_size=300, depth=2, aspect_ratio=32, head_dim=16, context=64, window_pattern="L"))
    x = torch.randint(0, 300, (2, 64))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    assert counter.get_total_flops() / x.numel() == flops.flops_per_token(model)["total"]


# ----------------------------------------------------------------------------- nanochat's RoPE
def test_rope_turns_by_minus_theta_as_nanochat():
    """nanochat c7ba252's apply_rotary_emb: (x1 cos + x2 sin, -x1 sin + x2 cos) with theta =
    position x inv_freq; a 2-dim head with inv_freq 1 turns e1 to (cos p, -sin p)."""
    from kernattn.attention.positions import Rope

    rope = Rope(2, base=10000.0).double()
    x = torch.tensor([[1.0, 0.0]] * 4 + [[0.0, 1.0]] * 4, dtype=torch.float64).view(2, 4, 2)
    y = rope(x)
    p = torch.arange(4, dtype=torch.float64)
    torch.testing.assert_close(y[0], torch.stack([p.cos(), -p.sin()], -1), rtol=0, atol=1e-15)
    torch.testing.assert_close(y[1], torch.stack([p.sin(), p.cos()], -1), rtol=0, atol=1e-15)


def test_rope_tables_in_bfloat16_round_cos_and_sin_first():
    """lm.rope_bf16 (nanochat keeps cos/sin in bf16): the tables are rounded to bf16, then
    multiply x in x's dtype; every rotary module of the LM gets it, none without it."""
    from kernattn.attention.positions import Rope

    rope = Rope(2, base=10000.0).double()
    rope.table_dtype = torch.bfloat16
    x = torch.tensor([[1.0, 0.0]] * 5, dtype=torch.float64)
    p = torch.arange(5, dtype=torch.float64)
    cos, sin = p.cos().float().bfloat16().double(), p.sin().float().bfloat16().double()
    torch.testing.assert_close(rope(x), torch.stack([cos, -sin], -1), rtol=0, atol=0)
    assert (cos != p.cos()).any()  # the rounding is visible in float64
    for flag, dtype in ((True, torch.bfloat16), (False, None)):
        model = GPT(GPTConfig(vocab_size=64, depth=2, aspect_ratio=32, head_dim=16, context=16, rope_bf16=flag))
        ropes = [m for m in model.modules() if isinstance(m, Rope)]
        assert len(ropes) == 2 and all(r.table_dtype == dtype for r in ropes)


def test_special_tokens_and_split_pattern_are_nanochats():
    """nanochat c7ba252's tokenizer.py: its SPECIAL_TOKENS in order and its SPLIT_PATTERN
    (GPT-4's with 1-2 digit groups), as literals read from that file."""
    nanochat_specials = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
                         "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"]
    nanochat_pattern = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|"""
                        r"""\s*[\r\n]|\s+(?!\S)|\s+""")
    assert list(tok.SPECIAL_TOKENS) == nanochat_specials and tok.BOS == nanochat_specials[0]
    assert tok.SPLIT_PATTERN == nanochat_pattern
