"""The char track (gpa-short/gpa-long): a character-level GPT on a text corpus (Dickens by
default), trained per row of `matrix.rows` x seed, and the GPA kernel-bank analyses.

    corpus.py     `kernattn prepare`: the corpus (any text), cleaned, split, tokenised
    data.py       readers of the prepared corpus; training and validation windows
    model.py      the GPT whose attention comes from the registry
    track.py      the recipe the engine trains (`kernattn train`)
    stages.py     its stages and paths (the only owner of where its files live)
    report.py     its part of the report (report_runs, report_figures, report_claims, report_gpa,
                  report.html.j2, provenance.html.j2);  analysis/: the kernel-bank readings
"""
