"""The grouped recalibration fits (estimation/fitting.py) against scipy and scikit-learn fitting one
group at a time, by hand, and by their optimality conditions."""

import math
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from kcal_pipeline.estimation.fitting import (
    TEMPERATURE_BOUNDS,
    GoldMassRows,
    fit_isotonic,
    fit_platt,
    fit_temperatures,
    platt_targets,
)


def one_template_rows(lls: list[list[float]], golds: list[list[int]], group: list[int]) -> GoldMassRows:
    width = max(len(r) for r in lls)
    ll = np.full((len(lls), 1, width), -np.inf)
    gold = np.zeros(ll.shape, dtype=bool)
    for r, (values, g) in enumerate(zip(lls, golds, strict=True)):
        ll[r, 0, : len(values)] = values
        gold[r, 0, g] = True
    return GoldMassRows(ll, gold, np.zeros(len(lls)), np.asarray(group))


def random_rows(rng, n_rows: int, n_groups: int, templates: int = 1, max_golds: int = 1) -> GoldMassRows:
    """Rows of 2–8 options (−inf padded to 8) on `templates` templates (some absent), 1…max_golds golds."""
    ll = rng.normal(0, 2, size=(n_rows, templates, 8))
    n_options = rng.integers(2, 9, size=n_rows)
    ll[np.broadcast_to(np.arange(8)[None, None, :] >= n_options[:, None, None], ll.shape)] = -np.inf
    present = rng.random((n_rows, templates)) < 0.8
    present[:, 0] = True
    ll[~present] = -np.inf
    gold = np.zeros((n_rows, 8), dtype=bool)
    for r in range(n_rows):
        n_golds = rng.integers(1, min(max_golds, n_options[r] - 1) + 1)
        gold[r, rng.choice(n_options[r], size=n_golds, replace=False)] = True
    gold = gold[:, None, :] & np.isfinite(ll)
    group = rng.integers(0, n_groups, size=n_rows)
    return GoldMassRows(ll, gold, np.log(present.sum(axis=1)), group)


def group_nll(rows: GoldMassRows, g: int):
    """T ↦ the group's mean NLL, written out with math, one row and template at a time."""
    members = np.flatnonzero(rows.group == g)

    def nll(temperature: float) -> float:
        total = 0.0
        for r in members:
            terms = []
            for s in range(rows.ll.shape[1]):
                valid = np.isfinite(rows.ll[r, s])
                if not valid.any():
                    continue
                scaled = rows.ll[r, s, valid] / temperature
                norm = max(scaled) + math.log(sum(math.exp(v - max(scaled)) for v in scaled))
                terms += [v - norm for v, gold in zip(scaled, rows.gold[r, s, valid], strict=True) if gold]
            top = max(terms)
            total -= top + math.log(sum(math.exp(t - top) for t in terms)) - rows.log_count[r]
        return total / len(members)

    return nll


def best_on_a_fine_grid(nll) -> tuple[float, float]:
    """(T, NLL): the best of 401 points in log T, refined by Brent between its neighbours to 1e-12."""
    grid = np.linspace(*np.log(TEMPERATURE_BOUNDS), 401)
    values = [nll(math.exp(g)) for g in grid]
    best = int(np.argmin(values))
    bounds = (grid[max(best - 1, 0)], grid[min(best + 1, 400)])
    found = minimize_scalar(
        lambda g: nll(math.exp(g)), bounds=bounds, method="bounded", options={"xatol": 1e-12}
    )
    if found.fun < values[best]:
        return math.exp(found.x), found.fun
    return math.exp(grid[best]), values[best]


# --- temperature -----------------------------------------------------------------------------------


def test_temperature_by_hand_in_one_call():
    # group 0: p_T(0) = σ(1/T) on four rows lls [0, −1], gold 0 three times and 1 once → σ(1/T) = 3/4,
    #          T = 1/log 3
    # group 1: golds {0, 1} of lls [0, 0, −1]: m = 2/(2 + e^{−1/T}) rises as T falls → the bound 0.05
    # group 2: one option per row: m = 1 at every T → flat, T = 1
    # group 3: no rows → flat, T = 1
    rows = one_template_rows(
        [[0, -1]] * 4 + [[0, 0, -1]] * 2 + [[-3.0]] * 2,
        [[0], [0], [0], [1], [0, 1], [0, 1], [0], [0]],
        [0, 0, 0, 0, 1, 1, 2, 2],
    )
    temperature, flat = fit_temperatures(rows, 4)
    assert temperature == pytest.approx([1 / math.log(3), 0.05, 1.0, 1.0], rel=1e-12)
    assert flat.tolist() == [False, False, True, True]


