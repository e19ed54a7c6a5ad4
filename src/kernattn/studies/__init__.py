"""The experiments the papers leave open (issue 17): one unit per study (kernattn.units.UNITS),
each a package of the units' shape (stages.py, report.py + report.html.j2, its commands).

    extrapolation/  every trained run scored at 1x..8x its training context (in the main DAG:
                    the report reads its tables)
    wrap/           does the first layer's bump follow the line width? (gpa-long, Section 3.2)
    gka_init/       GKA's bandwidth at initialisation (gka-paper gives none)
    prune/          removing a weak head, then fine-tuning (gpa-long, Sections 3.1 and 4)

The studies but extrapolation are outside the main DAG: `snakemake --cores all studies` (or
`dvc repro` of their stages). What they share (their folder under studies.out_dir, a study's
summary.json, a study run's params) is in common.py; their report parts' helpers in
report_common.py. This package imports nothing: a study's command pays only for its own.
"""
