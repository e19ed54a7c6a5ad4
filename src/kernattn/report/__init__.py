"""The verdict library, below the units that use it: trained runs -> tables -> verdicts.

part.py    what a report part is (section(ctx), claims(ctx, section), OUTLINE, CLAIM_KINDS)
           and the ReportContext every part is given; the parts are the units' own
           (kernattn.tracks.<t>.report, kernattn.studies.<study>.report, ...), the page that
           assembles them is kernattn.page.build (`kernattn report`)
claims.py  a claim's result, the summary and pairs tables; summary.py and forest.py the first
           screen's badges and plots
stats.py   statistics only: mean and 95% Student t interval over seeds, Welch and paired
           intervals, the minimum detectable effect, Holm; bootstrap.py the paired bootstrap
verdicts/  every verdict rule: what a claim needs to pass (its package docstring maps them);
           gates.py the gates before a verdict
paper_numbers.yaml   the papers' claims and numbers, each with the figure/section it is from
shipped.py the shipped paper_numbers.yaml as read: the rules a claims file of one's own falls back on
"""
