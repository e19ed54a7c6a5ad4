"""Models trained by the pipeline: a character-level GPT whose attention comes from the registry.

    from kernattn.models import GPT
    model = GPT(vocab_size=93, model_params=params.model, variant="gpa", options={"n_kernels": 8})
    logits = model(idx)                      # idx [B, N] long -> [B, N, vocab_size]
    model.num_params(), model.extra_params()
"""

from .gpt import GPT, Block, MLP, count_params

__all__ = ["GPT", "Block", "MLP", "count_params"]