def test_tied_scores_or_all_gold_are_not_informative():
    # lls all equal (m = 1/2 at every T) and every option gold (m = 1): flat, T = 1
    rows = one_template_rows([[-1, -1], [-2, -0.5]], [[0], [0, 1]], [0, 0])
    assert rows.informative().tolist() == [False, False]
    temperature, flat = fit_temperatures(rows, 1)
    assert temperature.tolist() == [1.0] and flat.tolist() == [True]


@pytest.mark.parametrize(("templates", "max_golds"), [(1, 1), (1, 3), (3, 1), (3, 3)])
def test_temperature_is_the_global_minimum(templates, max_golds):
    # several golds or templates make the NLL non-convex in 1/T (a minimum at a bound besides one
    # inside, as met in the test data): the fit must be at least as good as a 401-point search refined
    # by Brent, and where that search's optimum is sharp, the same T
    rng = np.random.default_rng(templates * 10 + max_golds)
    rows = random_rows(rng, 120, 12, templates, max_golds)
    temperature, flat = fit_temperatures(rows, 12)
    assert not flat.any()
    for g in range(12):
        nll = group_nll(rows, g)
        reference_t, reference_nll = best_on_a_fine_grid(nll)
        assert nll(temperature[g]) <= reference_nll + 1e-12
        assert temperature[g] == pytest.approx(reference_t, rel=1e-6)
        # the derivative is zero inside the bounds, and points outward at a bound
        slope = (nll(temperature[g] * (1 + 1e-6)) - nll(temperature[g] * (1 - 1e-6))) / 2e-6
        if temperature[g] not in TEMPERATURE_BOUNDS:
            assert abs(slope) < 1e-6


def test_groups_fit_together_equal_groups_fit_alone():
    rows = random_rows(np.random.default_rng(3), 90, 6, templates=2, max_golds=2)
    together, _ = fit_temperatures(rows, 6)
    for g in range(6):
        keep = rows.group == g
        alone = GoldMassRows(rows.ll[keep], rows.gold[keep], rows.log_count[keep], np.zeros(keep.sum(), int))
        assert fit_temperatures(alone, 1)[0][0] == together[g]


# --- Platt -----------------------------------------------------------------------------------------


def platt_gradient(x, y, slope, intercept):
    target = platt_targets(y, np.zeros(len(x), dtype=int), 1)
    residual = 1 / (1 + np.exp(-(slope * x + intercept))) - target
    return np.array([np.sum(residual * x), np.sum(residual)])


def sklearn_platt(x, y):
    target = platt_targets(y, np.zeros(len(x), dtype=int), 1)
    model = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-10, max_iter=1000)
    model.fit(
        np.r_[x, x][:, None],
        np.r_[np.ones(len(x)), np.zeros(len(x))],
        sample_weight=np.r_[target, 1 - target],
    )
    return model.coef_[0, 0], model.intercept_[0]


def test_platt_targets_by_hand():
    # group 0: 3 right, 1 wrong → right 4/5, wrong 1/3; group 1: 1 right, 2 wrong → 2/3, 1/4
    correct = np.array([1, 1, 0, 1, 0, 1, 0], dtype=bool)
    group = np.array([0, 0, 0, 0, 1, 1, 1])
    assert platt_targets(correct, group, 2) == pytest.approx([0.8, 0.8, 1 / 3, 0.8, 0.25, 2 / 3, 0.25])


