"""Length extrapolation: every trained run of the char and LM tracks scored, without
retraining, at 1x..8x its training context (stages.py has the files and the DAG)."""
