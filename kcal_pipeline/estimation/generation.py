"""Confidence from generated answers (issue 33; MACE §4.1 and §6, Wang et al. 2026): one entry point
from the `generations` table to the estimates (estimate_generations), the registry of the generation
estimators in MACE's table order, and the single-turn methods that need only sampled responses,
their log-probabilities and their clusters (the verbal and double-turn ones: estimation/prompted.py).

estimate_generations checks the generations, reads each prompt's rows (the "answer" prompt's
responses matched whole by answer_matching, the prompted ones by prompted.read_prompt), runs every
registered estimator whose prompts are all present and says, per estimator, whether it ran, how many
instances it answered or refused and why. A refused instance (no prediction or no confidence) is a
row with predicted_id null, correct false, confidence null and its reason: one rule for every method.

The single-turn methods read the "answer" prompt's rows (the `responses` frame): instance_id,
sample (0 = the greedy answer, 1 … N = sampled at the generation temperature), response (its
text), logprob_sum (log p of the response's tokens and of the stop token that ended it, given the
prompt), n_scored (how many tokens that is), cluster (answer_matching.AnswerMatch.cluster: the
entity it names, or its normalised text) and correct (it names a gold entity). Every estimator
returns, per instance, the cluster it predicts (predicted_id), whether that cluster is gold, a
confidence and a refusal reason (null when it has a confidence). With
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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import polars as pl

from kcal_pipeline.estimation import prompted
from kcal_pipeline.estimation.answer_matching import AnswerIndex, with_matches
from kcal_pipeline.estimation.prompted import ANSWER, PROMPTED, PromptFrames
from kcal_pipeline.scoring.generation import GREEDY  # the `sample` of the greedy answer

PAPER = "Wang et al. 2026 (MACE)"
PROMPTS = (ANSWER, *PROMPTED)
# The generations contract's columns this stage reads (common to every prompt; p_true is null except
# on the p_true* prompts).
GENERATION_COLUMNS = {
    "instance_id": pl.String,
    "prompt": pl.String,
    "sample": pl.Int64,
    "response": pl.String,
    "n_scored": pl.Int64,
    "logprob_sum": pl.Float64,
    "p_true": pl.Float64,
}
RESPONSE_COLUMNS = {
    "instance_id": pl.String,
    "sample": pl.Int64,
    "response": pl.String,
    "logprob_sum": pl.Float64,
    "n_scored": pl.Int64,
    "cluster": pl.String,
    "correct": pl.Boolean,
}
ESTIMATE_COLUMNS = ["instance_id", "predicted_id", "correct", "confidence", "refusal"]
ESTIMATES_SCHEMA = {
    "instance_id": pl.String,
    "estimator": pl.String,
    "output_kind": pl.String,
    "predicted_id": pl.String,
    "correct": pl.Boolean,
    "confidence": pl.Float64,
    "refusal": pl.String,
}
STATUS_SCHEMA = {
    "estimator": pl.String,
    "label": pl.String,
    "family": pl.String,
    "prompts": pl.String,
    "status": pl.String,
    "rows": pl.Int64,
    "answered": pl.Int64,
    "refused": pl.Int64,
    "refusals": pl.String,
    "reason": pl.String,
}

# prompt → its rows as read (matched, parsed) → one row per instance: ESTIMATE_COLUMNS
GenerationFn = Callable[[PromptFrames], pl.DataFrame]


@dataclass(frozen=True)
class GenerationEstimatorSpec:
    """One estimator over generated responses: like EstimatorSpec (registry.py), instance grain;
    `prompts` are the generations prompts it reads (it is skipped when one is absent)."""

    name: str
    label: str
    family: str
    fn: GenerationFn
    output_kind: Literal["probability", "score"]
    prompts: tuple[str, ...] = (ANSWER,)
    paper: str = PAPER


GENERATION_ESTIMATORS: dict[str, GenerationEstimatorSpec] = {}


def register_generation(
    name: str, *, label: str, family: str, output_kind: str, prompts: tuple[str, ...] = (ANSWER,)
) -> Callable[[GenerationFn], GenerationFn]:
    """Add a generation estimator; a second one under the same name is a bug, not an override."""

    def add(fn: GenerationFn) -> GenerationFn:
        if name in GENERATION_ESTIMATORS:
            raise ValueError(f"generation estimator {name!r} is already registered")
        unknown = [p for p in prompts if p not in PROMPTS]
        if unknown:
            raise ValueError(f"generation estimator {name!r}: unknown prompt(s) {unknown}")
        GENERATION_ESTIMATORS[name] = GenerationEstimatorSpec(
            name,
            label,
            family,
            fn,
            output_kind,  # type: ignore[arg-type]
            prompts,
        )
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
        predicted_id="cluster",
        correct="correct",
        logprob_sum="logprob_sum",
        n_scored="n_scored",
    )


def _sampled(responses: pl.DataFrame) -> pl.DataFrame:
    return responses.filter(pl.col("sample") > GREEDY)


def _with_greedy(responses: pl.DataFrame, confidence: pl.DataFrame) -> pl.DataFrame:
    """Confidence (instance_id, confidence) beside the greedy answer's cluster and correctness."""
    return _answered(_greedy(responses).join(confidence, on="instance_id")).sort("instance_id")