def test_platt_equals_sklearn_and_is_stationary():
    rng = np.random.default_rng(11)
    n_groups = 25
    group = rng.integers(0, n_groups, size=1000)
    x = rng.random(1000)
    y = rng.random(1000) < 0.2 + 0.6 * x  # a real slope
    y[np.searchsorted(np.sort(group), np.arange(n_groups))] |= True  # (at least one right per group is
    slope, intercept = fit_platt(x, y, group, n_groups)  # not needed, but keeps groups two-class)
    for g in range(n_groups):
        m = group == g
        if y[m].all() or not y[m].any():
            continue
        want = sklearn_platt(x[m], y[m])
        got = 1 / (1 + np.exp(-(slope[g] * x[m] + intercept[g])))
        np.testing.assert_allclose(got, 1 / (1 + np.exp(-(want[0] * x[m] + want[1]))), rtol=1e-8)
        ours = np.abs(platt_gradient(x[m], y[m], slope[g], intercept[g])).max()
        theirs = np.abs(platt_gradient(x[m], y[m], *want)).max()
        assert ours <= max(theirs, 1e-12)


def test_platt_on_confidences_all_near_one():
    # Base confidences of a well-separated model: x = 1 − 1e-7·u. On the raw x the 2 × 2 Hessian is
    # near-singular (sklearn's Cholesky gives up on it); kcal centres x. Its fit must reach at least
    # sklearn's loss there and equal sklearn's fit on centred x (a well-conditioned problem)
    rng = np.random.default_rng(2)
    x = 1 - 1e-7 * rng.random(60)
    y = rng.random(60) < 0.2 + 0.6 * (1 - x) * 1e7
    slope, intercept = fit_platt(x, y, np.zeros(60, dtype=int), 1)
    target = platt_targets(y, np.zeros(60, dtype=int), 1)

    def loss(z):
        return float(np.sum(np.logaddexp(0, z) - target * z))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = sklearn_platt(x, y)
    assert loss(slope[0] * x + intercept[0]) <= loss(raw[0] * x + raw[1]) + 1e-12
    centred = sklearn_platt(x - x.mean(), y)
    np.testing.assert_allclose(
        slope[0] * x + intercept[0], centred[0] * (x - x.mean()) + centred[1], rtol=1e-6, atol=1e-6
    )


def test_platt_with_one_confidence_value_has_slope_zero():
    # slope and intercept are not identified: slope 0 and σ(intercept) = the mean target
    # right: 2 → target 3/4; wrong: 1 → target 1/3; mean (3/4 + 3/4 + 1/3)/3 = 11/18
    slope, intercept = fit_platt(np.full(3, 0.6), np.array([1, 1, 0], dtype=bool), np.zeros(3, dtype=int), 1)
    assert slope[0] == 0.0
    assert intercept[0] == pytest.approx(math.log(11 / 7), rel=1e-14)


# --- isotonic --------------------------------------------------------------------------------------


def test_isotonic_equals_sklearn_with_ties():
    rng = np.random.default_rng(4)
    n_groups = 15
    group = rng.integers(0, n_groups, size=600)
    x = np.round(rng.random(600), 1)  # ten distinct values: many ties
    y = rng.random(600) < x
    fit = fit_isotonic(x, y, group, n_groups)
    query = rng.random(600) * 1.4 - 0.2  # inside and outside the dev range
    got = fit.predict(query, group)
    for g in range(n_groups):
        m = group == g
        model = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(x[m], y[m].astype(float))
        np.testing.assert_allclose(got[m], model.predict(query[m]), rtol=1e-12, atol=1e-15)
        assert fit.n_steps()[g] == np.unique(model.y_thresholds_).size


def test_isotonic_by_hand():
    # x 0.4 → (1, 0) mean 1/2, 0.6 → 0, 0.8 → 1: PAVA pools 0.4 and 0.6 into 1/3
    fit = fit_isotonic(
        np.array([0.4, 0.4, 0.6, 0.8]), np.array([1, 0, 0, 1], dtype=bool), np.zeros(4, int), 1
    )
    assert fit.x[0].tolist() == [0.4, 0.6, 0.8]
    assert fit.y[0] == pytest.approx([1 / 3, 1 / 3, 1.0], rel=1e-15)
    assert fit.predict(np.array([0.1, 0.7, 0.9]), np.zeros(3, int)) == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert fit.n_steps().tolist() == [2.0]
