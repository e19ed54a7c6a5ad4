"""The verdict library, below the units that use it: trained runs -> tables -> verdicts.

part.py    what a report part is (section(ctx), claims(ctx, section), OUTLINE, CLAIM_KINDS)
           and the ReportContext every part is given; the parts are the units' own
           (kernattn.tracks.<t>.report, kernattn.studies.<study>.report, ...), the page that
           assembles them is kernattn.page.build (`kernattn report`)
claims.py  a claim's result, the summary and pairs tables; stats.py: mean and 95% Student t
           interval over seeds, Welch and paired intervals, every verdict rule; gates.py the
           gates before a verdict; summary.py and forest.py the first screen's badges and plots
paper_numbers.yaml   the papers' claims and numbers, each with the figure/section it is from
"""
