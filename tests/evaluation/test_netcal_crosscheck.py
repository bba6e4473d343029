"""kcal's binned calibration errors against netcal 1.4.0 (Küppers et al.'s calibration framework)
where the two define the same number.

How netcal is fed so that its definitions are ours: X = the confidence of the predicted answer
(1-D), y = 1[the answer is correct]. With 1-D X and a 0/1 y, netcal takes y itself as the
"matched" indicator (Miscalibration._prepare_input: binary mode), so it bins (confidence,
correct) pairs exactly as kcal does. Its bins: np.histogramdd over edges on [0, 1] — equal-width
linspace(0, 1, B + 1), or with equal_intervals=False np.quantile(X, linspace(0, 1, B + 1)) with the
outer edges set to 0 and 1 — each bin [e_k, e_k+1), the last one closed; bins with no sample count
0 and are left out of ACE's mean. netcal also clips X to [eps, 1 − eps], which moves no value of
the random data below.

Compared:
  * ECE (20 bins and every sweep bin count) = netcal ECE(B): both Σ_b n_b/N·|acc_b − conf_b| over
    equal-width bins;
  * the largest gap of kcal's equal-width reliability curve = netcal MCE(B);
  * ACE = netcal ACE(B, equal_intervals=False), on data where no quantile edge is a sample.
Not compared, and why (test_where_netcal_ace_differs shows both): netcal's default ACE bins by equal
width, not by quantiles; and when a quantile edge *is* a sample, kcal (sklearn's calibration_curve,
as the seed's code) puts it in the lower bin, netcal's histogramdd in the upper one.
"""

import netcal.metrics as netcal_metrics  # the dev extra (pyproject.toml)
import numpy as np
import pytest

from kcal_pipeline.evaluation import METRICS
from kcal_pipeline.evaluation.calibration import BIN_SWEEP, _ace, _ece, calibration_curve

# The registered metrics (METRICS[name]): calling one validates its inputs, then computes.
ace, ece = METRICS["ace"], METRICS["ece"]

BIN_COUNTS = (20, *BIN_SWEEP)
# 998 points: the quantile edge k of B bins sits at position k·997/B of the sorted sample, and 997
# is prime, so for every B above and 0 < k < B the position is not a whole number: each inner
# edge lies strictly between two samples (uniform floats have no ties), and the edge rule never
# decides a bin.
N = 998


def samples(seed: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(confidence, correct) drawn with a known miscalibration: under-confident (accuracy c^0.5),
    over-confident (c^2) and squeezed into a few bins (Beta(8, 2))."""
    rng = np.random.default_rng(seed)
    if kind == "beta":
        c = rng.beta(8.0, 2.0, N)
        return c, rng.uniform(size=N) < c
    c = rng.uniform(0.0, 1.0, N)
    power = {"under": 0.5, "over": 2.0}[kind]
    return c, rng.uniform(size=N) < c**power


CASES = [(seed, kind) for seed in (0, 1, 2) for kind in ("under", "over", "beta")]


@pytest.mark.parametrize(("seed", "kind"), CASES)
def test_ece_equals_netcal_ece_at_every_bin_count(seed, kind):
    c, y = samples(seed, kind)
    assert ece(c, y) == pytest.approx(netcal_metrics.ECE(20).measure(c, y.astype(int)), abs=1e-12)
    for bins in BIN_COUNTS:
        theirs = netcal_metrics.ECE(bins).measure(c, y.astype(int))
        assert _ece(c, y, bins) == pytest.approx(theirs, abs=1e-12), bins


@pytest.mark.parametrize(("seed", "kind"), CASES)
def test_largest_gap_of_the_uniform_reliability_curve_equals_netcal_mce(seed, kind):
    c, y = samples(seed, kind)
    for bins in BIN_COUNTS:
        curve = calibration_curve(c, y, bins=bins, strategy="uniform")
        gap = (curve["acc"] - curve["conf"]).abs().max()
        assert gap == pytest.approx(netcal_metrics.MCE(bins).measure(c, y.astype(int)), abs=1e-12), bins


@pytest.mark.parametrize(("seed", "kind"), CASES)
def test_ace_equals_netcal_quantile_ace_when_no_edge_is_a_sample(seed, kind):
    c, y = samples(seed, kind)
    quantile_ace = netcal_metrics.ACE(20, equal_intervals=False).measure(c, y.astype(int))
    assert ace(c, y) == pytest.approx(quantile_ace, abs=1e-12)
    for bins in BIN_COUNTS:
        theirs = netcal_metrics.ACE(bins, equal_intervals=False).measure(c, y.astype(int))
        assert _ace(c, y, bins) == pytest.approx(theirs, abs=1e-12), bins


def test_where_netcal_ace_differs():
    # 1. netcal's default ACE bins by equal width: a different number on the same data.
    c, y = samples(0, "over")
    assert abs(ace(c, y) - netcal_metrics.ACE(20).measure(c, y.astype(int))) > 1e-4
    # 2. A quantile edge that is a sample: c = 0.1 … 0.5, 2 bins, edges = percentiles 0, 50, 100
    #    = 0.1, 0.3, 0.5, and 0.3 is a sample. y = 0, 0, 1, 1, 1.
    #    kcal (0.3 → lower bin): {0.1, 0.2, 0.3} conf 0.2, acc 1/3; {0.4, 0.5} conf 0.45, acc 1
    #      ACE = (|1/3 − 0.2| + |1 − 0.45|) / 2 = (0.13333 + 0.55) / 2 = 0.341667
    #    netcal (0.3 → upper bin): {0.1, 0.2} conf 0.15, acc 0; {0.3, 0.4, 0.5} conf 0.4, acc 1
    #      ACE = (0.15 + 0.6) / 2 = 0.375
    c = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    y = np.array([False, False, True, True, True])
    assert _ace(c, y, 2) == pytest.approx((1 / 3 - 0.2 + 0.55) / 2, abs=1e-12)
    assert netcal_metrics.ACE(2, equal_intervals=False).measure(c, y.astype(int)) == pytest.approx(
        0.375, abs=1e-12
    )
