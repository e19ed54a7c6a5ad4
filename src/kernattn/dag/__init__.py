"""The DAG as data: stage.py (one stage), stages.py (the table of every track's stages from
params), snakemake.py (what the Snakefile's rules take from it), dvc.py (dvc.yaml from it).

Imports config and the tracks' light path modules (lm.pipeline, vision.stages, analysis);
nothing imports dag but the CLI, the Snakefile and kernattn.pipeline (the old name)."""
