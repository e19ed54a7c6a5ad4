"""Benchmarks of the kernattn pipeline (see `kernattn.cli`).

- `timing`: the library: step timers, peak memory (CPU and CUDA), round-robin measurement;
  used by both stages and by kernattn.gpu_check.
- `typed_csv`: CSV files with a schema, written atomically and read back typed.
- `attention`: the `kernattn bench-attention` stage: forward+backward time and peak memory
  of every attention variant, fast path against the explicit reference; its configurations
  in `attention_configs`, its measurement in `attention_measure`, its ratios and printed
  tables in `attention_ratios`.
- `stage`: the `kernattn bench` stage: whole-model throughput, peak memory and MFU, measured
  by `models` on the models `cases` builds.
"""
