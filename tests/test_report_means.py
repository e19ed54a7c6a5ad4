"""report.stats.mean_of and mean_ci_of, the one home of the parts' means over seeds: what they
leave out, what they raise on, and that a mean and an interval's centre agree to the bit."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from kernattn.report import stats
from kernattn.report.claims import fmt_value
from kernattn.studies.report_common import ci_of


def test_none_is_left_out_and_nothing_left_is_none():
    assert stats.mean_of([1.0, None, 3.0]) == 2.0
    assert stats.mean_ci_of([None, 1.0, None, 3.0]).n == 2
    assert stats.mean_of([]) is None and stats.mean_of([None]) is None
    assert stats.mean_ci_of(iter([None])) is None and ci_of([None]) is None


def test_nan_raises_unless_the_caller_reads_it_as_a_blank_cell():
    for bad in (float("nan"), math.inf):
        with pytest.raises(ValueError):
            stats.mean_of([1.0, bad])
        with pytest.raises(ValueError):
            stats.mean_ci_of([1.0, bad])
        assert stats.mean_of([1.0, bad, 3.0], skip_nonfinite=True) == 2.0
        assert stats.mean_ci_of([bad, 1.0, 3.0], skip_nonfinite=True).n == 2
    assert stats.mean_of([float("nan")], skip_nonfinite=True) is None
    assert ci_of([np.nan, 2.0], skip_nonfinite=True) == {"n": 1, "mean": 2.0, "lo": None, "hi": None}


def test_the_mean_is_the_intervals_centre_to_the_bit():
    # Summed left to right 0.1 + 0.2 + 0.3 is 0.6000000000000001 (mean 0.20000000000000004);
    # statistics.fmean's exact sum gives 0.19999999999999998. A table's mean column must be the
    # centre mean_ci prints its interval around.
    vals = [0.1, 0.2, 0.3]
    assert stats.mean_of(vals) == stats.mean_ci(vals).mean == stats.mean_ci_of(vals).mean
    assert stats.mean_of(np.array(vals)) == stats.mean_ci(vals).mean
    assert stats.mean_of(vals) == sum(vals) / 3 != statistics.fmean(vals)


def test_a_table_cell_formats_none_and_nan_alike():
    assert fmt_value(None) == fmt_value(float("nan")) == "—"
    assert fmt_value(1234567) == "1,234,567" and fmt_value(True) == "True" and fmt_value(0.5) == "0.5"
