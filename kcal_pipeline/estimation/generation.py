"""Confidence from generated answers (issue 33; MACE §4.1 and §6, Wang et al. 2026): the single-turn
methods that need only sampled responses, their log-probabilities and their clusters.

Input: one row per response (the `responses` frame): instance_id, sample (0 = the greedy answer,
1 … N = sampled at the generation temperature), response (its text), logprob_sum (log p of the
response's tokens and of the stop token that ended it, given the prompt), n_scored (how many tokens
that is), cluster (answer_matching.AnswerMatch.cluster: the
entity it names, or its normalised text) and correct (it names a gold entity). Every estimator
returns, per instance, the cluster it predicts, whether that cluster is gold and a confidence. With
a(r) = exp(logprob_sum(r)) and S = the N sampled responses of an instance:

- prob_entropy:  C = (1/N) Σ_{r∈S} log a(r) = −PE, predictive entropy's Monte-Carlo estimate (score)
- nprob_entropy: C = (1/N) Σ_{r∈S} log a(r) / n_scored(r), length-normalised (score)
- sem_entropy:   C = Σ_c p(c) log p(c) = −SE, p(c) = Σ_{r∈U∩c} a(r) / Σ_{r∈U} a(r) over the
                 distinct responses U of S (Kuhn et al. 2023: a repeated string counts once) (score)
- perplexity:    C = exp(log a(g) / n_scored(g)) = 1 / PPL of the greedy answer g (probability)
- consis:        C = |{r∈S : cluster(r) = cluster(g)}| / N (probability)
- sca / snca / sfca with τ (as estimation/multi_answer.py, a sample being one response):
  SCA_τ(c) = (1/N) Σ_{r∈S∩c} a(r)·1[a(r) > τ]; ŷ = argmax_c SCA_0(c) (ties: the smallest cluster
  name); SCA = Σ_c SCA_τ(c) (≤ 1: a mean of probabilities, no cap needed);
  SNCA = SCA_τ(ŷ) / Σ_c SCA_τ(c) (0 when nothing is above τ); SFCA = |{r∈S∩ŷ : a(r) > τ}| / N.
The entropies and the single-turn methods predict the greedy answer's cluster; the SCA family ŷ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import polars as pl

from kcal_pipeline.scoring.generation import GREEDY  # the `sample` of the greedy answer

PAPER = "Wang et al. 2026 (MACE)"
RESPONSE_COLUMNS = {
    "instance_id": pl.String,
    "sample": pl.Int64,
    "response": pl.String,
    "logprob_sum": pl.Float64,
    "n_scored": pl.Int64,
    "cluster": pl.String,
    "correct": pl.Boolean,
}
ESTIMATE_COLUMNS = ["instance_id", "predicted_cluster", "correct", "confidence"]

GenerationFn = Callable[[pl.DataFrame], pl.DataFrame]


@dataclass(frozen=True)
class GenerationEstimatorSpec:
    """One estimator over generated responses: like EstimatorSpec (registry.py), instance grain."""

    name: str
    label: str
    family: str
    fn: GenerationFn
    output_kind: Literal["probability", "score"]
    paper: str = PAPER


GENERATION_ESTIMATORS: dict[str, GenerationEstimatorSpec] = {}


def register_generation(
    name: str, *, label: str, family: str, output_kind: str
) -> Callable[[GenerationFn], GenerationFn]:
    """Add a generation estimator; a second one under the same name is a bug, not an override."""

    def add(fn: GenerationFn) -> GenerationFn:
        if name in GENERATION_ESTIMATORS:
            raise ValueError(f"generation estimator {name!r} is already registered")
        GENERATION_ESTIMATORS[name] = GenerationEstimatorSpec(name, label, family, fn, output_kind)  # type: ignore[arg-type]
        return fn

    return add


def check_responses(responses: pl.DataFrame) -> pl.DataFrame:
    """The responses with the declared dtypes, sorted; a missing column, a question without its greedy
    answer or without sampled ones, or a non-positive token count is an error naming it."""
    missing = [c for c in RESPONSE_COLUMNS if c not in responses.columns]
    if missing:
        raise ValueError(f"responses: missing column(s) {missing}; expected {list(RESPONSE_COLUMNS)}")
    # One row order, so sums (and so the estimates) are the same bits whatever order rows came in.
    frame = responses.select([pl.col(c).cast(t) for c, t in RESPONSE_COLUMNS.items()]).sort(
        "instance_id", "sample"
    )
    bad = frame.filter(pl.col("n_scored") <= 0)
    if bad.height:
        row = bad.row(0, named=True)
        raise ValueError(
            f"responses: n_scored {row['n_scored']} of instance {row['instance_id']!r} is not positive"
        )
    counts = frame.group_by("instance_id").agg(
        greedy=(pl.col("sample") == GREEDY).sum(), sampled=(pl.col("sample") > GREEDY).sum()
    )
    wrong = counts.filter((pl.col("greedy") != 1) | (pl.col("sampled") == 0)).sort("instance_id")
    if wrong.height:
        row = wrong.row(0, named=True)
        raise ValueError(
            f"responses: instance {row['instance_id']!r} has {row['greedy']} greedy answer(s) (sample 0) and "
            f"{row['sampled']} sampled one(s); each needs exactly one greedy answer and at least one sample"
        )
    return frame


def _greedy(responses: pl.DataFrame) -> pl.DataFrame:
    return responses.filter(pl.col("sample") == GREEDY).select(
        "instance_id",
        predicted_cluster="cluster",
        correct="correct",
        logprob_sum="logprob_sum",
        n_scored="n_scored",
    )


def _sampled(responses: pl.DataFrame) -> pl.DataFrame:
    return responses.filter(pl.col("sample") > GREEDY)


def _with_greedy(responses: pl.DataFrame, confidence: pl.DataFrame) -> pl.DataFrame:
    """Confidence (instance_id, confidence) beside the greedy answer's cluster and correctness."""
    return _greedy(responses).join(confidence, on="instance_id").select(ESTIMATE_COLUMNS).sort("instance_id")


