"""Zhao et al. (seed 004): cross-method consistency, two estimators on the same prompt: the
least consistent pair (chosen on dev) and estimator families of similar signals."""

from __future__ import annotations

import math

import numpy as np

from kcal_pipeline.estimation.registry import DEV_SPLIT, ESTIMATORS, HEADLINE_SPLIT
from kcal_pipeline.reporting.findings.core import (
    CRITERION,
    DIFFERENCE,
    Citation,
    Finding,
    PaperNumber,
    StoreTables,
    claim,
    estimator_label,
    fmt,
    fmt_ci,
    interval_finding,
    not_testable,
)
from kcal_pipeline.reporting.findings.zhao_decisions import (
    BUILD,
    MOST_CONSISTENT_PAIR,
    SAME_SIGNAL_FAMILIES,
    ZHAO,
    _bound_verdict,
    _eligible,
    _fallback_note,
    _interval,
    _pairs,
    decided_rows,
    decision_matrix,
    pair_deccons,
    resample_weights,
)

# --- 8. cross-method consistency ---------------------------------------------------------------------


@claim(
    "cross_method_deccons_low",
    paper=ZHAO,
    stage="context",
    kind=CRITERION,
    title="Probing methods contradict each other on what the model knows: the least consistent pair's "
    "DecCons below the paper's most consistent pair (0.89)",
    setting="Six probing methods on the same model, data set and prompt (§5.2, Fig. 3): DecCons as low "
    "as 0.07 (NOTA and AskCal on Mistral-7B, HellaSwag; 0.54 on MMLU), the most consistent pair "
    "(NOTA, MoreInfo) between 0.62 and 0.89. kcal's estimators are likelihood-based confidences, "
    "closer to each other than Zhao et al.'s (prompting, trained probes).",
    rule="Every estimator on the headline setup (thresholds tuned on dev, pooled over relations; "
    "marker estimators and score-valued ones whose dev threshold fell back to 0.5 left out), pairs of "
    "one grain: the pair with the lowest DecCons on the DEV split is chosen, and its test-split "
    "DecCons gets a 95 % bias-corrected interval (two-stage plan). Holds if the interval lies below "
    f"{MOST_CONSISTENT_PAIR}, does not hold if above, else inconclusive.",
    reads="estimates and dev_estimates (every estimator, Sum, headline template and instance grain), "
    "templates",
    sources=(
        Citation(
            "Abstract",
            "Methods are highly inconsistent – with decision consistency across methods "
            "being as low as 7% – even though the model, dataset, and prompt are all the same.",
        ),
        Citation(
            "§5.2",
            "For example, with Mistral on dataset MMLU, NOTA and AskCal achieve a DecCons of "
            "0.54, whereas in Mistral+HellaSwag, the same methods drop to 0.07.",
            "Fig. 3",
        ),
        Citation(
            "§5.2",
            "NOTA and Moreinfo share the highest consistency across all setups, with DecCons "
            "between 0.62 and 0.89.",
        ),
    ),
    number=PaperNumber(
        "cross-method DecCons as low as 7%; NOTA and AskCal 0.54 (MMLU) and 0.07 (HellaSwag); the most "
        "consistent pair, NOTA and MoreInfo, between 0.62 and 0.89",
        "Mistral-7B (NOTA and AskCal); every model (the range)",
        setting="the original prompt (§5.2)",
    ),
    preconditions=("two estimators of one grain with usable thresholds, on dev and test",),
)
def cross_method_deccons_low(t: StoreTables) -> list[Finding]:
    key, subject = "cross_method_deccons_low", "DecCons of the least consistent pair (chosen on dev)"
    decided = decided_rows(t, original_only=True)
    if decided.is_empty():
        return not_testable(key, t, subject, f"no estimates: {BUILD}")
    p_dev, d_dev, _, dev_names, grains = decision_matrix(decided, DEV_SPLIT, _eligible(decided))
    pairs = _pairs(dev_names, grains)
    dev = pair_deccons(p_dev, d_dev) if pairs else None
    scored = [
        (dev[i, j], dev_names[i], dev_names[j])
        for i, j in pairs
        if dev is not None and not math.isnan(dev[i, j])
    ]
    if not scored:
        return not_testable(
            key,
            t,
            subject,
            "no pair of estimators of one grain with usable thresholds "
            f"shares a dev item: {BUILD} (dev 25 %)",
        )
    dev_value, a, b = min(scored)
    p, d, relations, _, _ = decision_matrix(decided, HEADLINE_SPLIT, [a, b])
    if p.shape[1] < 2 or not (p[:, 0] * p[:, 1]).any():
        return not_testable(
            key, t, subject, f"{estimator_label(a)} and {estimator_label(b)} share no test item"
        )
    keep = (p[:, 0] * p[:, 1]) > 0
    p, d, relations = p[keep], d[keep], relations[keep]
    value = float(pair_deccons(p, d)[0, 1])
    low, high = _interval(pair_deccons(p, d, resample_weights(relations))[:, 0, 1], value)
    return [
        Finding(
            key,
            t.model_id,
            subject,
            _bound_verdict(low, high, MOST_CONSISTENT_PAIR),
            value,
            low,
            high,
            int(keep.sum()),
            f"{estimator_label(a)} vs {estimator_label(b)}: DecCons {fmt_ci(value, low, high)} on test; "
            f"dev DecCons {fmt(dev_value)}, the lowest of {len(scored)} pairs on dev",
            _fallback_note(decided, a, []) or _fallback_note(decided, b, []),
        )
    ]


