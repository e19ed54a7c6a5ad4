"""The report: trained runs -> pandas tables -> jinja2 -> report/index.html.

build.py   the `kernattn report` stage: the page (parts, claims summary, contents, provenance;
           writes the report folder atomically); it names no track
part.py    what a report part is (section(ctx), claims(ctx, section), OUTLINE, CLAIM_KINDS)
           and the ReportContext every part is given; the tracks' parts are
           kernattn.tracks.<t>.report, the page's own studies.py and bench_models.py
claims.py  a claim's result, the summary and pairs tables; stats.py: mean and 95% Student t
           interval over seeds, Welch and paired intervals, every verdict rule
paper_numbers.yaml   the papers' claims and numbers, each with the figure/section it is from
templates/index.html.j2   the page (CSS inline; images and CSV tables next to it)
"""