@register_generation("prob_entropy", label="Prob Entropy", family="generation_entropy", output_kind="score")
def prob_entropy(responses: pl.DataFrame) -> pl.DataFrame:
    mean = _sampled(responses).group_by("instance_id").agg(confidence=pl.col("logprob_sum").mean())
    return _with_greedy(responses, mean)


@register_generation(
    "nprob_entropy", label="N-Prob Entropy", family="generation_entropy", output_kind="score"
)
def nprob_entropy(responses: pl.DataFrame) -> pl.DataFrame:
    mean = (
        _sampled(responses)
        .group_by("instance_id")
        .agg(confidence=(pl.col("logprob_sum") / pl.col("n_scored")).mean())
    )
    return _with_greedy(responses, mean)


@register_generation("sem_entropy", label="Sem Entropy", family="generation_entropy", output_kind="score")
def sem_entropy(responses: pl.DataFrame) -> pl.DataFrame:
    distinct = _sampled(responses).unique(["instance_id", "response"], keep="first")
    mass = distinct.group_by("instance_id", "cluster").agg(mass=pl.col("logprob_sum").exp().sum())
    p = pl.col("mass") / pl.col("mass").sum().over("instance_id")
    entropy = (
        mass.with_columns(p=p)
        .group_by("instance_id")
        .agg(confidence=pl.when(pl.col("p") > 0).then(pl.col("p") * pl.col("p").log()).otherwise(0.0).sum())
    )
    return _with_greedy(responses, entropy)


@register_generation(
    "perplexity", label="Perplexity", family="generation_single_turn", output_kind="probability"
)
def perplexity(responses: pl.DataFrame) -> pl.DataFrame:
    greedy = _greedy(responses).with_columns(confidence=(pl.col("logprob_sum") / pl.col("n_scored")).exp())
    return greedy.select(ESTIMATE_COLUMNS).sort("instance_id")