def _answered(frame: pl.DataFrame) -> pl.DataFrame:
    """ESTIMATE_COLUMNS of a method that never refuses."""
    return frame.with_columns(refusal=pl.lit(None, pl.String)).select(ESTIMATE_COLUMNS)


def prob_entropy(frames: PromptFrames) -> pl.DataFrame:
    responses = frames[ANSWER]
    mean = _sampled(responses).group_by("instance_id").agg(confidence=pl.col("logprob_sum").mean())
    return _with_greedy(responses, mean)


def nprob_entropy(frames: PromptFrames) -> pl.DataFrame:
    responses = frames[ANSWER]
    mean = (
        _sampled(responses)
        .group_by("instance_id")
        .agg(confidence=(pl.col("logprob_sum") / pl.col("n_scored")).mean())
    )
    return _with_greedy(responses, mean)


def sem_entropy(frames: PromptFrames) -> pl.DataFrame:
    responses = frames[ANSWER]
    distinct = _sampled(responses).unique(["instance_id", "response"], keep="first")
    mass = distinct.group_by("instance_id", "cluster").agg(mass=pl.col("logprob_sum").exp().sum())
    p = pl.col("mass") / pl.col("mass").sum().over("instance_id")
    entropy = (
        mass.with_columns(p=p)
        .group_by("instance_id")
        .agg(confidence=pl.when(pl.col("p") > 0).then(pl.col("p") * pl.col("p").log()).otherwise(0.0).sum())
    )
    return _with_greedy(responses, entropy)


def perplexity(frames: PromptFrames) -> pl.DataFrame:
    greedy = _greedy(frames[ANSWER]).with_columns(
        confidence=(pl.col("logprob_sum") / pl.col("n_scored")).exp()
    )
    return _answered(greedy).sort("instance_id")


def consis(frames: PromptFrames) -> pl.DataFrame:
    responses = frames[ANSWER]
    greedy = _greedy(responses).select("instance_id", greedy_cluster="predicted_id")
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
        .select("instance_id", predicted_id="cluster", correct="correct", top_sca="sca", top_freq="frequent")
    )
    total = sums.group_by("instance_id").agg(total=pl.col("sca").sum())
    joined = best.join(total, on="instance_id").sort("instance_id")
    confidences = {
        "sca": pl.col("total"),
        "snca": pl.when(pl.col("total") > 0).then(pl.col("top_sca") / pl.col("total")).otherwise(0.0),
        "sfca": pl.col("top_freq"),
    }
    return {name: _answered(joined.with_columns(confidence=expr)) for name, expr in confidences.items()}


def _multi_answer_at_zero(which: str) -> GenerationFn:
    return lambda frames: multi_answer(frames[ANSWER], 0.0)[which]


