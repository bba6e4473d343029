"""Zhao et al. (seed 004): what else than IoU_cons says about the decisions: Agreement of the
answers, Abstain F1 beside the changed decisions, and the fixed 0.5 threshold safeguard."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.consistency_setups import ORIGINAL
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    DIFFERENCE,
    Citation,
    Finding,
    PaperNumber,
    StoreTables,
    claim,
    descriptive_finding,
    fmt,
    fmt_ci,
    interval_finding,
    not_testable,
)
from kcal_pipeline.reporting.findings.zhao_decisions import (
    _ITEM,
    BUILD,
    ONE_SHOT,
    ZERO_SHOT,
    ZHAO,
    _interval,
    decided_rows,
    intra_items,
    intra_measures,
    per_variant,
    without_safeguard,
)

# --- 5. Agreement against IoU_cons -----------------------------------------------------------------


@claim(
    "agreement_below_iou_under_one_shot",
    paper=ZHAO,
    stage="context",
    kind=DIFFERENCE,
    title="Decisions can stay consistent while the answers change: under the one-shot prefix, "
    "Agreement (same answer among the items accepted in both setups) is below IoU_cons",
    setting="§5.1 (Source of Inconsistency): TokProb on Mistral-7B, MMLU, one-shot keeps IoU_cons at "
    "0.97 while its Agreement is 0.68; the paper's other TokProb rows differ (OLMo-2-7B one-shot "
    "IoU_cons .62 with Agreement .96, Table 1), and under zero-shot variants Agreement is high. "
    "kcal: Base, context-fixed; the zero-shot variants are shown beside it, untested.",
    rule="Base's Agreement minus its IoU_cons, original against context-fixed, on their shared test "
    "items, with a 95 % bias-corrected interval (two-stage plan): holds if the interval lies below 0, "
    "does not hold if above, else inconclusive (also when no item is accepted in both). The typo and "
    "extra-space rows (means over seeds) are descriptive.",
    reads="estimates and dev_estimates (Base, Sum, predicted option; headline template and its "
    "context-fixed, typo and extra-space variants), templates",
    sources=(
        Citation("§5.1", "Additionally, for TokProb, which achieves 0.97 in"),
        Citation(
            "§5.1",
            "Agr. is only 0.68, indicating that even though detected knowledge gaps are "
            "consistent, there is great variability in the model’s answer to the same question.",
        ),
        Citation(
            "§3",
            "Agreement (Agr.) is the proportion of commonly accepted questions for which the "
            "model (not the probe) provides the same answer in both setups.",
        ),
    ),
    number=PaperNumber(
        "TokProb one-shot: IoU_cons 0.97, Agr. 0.68",
        "Mistral-7B",
        effect=-0.29,
        derived="0.68 − 0.97 (TokProb, one-shot, Mistral-7B, MMLU; §5.1)",
        setting="MMLU, one-shot",
    ),
    preconditions=("the context-fixed variant of the headline template",),
)
def agreement_below_iou_under_one_shot(t: StoreTables) -> list[Finding]:
    key = "agreement_below_iou_under_one_shot"

    def measure(setup: str, subject: str, wide: pl.DataFrame, seeds: list) -> list[Finding]:
        points, boot = intra_measures(wide, len(seeds))
        agree, iou = float(points["agreement"].mean()), float(points["iou_cons"].mean())
        diff = agree - iou
        low, high = _interval((boot["agreement"] - boot["iou_cons"]).mean(axis=1), diff)
        extra = f"; Agreement {fmt(agree)}, IoU_cons {fmt(iou)}" + (
            f" (means over {len(seeds)} seeds)" if len(seeds) > 1 else ""
        )
        if setup == ONE_SHOT:
            return [
                interval_finding(
                    key, t, subject, "negative", diff, low, high, wide.height, "Agreement − IoU_cons", extra
                )
            ]
        return [
            descriptive_finding(
                key,
                t,
                subject,
                f"Agreement − IoU_cons {fmt_ci(diff, low, high)}{extra}",
                diff,
                low,
                high,
                wide.height,
                "zero-shot: shown beside the one-shot row, not tested",
            )
        ]

    return per_variant(
        key,
        t,
        decided_rows(t, [BASELINE]),
        (ONE_SHOT, *ZERO_SHOT),
        lambda setup: f"Base's Agreement − IoU_cons, original vs {setup}",
        measure,
        required=(ONE_SHOT,),
    )


# --- 6. Abstain F1 stays while the decisions change ------------------------------------------------


@claim(
    "abstain_f1_stable_while_decisions_change",
    paper=ZHAO,
    stage="context",
    kind=DIFFERENCE,
    title="Abstain F1 hides the inconsistency: under a zero-shot variant the share of changed "
    "decisions exceeds the change of Abstain F1",
    setting="Mistral-7B, MMLU (Table 2, §5.4): Abstain F1 (Feng et al.'s: abstain = reject, a true "
    "knowledge gap = a wrong answer) barely moves under the zero-shot variants while the decisions "
    "do (SelfRef's IoU_cons under shuffled options 0.46). kcal computes Abstain F1 here from the "
    "decisions (its decision metrics treat acceptance, not abstention, as the positive).",
    rule="Per zero-shot variant (typo, extra-space; each seed against the original, then the mean "
    "over seeds), Base's share of changed decisions (1 − DecCons) minus |Abstain F1 (variant) − "
    "Abstain F1 (original)|, Abstain F1 = 2|R ∩ W| / (|R| + |W|) with R the rejected and W the wrongly "
    "answered test items, on the items both setups have; paired 95 % bias-corrected interval (two-stage "
    "plan): holds if it lies above 0 (decisions move more than the metric), does not hold if below, "
    "else inconclusive; Holm-adjusted over the two variants.",
    reads="estimates and dev_estimates (Base, Sum, correct; headline template, typo and extra-space "
    "variants), templates",
    sources=(
        Citation(
            "§5.4",
            "As shown in Table 2, the Abstain F1 scores remain largely stable. For example, "
            "AskCal achieves 0.65 on the original prompt and 0.64 on a zero-shot variant. Similarly, "
            "Reflect remains virtually unchanged with scores of 0.50, 0.50, and 0.48 across variants.",
        ),
        Citation(
            "§5.4",
            "For instance, Reflect’s Abstain F1 changes only slightly, but the IoUcons in "
            "shuffling option variants is just 46% (see Table 1), indicating that many of the "
            "specific questions being rejected differ.",
        ),
        Citation(
            "§5.4",
            "Zero-shot variants(space, shuffled option, typo) do not significantly reduce "
            "Abstain F1 and sometimes even improve it, which suggests that current metrics may not "
            "reliably reflect probing method robustness.",
            "Table 2",
        ),
        Citation(
            "§5.4",
            "Abstain F1 is defined as the harmonic mean of precision and recall over "
            "abstention decisions, where precision reflects the proportion of predicted knowledge "
            "gaps that are correct, and recall reflects the proportion of true knowledge gaps that "
            "are successfully identified",
        ),
    ),
    number=PaperNumber(
        "Abstain F1: AskCal 0.65 original, 0.64 zero-shot; Reflect 0.50, 0.50, 0.48; Reflect's IoU_cons "
        "under shuffled options 46%",
        "Mistral-7B",
        setting="MMLU (Table 2, §5.4)",
    ),
    preconditions=("a zero-shot (typo, extra-space) variant of the headline template",),
)
def abstain_f1_stable_while_decisions_change(t: StoreTables) -> list[Finding]:
    key = "abstain_f1_stable_while_decisions_change"

    def gap(m: dict) -> np.ndarray:
        return ((1 - m["dec_cons"]) - np.abs(m["f1_v"] - m["f1_o"])).mean(axis=-1)

    def measure(setup: str, subject: str, wide: pl.DataFrame, seeds: list) -> list[Finding]:
        points, boot = intra_measures(wide, len(seeds))
        value = float(gap(points))
        low, high = _interval(gap(boot), value)
        return [
            interval_finding(
                key,
                t,
                subject,
                "positive",
                value,
                low,
                high,
                wide.height,
                "(1 − DecCons) − |ΔAbstain F1|",
                f"; changed decisions {fmt(float((1 - points['dec_cons']).mean()))}, Abstain F1 original "
                f"{fmt(float(points['f1_o'][0]))}, {setup} {fmt(float(points['f1_v'].mean()))}, IoU_cons "
                f"{fmt(float(points['iou_cons'].mean()))} (means over {len(seeds)} seed(s))",
            )
        ]

    return per_variant(
        key,
        t,
        decided_rows(t, [BASELINE]),
        ZERO_SHOT,
        lambda setup: f"Base's (1 − DecCons) − |ΔAbstain F1|, original vs {setup}",
        measure,
    )


# --- 7. the fixed-threshold safeguard ---------------------------------------------------------------


@claim(
    "threshold_safeguard_raises_iou",
    paper=ZHAO,
    stage="context",
    kind=DIFFERENCE,
    title="Replacing a degenerate dev threshold by 0.5 raises intra-method consistency (IoU_cons)",
    setting="AskCal on HellaSwag (Table 3, §5.5): tuned thresholds as high as 0.98 or as low as 0.01 "
    "accept nearly nothing or everything; overriding them with 0.5 raised IoU_cons on every variant. "
    "kcal's consistency thresholds carry the same safeguard (a dev threshold accepting or rejecting "
    "≥ 95 % of the dev rows is set to 0.5); here Base with and without it.",
    rule="Per variant (typo, extra-space: mean over seeds; context-fixed), where the safeguard replaced "
    "Base's threshold on the original or on the variant: IoU_cons with the safeguard minus IoU_cons at "
    "the raw best dev split, on the same test items, with a paired 95 % bias-corrected interval "
    "(two-stage plan): holds if it lies above 0, does not hold if below, else inconclusive (also when "
    "the raw IoU_cons is undefined); not testable where the safeguard did not fire.",
    reads="estimates and dev_estimates (Base, Sum; headline template and its variants), templates",
    sources=(
        Citation(
            "§5.5",
            "Applying a fixed-threshold safeguard (set to 0.5) significantly improved "
            "consistency (IoUcons), demonstrating that the correction mitigates the sensitivity to "
            "poorly calibrated thresholds.",
            "Table 3",
        ),
        Citation(
            "§5.5",
            "To address this issue, we introduced a threshold correction rule as a safeguard: "
            "when an unreasonable threshold is detected, we override it and set the threshold to 0.5.",
        ),
        Citation(
            "§5.5",
            "In Table 3, we observe that the probing methods exhibited poor intra-method "
            "consistency in its AskCal method on the HellaSwag dataset (with only 0.05 IoUcons in "
            "Options variant).",
        ),
        Citation(
            "§5.5",
            "As shown in Table 3, the IoUcons scores increased across all variants, "
            "demonstrating that the threshold correction significantly mitigated the instability "
            "caused by poor threshold calibration.",
        ),
    ),
    number=PaperNumber(
        "AskCal IoU_cons as low as 0.05 without the correction (Options); with the threshold set to 0.5 "
        "it increased across all variants",
        "Mistral-7B",
        setting="HellaSwag (Table 3, §5.5)",
    ),
    preconditions=("a variant of the headline template", "a degenerate dev threshold (the safeguard fired)"),
)
def threshold_safeguard_raises_iou(t: StoreTables) -> list[Finding]:
    key = "threshold_safeguard_raises_iou"
    decided = decided_rows(t, [BASELINE])
    raw = without_safeguard(decided) if not decided.is_empty() else decided

    def measure(setup: str, subject: str, wide: pl.DataFrame, seeds: list) -> list[Finding]:
        fired = decided.filter(pl.col("setup").is_in([ORIGINAL, setup]) & pl.col("fallback"))
        if fired.is_empty():
            return not_testable(
                key,
                t,
                subject,
                "the safeguard did not fire: every dev-tuned threshold "
                "separated (accepted and rejected under 95 % of the dev rows)",
            )
        if fired["n_dev"].min() == 0:
            return not_testable(key, t, subject, f"no dev rows to tune a threshold on: {BUILD} (dev 25 %)")
        raw_wide, _ = intra_items(raw, BASELINE, setup)
        raw_accepts = [pl.col(c).alias(f"{c}_raw") for c in raw_wide.columns if c.startswith("accept")]
        both = wide.join(
            raw_wide.select(*_ITEM, *raw_accepts),
            on=_ITEM,
            how="inner",
            nulls_equal=True,
        ).sort(_ITEM, nulls_last=True)
        with_points, with_boot = intra_measures(both, len(seeds))
        swapped = both.with_columns(
            pl.col(f"{c}_raw").alias(c)
            for c in both.columns
            if c.startswith("accept") and not c.endswith("_raw")
        )
        raw_points, raw_boot = intra_measures(swapped, len(seeds))
        a, b = float(with_points["iou_cons"].mean()), float(raw_points["iou_cons"].mean())
        diff = a - b
        low, high = _interval(with_boot["iou_cons"].mean(axis=1) - raw_boot["iou_cons"].mean(axis=1), diff)
        which = ", ".join(sorted(set(fired["setup"].to_list())))
        return [
            interval_finding(
                key,
                t,
                subject,
                "positive",
                diff,
                low,
                high,
                both.height,
                "ΔIoU_cons",
                f"; IoU_cons with the safeguard {fmt(a)}, at the raw dev split {fmt(b)}",
                f"the safeguard fired on {which}" + ("; raw IoU_cons undefined" if math.isnan(b) else ""),
            )
        ]

    return per_variant(
        key,
        t,
        decided,
        (*ZERO_SHOT, ONE_SHOT),
        lambda setup: f"Base's IoU_cons with − without the 0.5 safeguard, original vs {setup}",
        measure,
    )
