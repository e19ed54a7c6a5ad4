"""The numbers every comparison over seeds is judged at: the level, the error rate, the power of
the minimum detectable effect, and the fewest seeds a test needs.

They sit in a module that imports nothing so that the statistics (report/stats.py,
report/bootstrap.py) can take their default level and power from here without standing on the
rules that use them.
"""

LEVEL = 0.95
ALPHA = 1 - LEVEL
ONE_SIDED_ALPHA = ALPHA / 2   # each direction of a comparison: its two-sided 95% interval decides
POWER = 0.8                   # of the minimum detectable effect
MIN_SEEDS = 3                 # per arm: with 2 seeds a t test has 1 degree of freedom (t_0.975 = 12.7)