# MACE's table order (Table 3: the 15 methods of §4.1, then §6's SCA / SNCA / SFCA), its labels.
_P, _S = "probability", "score"
_ENTROPY, _VERBAL, _SINGLE, _DOUBLE = (
    f"generation_{f}" for f in ("entropy", "verbal", "single_turn", "double_turn")
)
_MULTI = "generation_multi_answer"
_TRUE, _TRUE_CAND = (ANSWER, prompted.P_TRUE), (ANSWER, prompted.P_TRUE_CAND)
for _name, _label, _family, _fn, _kind, _prompts in (
    ("prob_entropy", "Prob Entropy", _ENTROPY, prob_entropy, _S, (ANSWER,)),
    ("nprob_entropy", "N-Prob Entropy", _ENTROPY, nprob_entropy, _S, (ANSWER,)),
    ("sem_entropy", "Sem Entropy", _ENTROPY, sem_entropy, _S, (ANSWER,)),
    ("verb", "Verb", _VERBAL, prompted.verb, _P, (prompted.VERB,)),
    ("verb_topk", "Verb-Topk", _VERBAL, prompted.verb_topk, _P, (prompted.VERB_TOPK,)),
    ("consis", "Consis", _SINGLE, consis, _P, (ANSWER,)),
    ("consis_verb", "Consis-Verb", _VERBAL, prompted.consis_verb, _P, (prompted.VERB,)),
    ("consis_verb_topk", "Consis-Verb-Topk", _VERBAL, prompted.consis_verb_topk, _P, (prompted.VERB_TOPK,)),
    ("perplexity", "Perplexity", _SINGLE, perplexity, _P, (ANSWER,)),
    ("p_true_consis", "P_True-Consis", _DOUBLE, prompted.p_true_consis, _P, _TRUE),
    ("p_true_prob", "P_True-Prob", _DOUBLE, prompted.p_true_prob, _P, _TRUE),
    ("p_true_consis_cand", "P_True-Consis-Cand", _DOUBLE, prompted.p_true_consis_cand, _P, _TRUE_CAND),
    ("p_true_prob_cand", "P_True-Prob-Cand", _DOUBLE, prompted.p_true_prob_cand, _P, _TRUE_CAND),
    ("self_ask", "Self-Ask", _DOUBLE, prompted.self_ask, _P, (ANSWER, prompted.SELF_ASK)),
    ("self_ask_cand", "Self-Ask-Cand", _DOUBLE, prompted.self_ask_cand, _P, (ANSWER, prompted.SELF_ASK_CAND)),
    ("gen_sca_tau0", "SCA (τ=0, generated)", _MULTI, _multi_answer_at_zero("sca"), _P, (ANSWER,)),
    ("gen_snca_tau0", "SNCA (τ=0, generated)", _MULTI, _multi_answer_at_zero("snca"), _P, (ANSWER,)),
    ("gen_sfca_tau0", "SFCA (τ=0, generated)", _MULTI, _multi_answer_at_zero("sfca"), _P, (ANSWER,)),
):
    register_generation(_name, label=_label, family=_family, output_kind=_kind, prompts=_prompts)(_fn)


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


def check_generations(generations: pl.DataFrame, indexes: Mapping[str, AnswerIndex]) -> pl.DataFrame:
    """The generations' columns this stage reads, with their dtypes, sorted (one row order, so sums and
    so the estimates are the same bits whatever order rows came in). A missing column, an unknown
    prompt, an instance without an AnswerIndex, or an instance without exactly one greedy row
    (sample 0) of a prompt the generations hold is an error naming it."""
    missing = [c for c in GENERATION_COLUMNS if c not in generations.columns]
    if missing:
        raise ValueError(f"generations: missing column(s) {missing}; expected {list(GENERATION_COLUMNS)}")
    frame = generations.select([pl.col(c).cast(t) for c, t in GENERATION_COLUMNS.items()]).sort(
        "instance_id", "prompt", "sample"
    )
    unknown = sorted(set(frame["prompt"].drop_nulls()) - set(PROMPTS)) or (
        [None] if frame["prompt"].null_count() else []
    )
    if unknown:
        raise ValueError(f"generations: unknown prompt {unknown[0]!r}; known prompts: {', '.join(PROMPTS)}")
    unindexed = sorted(set(frame["instance_id"]) - set(indexes))
    if unindexed:
        raise ValueError(
            f"generations: instance {unindexed[0]!r} has no answer index (its gold and known entities)"
        )
    instances = frame.select("instance_id").unique()
    prompts = frame.select("prompt").unique()
    greedy = frame.group_by("instance_id", "prompt").agg(greedy=(pl.col("sample") == GREEDY).sum())
    wrong = (
        instances.join(prompts, how="cross")
        .join(greedy, on=["instance_id", "prompt"], how="left")
        .filter(pl.col("greedy").fill_null(0) != 1)
        .sort("instance_id", "prompt")
    )
    if wrong.height:
        row = wrong.row(0, named=True)
        raise ValueError(
            f"generations: instance {row['instance_id']!r} has {row['greedy'] or 0} greedy row(s) (sample 0) "
            f"of prompt {row['prompt']!r}; every instance needs exactly one of every prompt present"
        )
    return frame


