"""Claims of seed 004, Zhao et al. 2025: consistency of knowledge-gap decisions. Intra-method
consistency here (IoU_cons under each variant, over the draws, between variants); Agreement,
Abstain F1 and the threshold safeguard in zhao_metrics.py; cross-method consistency in zhao_cross.py.
What they read (decisions recomputed from the estimates, paired resamples): zhao_decisions.py."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    CRITERION,
    DIFFERENCE,
    Citation,
    Finding,
    PaperNumber,
    StoreTables,
    claim,
    fmt,
    fmt_ci,
    interval_finding,
    not_testable,
)
from kcal_pipeline.reporting.findings.zhao_decisions import (
    _ITEM,
    BUILD,
    ONE_SHOT,
    ONE_SHOT_MAX_IOU,
    SEED_STD_MAX,
    TABLE1_MODELS,
    ZERO_SHOT,
    ZERO_SHOT_MAX_IOU,
    ZHAO,
    _bound_verdict,
    _draws,
    _fallback_note,
    _interval,
    _no_variant,
    _seed_mean,
    decided_rows,
    intra_items,
    intra_measures,
    per_variant,
)

# --- 1. intra-method consistency far from perfect -------------------------------------------------


@claim(
    "consistency_far_from_one",
    paper=ZHAO,
    stage="context",
    kind=CRITERION,
    title="Minimal prompt variations change a probe's accept/reject decisions: IoU_cons below the "
    "highest the paper saw (0.86 zero-shot, 0.97 one-shot)",
    setting="Multiple-choice MMLU (Table 1) on Mistral-7B, LLaMA-3.1-8B and OLMo-2-7B, six probing "
    "methods, variants inserted spaces, shuffled options, a typo (seeds 4, 44, 99) and a one-shot "
    "prefix of a simple known fact. kcal: Base (the token probability, Zhao et al.'s TokProb) on "
    "the headline template against its typo, extra-space and context-fixed ('What is 2+2? 4') "
    "variants; shuffled options have no counterpart (a statement shows no option list).",
    rule="Base's decisions (accept C ≥ τ, τ tuned on each setup's dev rows, pooled over relations, "
    "0.5 where degenerate) on the test items both setups have; IoU_cons per seed and its mean over "
    "the seeds, with a 95 % bias-corrected interval from the metrics' two-stage resample plan "
    "(relations, then instances; the seeds share each resample). Holds if the interval lies below "
    f"the paper's highest IoU_cons for that kind of variant ({ZERO_SHOT_MAX_IOU} zero-shot, "
    f"{ONE_SHOT_MAX_IOU} one-shot: no probe it measured was more consistent), does not hold if it "
    "lies above, else inconclusive (also when IoU_cons is undefined: nothing accepted or rejected).",
    reads="estimates and dev_estimates (Base, Sum, full answer spaces; headline template and its "
    "typo, extra-space and context-fixed variants), templates",
    sources=(
        Citation(
            "§5.1",
            "All zero-shot variants (Space, Shuffle Options, Typo) affect consistency, with "
            "IoUcons values ranging from as low as 0.27 to a maximum of 0.86.",
        ),
        Citation(
            "§5.1",
            "The impact of one-shot prompting is even greater than that of the three zero-shot "
            "variants, with IoUcons ranging from 0.04 to 0.97.",
        ),
        Citation(
            "§3",
            "Our zero-shot variants simulate real-world noise: inserting spaces, shuffling "
            "options and minor typos.",
        ),
    ),
    number=PaperNumber(
        "IoU_cons from 0.27 to 0.86 under the zero-shot variants, from 0.04 to 0.97 under one-shot",
        TABLE1_MODELS,
        setting="MMLU, six probing methods (§5.1, Table 1)",
    ),
    preconditions=("the headline template's typo, extra-space or context-fixed variant, with dev rows",),
)
def consistency_far_from_one(t: StoreTables) -> list[Finding]:
    key = "consistency_far_from_one"
    decided = decided_rows(t, [BASELINE])

    def measure(setup: str, subject: str, wide: pl.DataFrame, seeds: list) -> list[Finding]:
        points, boot = intra_measures(wide, len(seeds))
        value, low, high = _seed_mean(points["iou_cons"], boot["iou_cons"])
        bound = ONE_SHOT_MAX_IOU if setup == ONE_SHOT else ZERO_SHOT_MAX_IOU
        notes = [n for n in (_fallback_note(decided, BASELINE, [setup]),) if n]
        if math.isnan(value):
            notes.insert(0, "IoU_cons undefined on a draw: nothing accepted (or rejected) in both setups")
        return [
            Finding(
                key,
                t.model_id,
                subject,
                _bound_verdict(low, high, bound),
                value,
                low,
                high,
                wide.height,
                f"IoU_cons {fmt_ci(value, low, high)} (mean over {len(seeds)} draw(s): "
                f"{_draws(seeds, points['iou_cons'])}) against the paper's highest {fmt(bound, 2)}; "
                f"DecCons {fmt(float(points['dec_cons'].mean()))}",
                "; ".join(notes),
            )
        ]

    return per_variant(
        key,
        t,
        decided,
        (*ZERO_SHOT, ONE_SHOT),
        lambda setup: f"Base's IoU_cons, original vs {setup}",
        measure,
    )


# --- 2. inconsistency is consistent over the draws -------------------------------------------------


@claim(
    "inconsistency_is_consistent",
    paper=ZHAO,
    stage="context",
    kind=CRITERION,
    title="Inconsistency is consistent: IoU_cons barely varies over the perturbation's random seeds",
    setting="Zhao et al. draw each zero-shot variant with seeds 4, 44 and 99 (and four one-shot "
    "examples) and find the standard deviation of IoU_cons over the draws close to 0 (Tables 7–10: "
    "at most 0.069, AskCal with inserted spaces on Mistral-7B, HellaSwag): the inconsistency is not "
    "the luck of one draw. kcal draws each typo and extra space once per seed and template (one "
    "edit shared by the relation's instances, where Zhao et al. edit each question).",
    rule="Base's IoU_cons (as consistency_far_from_one) per seed of the typo and of the extra space; "
    "the sample standard deviation over the seeds, with a 95 % bias-corrected interval from the "
    "two-stage resample plan (every seed on the same resampled items). Holds if the interval lies "
    f"below {SEED_STD_MAX} (the largest standard deviation Tables 7–10 print for IoU_cons), does not "
    "hold if it lies above, else inconclusive; not testable with fewer than two seeds.",
    reads="estimates and dev_estimates (Base, Sum; headline template and its typo and extra-space "
    "variants per perturbation seed), templates",
    sources=(
        Citation(
            "§5.1",
            "The variance of IoUcons after introducing three variants with three random seeds "
            "and four one-shot examples is close to 0; see Appendix C for details.",
        ),
        Citation(
            "§5.1",
            "This suggests that the inconsistency of the probing methods is not due to "
            "randomness in the selection of one-shot examples or in the locations where "
            "perturbations are introduced.",
        ),
        Citation(
            "App. C",
            "While different variants negatively impact consistency, their variance remains "
            "small, further indicating that the inconsistency is not due to randomness.",
        ),
        Citation(
            "App. C",
            "AskCal Space 0.243 ± 0.069 0.168 ± 0.038 0.865 ± 0.009 0.889 ± 0.006 0.889 ± 0.006",
            "Table 8",
        ),
        Citation(
            "App. A.2",
            "We used three different random seeds (4, 44, 99) to introduce variations into "
            "the original prompt (i.e., multiple-choice questions).",
        ),
    ),
    number=PaperNumber(
        "the variance of IoU_cons over seeds close to 0; the largest standard deviation printed 0.069 "
        "(AskCal, Space)",
        "Mistral-7B (the largest); every model of Tables 7–10",
        setting="HellaSwag (Table 8); seeds 4, 44, 99",
    ),
    preconditions=("the typo or extra-space variant under at least two perturbation seeds",),
)
def inconsistency_is_consistent(t: StoreTables) -> list[Finding]:
    key = "inconsistency_is_consistent"

    def measure(setup: str, subject: str, wide: pl.DataFrame, seeds: list) -> list[Finding]:
        if len(seeds) < 2:
            return not_testable(
                key,
                t,
                subject,
                f"one draw only (seed {seeds[0]}): {BUILD}, or kcal run --perturbation-seeds 4,44,99",
            )
        points, boot = intra_measures(wide, len(seeds))
        iou = points["iou_cons"]
        value = float(np.std(iou, ddof=1))
        low, high = _interval(np.std(boot["iou_cons"], axis=1, ddof=1), value)
        return [
            Finding(
                key,
                t.model_id,
                subject,
                _bound_verdict(low, high, SEED_STD_MAX),
                value,
                low,
                high,
                wide.height,
                f"std {fmt_ci(value, low, high)} over {len(seeds)} seeds ({_draws(seeds, iou)}; range "
                f"{fmt(float(np.ptp(iou)))}) against the paper's largest {SEED_STD_MAX}",
                "IoU_cons undefined on a draw" if math.isnan(value) else "",
            )
        ]

    return per_variant(
        key,
        t,
        decided_rows(t, [BASELINE]),
        ZERO_SHOT,
        lambda setup: f"standard deviation of Base's IoU_cons over seeds, {setup}",
        measure,
    )


# --- 3. one-shot moves decisions more than the zero-shot variants ----------------------------------


def _undefined(*values: float) -> str:
    if any(math.isnan(v) for v in values):
        return "IoU_cons undefined on a draw: nothing accepted (or rejected) in both setups"
    return ""


def _paired_iou(decided: pl.DataFrame, first: str, second: str) -> tuple | None:
    """IoU_cons (mean over seeds) of Base under `first` minus under `second`, on the items both
    have (each against original), with its paired interval: (value, low, high, n, a, b) or None."""
    wide_a, seeds_a = intra_items(decided, BASELINE, first)
    wide_b, seeds_b = intra_items(decided, BASELINE, second)
    if wide_a.is_empty() or wide_b.is_empty():
        return None
    b_cols = [c for c in wide_b.columns if c not in _ITEM and not c.endswith("_o")]
    shift = len(seeds_a)  # wide_b's seed k becomes seed shift + k
    renamed = wide_b.select(
        *_ITEM,
        *(pl.col(c).alias(f"{c.rsplit('_', 1)[0]}_{int(c.rsplit('_', 1)[1]) + shift}") for c in b_cols),
    )
    wide = wide_a.join(renamed, on=_ITEM, how="inner", nulls_equal=True).sort(_ITEM, nulls_last=True)
    if wide.is_empty():
        return None
    points, boot = intra_measures(wide, len(seeds_a) + len(seeds_b))
    iou, iou_boot = points["iou_cons"], boot["iou_cons"]
    s = len(seeds_a)
    a, b = float(iou[:s].mean()), float(iou[s:].mean())
    diff = a - b
    low, high = _interval(iou_boot[:, :s].mean(axis=1) - iou_boot[:, s:].mean(axis=1), diff)
    return diff, low, high, wide.height, a, b


@claim(
    "one_shot_moves_decisions_more",
    paper=ZHAO,
    stage="context",
    kind=DIFFERENCE,
    title="A one-shot prefix changes the decisions more than a zero-shot perturbation: IoU_cons lower "
    "under context-fixed than under a typo or an extra space",
    setting="MMLU (Table 1), six methods on three LLMs: one-shot IoU_cons spans 0.04–0.97, zero-shot "
    "0.27–0.86. The token-probability probe (TokProb, kcal's Base) is the exception the paper's own "
    "rows show: on Mistral-7B its one-shot IoU_cons (0.969) is above its typo (0.665) and space "
    "(0.736) ones (Table 7). kcal's one-shot is context-fixed ('What is 2+2? 4' before the statement).",
    rule="Base's IoU_cons under context-fixed minus its IoU_cons under the zero-shot variant (mean over "
    "that variant's seeds), each against the original, on the items all share, with a paired 95 % "
    "bias-corrected interval (two-stage plan); holds if the interval lies below 0, does not hold if "
    "above, else inconclusive; Holm-adjusted over the two variants.",
    reads="estimates and dev_estimates (Base, Sum; headline template, context-fixed, typo and "
    "extra-space variants), templates",
    sources=(
        Citation(
            "§5.1",
            "The impact of one-shot prompting is even greater than that of the three zero-shot "
            "variants, with IoUcons ranging from 0.04 to 0.97.",
        ),
        Citation(
            "§5.1",
            "All zero-shot variants (Space, Shuffle Options, Typo) affect consistency, with "
            "IoUcons values ranging from as low as 0.27 to a maximum of 0.86.",
        ),
        Citation(
            "App. C",
            "TokProb Space 0.736 ± 0.000 0.866 ± 0.000 0.640 ± 0.000 0.993 ± 0.000 0.989 ± 0.000",
            "Table 7",
        ),
        Citation(
            "App. C", "Typo 0.665 ± 0.000 0.833 ± 0.000 0.553 ± 0.000 0.980 ± 0.000 0.972 ± 0.000", "Table 7"
        ),
        Citation(
            "App. C",
            "One-shot 0.969 ± 0.000 0.985 ± 0.000 0.952 ± 0.000 0.790 ± 0.002 0.678 ± 0.005",
            "Table 7",
        ),
    ),
    number=PaperNumber(
        "IoU_cons 0.04 to 0.97 under one-shot, 0.27 to 0.86 under zero-shot; TokProb one-shot 0.969 vs "
        "typo 0.665 and space 0.736",
        f"{TABLE1_MODELS} (ranges); Mistral-7B (TokProb)",
        setting="MMLU (§5.1; Table 7 for TokProb)",
    ),
    preconditions=("the context-fixed and a zero-shot (typo, extra-space) variant of the headline template",),
)
def one_shot_moves_decisions_more(t: StoreTables) -> list[Finding]:
    key = "one_shot_moves_decisions_more"
    decided = decided_rows(t, [BASELINE])
    out = []
    for zero in ZERO_SHOT:
        subject = f"Base's IoU_cons, {ONE_SHOT} − {zero}"
        got = _paired_iou(decided, ONE_SHOT, zero)
        if got is None:
            missing = ONE_SHOT if intra_items(decided, BASELINE, ONE_SHOT)[0].is_empty() else zero
            out += _no_variant(key, t, subject, missing)
            continue
        diff, low, high, n, a, b = got
        out.append(
            interval_finding(
                key,
                t,
                subject,
                "negative",
                diff,
                low,
                high,
                n,
                "ΔIoU_cons",
                f"; IoU_cons {ONE_SHOT} {fmt(a)}, {zero} {fmt(b)} (mean over its seeds)",
                _undefined(a, b),
            )
        )
    return out


# --- 4. inserting spaces moves decisions least -----------------------------------------------------


@claim(
    "space_moves_decisions_least",
    paper=ZHAO,
    stage="context",
    kind=DIFFERENCE,
    title="Inserting a space changes the decisions least of the zero-shot variants: IoU_cons higher "
    "under an extra space than under a typo",
    setting="MMLU, six methods on three LLMs (§5.1, Table 1): of space, shuffled options and typo, "
    "space has the least impact. kcal has two of the three (no option list to shuffle): the extra "
    "space against the typo, each drawn with seeds 4, 44, 99.",
    rule="Base's IoU_cons under the extra space minus under the typo (each the mean over its seeds, "
    "against the original), on the items both share, with a paired 95 % bias-corrected interval "
    "(two-stage plan): holds if the interval lies above 0, does not hold if below, else inconclusive.",
    reads="estimates and dev_estimates (Base, Sum; headline template, extra-space and typo variants), "
    "templates",
    sources=(
        Citation("§5.1", "Inserting spaces has the least overall impact on consistency."),
        Citation(
            "App. C",
            "TokProb Space 0.736 ± 0.000 0.866 ± 0.000 0.640 ± 0.000 0.993 ± 0.000 0.989 ± 0.000",
            "Table 7",
        ),
        Citation(
            "App. C", "Typo 0.665 ± 0.000 0.833 ± 0.000 0.553 ± 0.000 0.980 ± 0.000 0.972 ± 0.000", "Table 7"
        ),
    ),
    number=PaperNumber(
        "TokProb IoU_cons space 0.736, typo 0.665",
        "Mistral-7B",
        effect=0.071,
        derived="0.736 − 0.665 (TokProb, Mistral-7B, MMLU; Table 7)",
        setting="MMLU (Table 7)",
    ),
    preconditions=("the extra-space and typo variants of the headline template",),
)
def space_moves_decisions_least(t: StoreTables) -> list[Finding]:
    key, subject = "space_moves_decisions_least", "Base's IoU_cons, extra-space − typo"
    decided = decided_rows(t, [BASELINE])
    got = _paired_iou(decided, "extra-space", "typo")
    if got is None:
        missing = "typo" if intra_items(decided, BASELINE, "typo")[0].is_empty() else "extra-space"
        return _no_variant(key, t, subject, missing)
    diff, low, high, n, a, b = got
    return [
        interval_finding(
            key,
            t,
            subject,
            "positive",
            diff,
            low,
            high,
            n,
            "ΔIoU_cons",
            f"; IoU_cons extra-space {fmt(a)}, typo {fmt(b)} (means over their seeds)",
            _undefined(a, b),
        )
    ]
