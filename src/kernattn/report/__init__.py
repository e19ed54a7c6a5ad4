"""The report: trained runs -> pandas tables -> jinja2 -> report/index.html.

build.py   the `kernattn report` stage (reads the runs' final.json and metrics.jsonl, the data
           meta.json and the benchmark CSVs; writes the report folder atomically)
stats.py   mean and 95% Student t interval over seeds, Welch interval of a difference, and
           the verdict on a claim (reproduced / contradicted / inconclusive)
paper_numbers.yaml   the papers' claims and numbers, each with the figure/section it is from
templates/index.html.j2   the page (CSS inline; images and CSV tables next to it)
"""