def read_generations(
    generations: pl.DataFrame, indexes: Mapping[str, AnswerIndex]
) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """Checked generations, per prompt present, read for the estimators: the "answer" prompt's rows
    matched by their whole response (the `responses` frame), the prompted ones by
    prompted.read_prompt; and the answer rows with their match (with_matches: status, entity id,
    cluster; empty without that prompt), matched once for the estimators and the matches table."""
    frame = check_generations(generations, indexes)
    matched = with_matches(frame.filter(pl.col("prompt") == ANSWER), indexes)
    frames = {}
    for prompt in PROMPTS:
        rows = frame.filter(pl.col("prompt") == prompt)
        if rows.height:
            frames[prompt] = (
                check_responses(matched) if prompt == ANSWER else prompted.read_prompt(prompt, rows, indexes)
            )
    return frames, matched


@dataclass(frozen=True)
class GenerationResult:
    """`estimates`: one row per instance and estimator that ran (ESTIMATES_SCHEMA; refusals
    included); `status`: one row per registered estimator (STATUS_SCHEMA), in registry order;
    `matches`: the answer prompt's rows with their match (with_matches; none without that prompt),
    matched once for the estimators and the generation_matches table alike."""

    estimates: pl.DataFrame
    status: pl.DataFrame
    matches: pl.DataFrame


def _refusal_rule(estimates: pl.DataFrame) -> pl.DataFrame:
    """A refused row has no prediction and no confidence and is not correct; an answered one keeps
    them (correct false where the prediction has no match outcome)."""
    answered = pl.col("refusal").is_null()
    return estimates.with_columns(
        predicted_id=pl.when(answered).then("predicted_id"),
        correct=pl.when(answered).then(pl.col("correct").fill_null(False)).otherwise(False),
        confidence=pl.when(answered).then("confidence"),
    )


def _refusal_counts(refusals: pl.Series) -> str:
    """ "no_number: 12; ambiguous: 3": reasons by count, most first (ties by name); "" when none."""
    counts = refusals.drop_nulls().value_counts(name="n").sort(["n", refusals.name], descending=[True, False])
    return "; ".join(f"{reason}: {n}" for reason, n in counts.iter_rows())


def _skip_reason(missing: list[str]) -> str:
    names = ", ".join(repr(p) for p in missing)
    made = "the prompted methods" if set(missing) <= set(PROMPTED) else "the answer prompt"
    return f"no {names} rows: the generations were made without {made}"


def estimate_generations(generations: pl.DataFrame, indexes: Mapping[str, AnswerIndex]) -> GenerationResult:
    """Every registered generation estimator whose prompts are present in `generations` (the
    generations contract), with `indexes` the AnswerIndex of every instance: the estimates and,
    per estimator, whether it ran, its answered and refused counts, and why it was skipped."""
    frames, matches = read_generations(generations, indexes)
    estimates, status = [], []
    for spec in GENERATION_ESTIMATORS.values():
        row = {
            "estimator": spec.name,
            "label": spec.label,
            "family": spec.family,
            "prompts": ", ".join(spec.prompts),
        }
        missing = [p for p in spec.prompts if p not in frames]
        if missing:
            status.append(
                row
                | {"status": "skipped", "rows": 0, "answered": 0, "refused": 0, "refusals": ""}
                | {"reason": _skip_reason(missing)}
            )
            continue
        got = _refusal_rule(
            spec.fn(frames)
            .select(ESTIMATE_COLUMNS)
            .with_columns(estimator=pl.lit(spec.name), output_kind=pl.lit(spec.output_kind))
            .select([pl.col(c).cast(t) for c, t in ESTIMATES_SCHEMA.items()])
            .sort("instance_id")
        )
        answered = got["refusal"].null_count()
        status.append(
            row
            | {"status": "ran", "rows": got.height, "answered": answered, "refused": got.height - answered}
            | {"refusals": _refusal_counts(got["refusal"]), "reason": ""}
        )
        estimates.append(got)
    return GenerationResult(
        estimates=pl.concat(estimates) if estimates else pl.DataFrame(schema=ESTIMATES_SCHEMA),
        status=pl.DataFrame(status, schema=STATUS_SCHEMA),
        matches=matches,
    )
