"""The nanochat-style language-model track of gka-paper section 5: tokenizer, data, GPT with
baseline or GKA-LM attention, training, bits per byte, CORE-6 (GKA Table 7 tasks), FLOPs and the
matched-tokens / matched-FLOPs comparison."""