# --- 9. methods using similar signals agree more -----------------------------------------------------


@claim(
    "similar_signals_agree_more",
    paper=ZHAO,
    stage="context",
    kind=DIFFERENCE,
    title="Methods using similar signals agree more: DecCons within an estimator family above DecCons "
    "across families",
    setting="§5.2: NOTA and MoreInfo (both asking the model about its answer) are the most consistent "
    "pair (DecCons 0.62–0.89), Embedding (hidden states) the least consistent with the others (0.07 "
    "with MoreInfo, Mistral-7B, HellaSwag). kcal's families (the registry's: single_template, "
    "selective_lama, aggregation, template_marginal, null_model, multi_answer) group estimators by the "
    "signal they read; recalibrations (a refit of another estimator's own signal) and markers are "
    "left out.",
    rule="Test-split DecCons of every pair of one grain on the headline setup (thresholds tuned on dev; "
    "score-valued estimators whose dev threshold fell back left out): the mean over families of their "
    "within-family pairs' mean DecCons, minus the mean over pairs of families of their cross pairs' "
    "mean DecCons, with a 95 % bias-corrected interval (two-stage plan, every pair on the same "
    "resample): holds if it lies above 0, does not hold if below, else inconclusive.",
    reads="estimates and dev_estimates (every estimator, Sum, headline template and instance grain), "
    "templates",
    sources=(
        Citation(
            "§5.2",
            "NOTA and Moreinfo share the highest consistency across all setups, with DecCons "
            "between 0.62 and 0.89.",
        ),
        Citation(
            "§5.2",
            "This may be due to the underlying similar principles the methods share, "
            "suggesting they utilize a correlated signal.",
        ),
        Citation(
            "§5.2",
            "Embedding is less consistent with other methods (in Mistral+Hellaswag, DecCons "
            "with Moreinfo is 0.07).",
        ),
    ),
    number=PaperNumber(
        "NOTA and MoreInfo DecCons between 0.62 and 0.89; Embedding with MoreInfo 0.07",
        "Mistral-7B (0.07); every model (the range)",
        setting="MMLU and HellaSwag, the original prompt (§5.2)",
    ),
    preconditions=("a family with two estimators and a pair across families, of one grain",),
)
def similar_signals_agree_more(t: StoreTables) -> list[Finding]:
    key, subject = "similar_signals_agree_more", "DecCons within − across estimator families"
    decided = decided_rows(t, original_only=True)
    if decided.is_empty():
        return not_testable(key, t, subject, f"no estimates: {BUILD}")
    usable = [
        e for e in _eligible(decided) if e in ESTIMATORS and ESTIMATORS[e].family not in SAME_SIGNAL_FAMILIES
    ]
    p, d, relations, names, grains = decision_matrix(decided, HEADLINE_SPLIT, usable)
    family = [ESTIMATORS[e].family for e in names]
    groups: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for i, j in _pairs(names, grains):
        groups.setdefault(tuple(sorted((family[i], family[j]))), []).append((i, j))
    within = {k: v for k, v in groups.items() if k[0] == k[1]}
    across = {k: v for k, v in groups.items() if k[0] != k[1]}
    if not within or not across:
        return not_testable(
            key,
            t,
            subject,
            "needs a family with two estimators and a pair across "
            f"families, of one grain, with usable thresholds: {BUILD}",
        )

    def contrast(m: np.ndarray) -> np.ndarray:  # m [..., E, E]
        def mean_of(gs: dict) -> np.ndarray:
            per = [np.nanmean(np.stack([m[..., i, j] for i, j in v], axis=-1), axis=-1) for v in gs.values()]
            return np.nanmean(np.stack(per, axis=-1), axis=-1)

        return mean_of(within) - mean_of(across)

    point = pair_deccons(p, d)
    value = float(contrast(point))
    with np.errstate(all="ignore"):
        low, high = _interval(contrast(pair_deccons(p, d, resample_weights(relations))), value)
    shown = "; ".join(
        f"{a if a == b else f'{a} × {b}'} {fmt(float(np.nanmean([point[i, j] for i, j in v])))} "
        f"({len(v)} pair(s))"
        for (a, b), v in sorted(groups.items())
    )
    return [
        interval_finding(
            key,
            t,
            subject,
            "positive",
            value,
            low,
            high,
            p.shape[0],
            "ΔDecCons",
            f"; mean DecCons per family and pair of families: {shown}",
        )
    ]
