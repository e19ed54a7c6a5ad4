"""Benchmarks of the kernattn pipeline; one module per stage (see `kernattn.cli`).

- `attention`: forward+backward time and peak memory of every attention variant, fast path
  against the explicit reference (`kernattn bench-attention`).
"""
