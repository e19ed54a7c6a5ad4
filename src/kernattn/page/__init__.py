"""The report page, on the top floor: it assembles the parts of every unit (each track's
kernattn.tracks.<t>.report, each study's, the benchmarks') and its own (the cost plan:
page/plan.py) around the claims summary, judged with the verdict library below the units
(kernattn.report), and writes report/index.html (`kernattn report`)."""
