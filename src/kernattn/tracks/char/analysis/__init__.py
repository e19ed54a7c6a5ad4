"""GPA interpretability, automated (gpa-long, sections 3.1-3.2 and 4).

Two pipeline stages read trained kernel banks the way gpa-long does, for every GPA run of
the matrix, and the report shows what they find beside the paper's values:

    kernattn analyze-corpus --params P --scale S            # once per scale
        -> <analysis.out_dir>/corpus/   newline-separation histogram of the corpus
    kernattn analyze-gpa --params P --scale S --run RUN     # per GPA run
        -> <analysis.out_dir>/<RUN>/    bank shapes (init and trained), kernel parameters,
                                        bumps, 50,000 sampled characters and their newline
                                        histogram, bank strengths and head-removal costs

Modules: banks (shapes, parameters, bump, strength), newlines (separation, line and
paragraph-length histograms, main peak, bootstrap interval), sampling (batched streams with
cached keys), heads (zero- and mean-ablation of a head, costs, rank correlation), plots;
corpus and analyze_gpa are the stages. The studies built on these readings (line wrap, bump
shift, pruning) live in kernattn.studies. Definitions are in each module's docstring; where the files live: kernattn.tracks.char.stages.
"""

from __future__ import annotations

from ..stages import SUMMARY  # noqa: F401 (the analyses write summary.json)