@register_generation("consis", label="Consis", family="generation_single_turn", output_kind="probability")
def consis(responses: pl.DataFrame) -> pl.DataFrame:
    greedy = _greedy(responses).select("instance_id", greedy_cluster="predicted_cluster")
    share = (
        _sampled(responses)
        .join(greedy, on="instance_id")
        .group_by("instance_id")
        .agg(confidence=(pl.col("cluster") == pl.col("greedy_cluster")).mean())
    )
    return _with_greedy(responses, share)


def _cluster_sums(responses: pl.DataFrame, tau: float) -> pl.DataFrame:
    """Per (instance, cluster): SCA_0, SCA_τ and the count of its samples above τ, over N."""
    sampled = _sampled(responses).with_columns(
        a=pl.col("logprob_sum").exp(), n=pl.len().over("instance_id").cast(pl.Float64)
    )
    return sampled.group_by("instance_id", "cluster").agg(
        sca0=(pl.col("a") / pl.col("n")).sum(),
        sca=(pl.when(pl.col("a") > tau).then(pl.col("a")).otherwise(0.0) / pl.col("n")).sum(),
        frequent=((pl.col("a") > tau).cast(pl.Float64) / pl.col("n")).sum(),
        correct=pl.col("correct").first(),
    )


def multi_answer(responses: pl.DataFrame, tau: float) -> dict[str, pl.DataFrame]:
    """SCA, SNCA and SFCA at τ (see the module docstring), each per instance."""
    sums = _cluster_sums(responses, tau)
    best = (
        sums.sort(["instance_id", "sca0", "cluster"], descending=[False, True, False])
        .group_by("instance_id", maintain_order=True)
        .first()
        .select(
            "instance_id", predicted_cluster="cluster", correct="correct", top_sca="sca", top_freq="frequent"
        )
    )
    total = sums.group_by("instance_id").agg(total=pl.col("sca").sum())
    joined = best.join(total, on="instance_id").sort("instance_id")
    confidences = {
        "sca": pl.col("total"),
        "snca": pl.when(pl.col("total") > 0).then(pl.col("top_sca") / pl.col("total")).otherwise(0.0),
        "sfca": pl.col("top_freq"),
    }
    return {
        name: joined.with_columns(confidence=expr).select(ESTIMATE_COLUMNS)
        for name, expr in confidences.items()
    }


for _name, _label in (("sca", "SCA"), ("snca", "SNCA"), ("sfca", "SFCA")):
    register_generation(
        f"gen_{_name}_tau0",
        label=f"{_label} (τ=0, generated)",
        family="generation_multi_answer",
        output_kind="probability",
    )(lambda responses, _which=_name: multi_answer(responses, 0.0)[_which])


def knowledge_coverage(responses: pl.DataFrame, gold_counts: pl.DataFrame, tau: float = 0.1) -> pl.DataFrame:
    """MACE §5.3: per instance, the share of its gold answers whose cluster's SCA_0 (the mean of a(r)
    over its samples) exceeds τ. `gold_counts`: instance_id, n_gold."""
    sums = _cluster_sums(check_responses(responses), tau)
    covered = (
        sums.filter(pl.col("correct") & (pl.col("sca0") > tau)).group_by("instance_id").agg(covered=pl.len())
    )
    return (
        gold_counts.select("instance_id", "n_gold")
        .join(covered, on="instance_id", how="left")
        .with_columns(coverage=pl.col("covered").fill_null(0) / pl.col("n_gold"))
        .select("instance_id", "n_gold", "coverage")
        .sort("instance_id")
    )


def generation_estimates(responses: pl.DataFrame) -> pl.DataFrame:
    """Every registered generation estimator on `responses`: the estimates table's shape (one row per
    instance and estimator, with its output kind)."""
    frame = check_responses(responses)
    return pl.concat(
        [
            spec.fn(frame).with_columns(estimator=pl.lit(spec.name), output_kind=pl.lit(spec.output_kind))
            for spec in GENERATION_ESTIMATORS.values()
        ]
    )
