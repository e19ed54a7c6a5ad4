"""`kernattn gpu-check`: prove and measure every GPU path in parts of a few minutes each.

One module per part (checks: fast paths against their references; kernels: attention alone
at FlashAttention-3 paper shapes; models: the whole-model table through kernattn.bench;
train: the char GPT through the `kernattn train` CLI with a kill and a resume), `stage`
the command line and `common` what they share. Everything here needs only torch, timm,
numpy, pandas and pyyaml: MLflow, Snakemake, DVC, rustbpe and tiktoken are never imported,
so `pip install --no-deps -e .` beside a GPU node's own torch is enough.
"""
