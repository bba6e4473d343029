"""Confidence the model states or judges when asked (issue 33; MACE §4.1 and App. B.1, kcal's reading):
the verbal methods (Verb, Verb-Topk and their consistency variants, Xiong et al. 2024) and the
double-turn ones (P_True, Kadavath et al. 2022; Self-Ask), read from the prompted rows of the
`generations` table.

Each prompt's rows are first read into a frame (read_prompt): "verb" rows into the stated answer,
its cluster (answer_matching) and confidence v; "verb_topk" rows into one row per guess j (its
cluster and probability p); "self_ask*" rows into a confidence; "p_true*" rows as they are (the
judgement class and p_true). Then, with ŷ_ans the cluster of the "answer" prompt's greedy response,
ŷ_verb the cluster of the greedy verb answer, ŷ_topk that of the greedy verb_topk's first guess and S
the sampled rows (sample ≥ 1) of the prompt:

- verb:             ŷ_verb, C = v of the greedy verb response
- verb_topk:        ŷ_topk, C = p of that first guess
- consis_verb:      ŷ_verb, C = Σ_{i∈S} 1[c_i = ŷ_verb] v_i / Σ_{i∈S} v_i over the samples whose
                    answer and confidence parse (0 when Σ v_i = 0; refusal NO_PARSEABLE_SAMPLE when
                    none parses, the greedy response's reason when its answer does not)
- consis_verb_topk: ŷ_topk, C = Σ_{i∈S,j} 1[c_ij = ŷ_topk] p_ij / Σ_{i∈S,j} p_ij over every guess
                    of the samples that parse (0 when the sum is 0; NO_PARSEABLE_SAMPLE likewise)
- p_true_prob:      ŷ_ans, C = p_true = p(True) / (p(True) + p(False)) of the "p_true" prompt
- p_true_consis:    ŷ_ans, C = |{i∈S : judgement_i = "true"}| / |S| (NO_SAMPLE when S is empty)
- p_true_prob_cand, p_true_consis_cand: the same on "p_true_cand" (candidates listed in the prompt)
- self_ask:         ŷ_ans, C = parse_verbal_confidence(the greedy "self_ask" response)
- self_ask_cand:    the same on "self_ask_cand"

An estimator that cannot read an instance's prediction or confidence gives it a refusal reason
(the greedy response's own parse failure, or the reasons above); the entry point
(generation.estimate_generations) turns every refused row into predicted_id null, correct false and
confidence null.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import polars as pl

from kcal_pipeline.estimation.answer_matching import AnswerIndex
from kcal_pipeline.estimation.verbal import parse_topk_guesses, parse_verbal_answer, parse_verbal_confidence
from kcal_pipeline.scoring.generation import GREEDY

ANSWER = "answer"
VERB, VERB_TOPK = "verb", "verb_topk"
SELF_ASK, SELF_ASK_CAND = "self_ask", "self_ask_cand"
P_TRUE, P_TRUE_CAND = "p_true", "p_true_cand"
PROMPTED = (VERB, VERB_TOPK, SELF_ASK, SELF_ASK_CAND, P_TRUE, P_TRUE_CAND)
NO_PARSEABLE_SAMPLE = "no_parseable_sample"
NO_SAMPLE = "no_sample"
NO_P_TRUE = "no_p_true"
TRUE_JUDGEMENT = "true"

PromptFrames = Mapping[str, pl.DataFrame]  # prompt → its rows, read (matched / parsed)
_KEY = ["instance_id", "sample"]


def _read_verb(rows: pl.DataFrame, indexes: Mapping[str, AnswerIndex]) -> pl.DataFrame:
    parsed = [parse_verbal_answer(text) for text in rows["response"]]
    matches = [
        indexes[instance].match(answer) if answer is not None else None
        for instance, (answer, _, _) in zip(rows["instance_id"], parsed, strict=True)
    ]
    return rows.select(_KEY).with_columns(
        answer=pl.Series([answer for answer, _, _ in parsed], dtype=pl.String),
        cluster=pl.Series([m.cluster if m else None for m in matches], dtype=pl.String),
        correct=pl.Series([m is not None and m.status == "correct" for m in matches], dtype=pl.Boolean),
        confidence=pl.Series([confidence for _, confidence, _ in parsed], dtype=pl.Float64),
        refusal=pl.Series([reason for _, _, reason in parsed], dtype=pl.String),
    )


_GUESS_SCHEMA = {
    "instance_id": pl.String,
    "sample": pl.Int64,
    "guess": pl.Int64,
    "cluster": pl.String,
    "correct": pl.Boolean,
    "probability": pl.Float64,
    "refusal": pl.String,
}


def _read_topk(rows: pl.DataFrame, indexes: Mapping[str, AnswerIndex]) -> pl.DataFrame:
    """One row per guess (guess = 1, 2, … in text order); a response with none, one row with its reason."""
    records = []
    for instance, sample, text in rows.select(*_KEY, "response").iter_rows():
        guesses, reason = parse_topk_guesses(text)
        if reason is not None:
            records.append((instance, sample, None, None, False, None, reason))
        for number, (answer, probability) in enumerate(guesses, start=1):
            match = indexes[instance].match(answer)
            records.append(
                (instance, sample, number, match.cluster, match.status == "correct", probability, None)
            )
    return pl.DataFrame(records, schema=_GUESS_SCHEMA, orient="row")


def _read_self_ask(rows: pl.DataFrame, _indexes: Mapping[str, AnswerIndex]) -> pl.DataFrame:
    parsed = [parse_verbal_confidence(text) for text in rows["response"]]
    return rows.select(_KEY).with_columns(
        confidence=pl.Series([value for value, _ in parsed], dtype=pl.Float64),
        refusal=pl.Series([reason for _, reason in parsed], dtype=pl.String),
    )


def _read_p_true(rows: pl.DataFrame, _indexes: Mapping[str, AnswerIndex]) -> pl.DataFrame:
    return rows.select(*_KEY, judgement="response", p_true="p_true")


_READERS: dict[str, Callable[[pl.DataFrame, Mapping[str, AnswerIndex]], pl.DataFrame]] = {
    VERB: _read_verb,
    VERB_TOPK: _read_topk,
    SELF_ASK: _read_self_ask,
    SELF_ASK_CAND: _read_self_ask,
    P_TRUE: _read_p_true,
    P_TRUE_CAND: _read_p_true,
}


def read_prompt(prompt: str, rows: pl.DataFrame, indexes: Mapping[str, AnswerIndex]) -> pl.DataFrame:
    """One prompted prompt's generations rows (sorted by instance and sample), read as the module
    docstring says; every instance needs its AnswerIndex."""
    return _READERS[prompt](rows, indexes)


def _greedy(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("sample") == GREEDY)


def _sampled(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("sample") > GREEDY)


def _answer_prediction(frames: PromptFrames) -> pl.DataFrame:
    """ŷ_ans: the greedy answer's cluster and correctness, per instance."""
    return _greedy(frames[ANSWER]).select("instance_id", predicted_id="cluster", correct="correct")


def _with_answer(frames: PromptFrames, confidence: pl.DataFrame) -> pl.DataFrame:
    """ŷ_ans beside (instance_id, confidence, refusal)."""
    return _answer_prediction(frames).join(confidence, on="instance_id", how="left").sort("instance_id")


def verb(frames: PromptFrames) -> pl.DataFrame:
    return _greedy(frames[VERB]).select(
        "instance_id", "confidence", "refusal", predicted_id="cluster", correct="correct"
    )


def _first_guess(frames: PromptFrames) -> pl.DataFrame:
    """ŷ_topk: the greedy verb_topk response's first guess (or that response's refusal)."""
    return (
        _greedy(frames[VERB_TOPK])
        .filter(pl.col("guess").is_null() | (pl.col("guess") == 1))
        .select("instance_id", "refusal", predicted_id="cluster", correct="correct", confidence="probability")
    )


def verb_topk(frames: PromptFrames) -> pl.DataFrame:
    return _first_guess(frames)


def _consistency(greedy: pl.DataFrame, sampled: pl.DataFrame, weight: str) -> pl.DataFrame:
    """C = Σ 1[cluster = ŷ] w / Σ w over the parsed sampled rows (0 when Σ w = 0). Without ŷ (the
    greedy answer did not parse) the greedy response's refusal; without a parsed sample
    NO_PARSEABLE_SAMPLE. The greedy confidence is not used, so its failure alone refuses nothing."""
    parsed = sampled.filter(pl.col("refusal").is_null()).join(
        greedy.select("instance_id", "predicted_id"), on="instance_id"
    )
    agreeing = pl.when(pl.col("cluster") == pl.col("predicted_id")).then(pl.col(weight)).otherwise(0.0)
    sums = parsed.group_by("instance_id").agg(agreeing=agreeing.sum(), total=pl.col(weight).sum())
    share = pl.when(pl.col("total") > 0).then(pl.col("agreeing") / pl.col("total")).otherwise(0.0)
    return (
        greedy.drop("confidence")
        .join(sums, on="instance_id", how="left")
        .with_columns(
            confidence=share,
            refusal=pl.when(pl.col("predicted_id").is_null())
            .then("refusal")
            .when(pl.col("total").is_null())
            .then(pl.lit(NO_PARSEABLE_SAMPLE)),
        )
        .select("instance_id", "predicted_id", "correct", "confidence", "refusal")
    )


def consis_verb(frames: PromptFrames) -> pl.DataFrame:
    return _consistency(verb(frames), _sampled(frames[VERB]), "confidence")


def consis_verb_topk(frames: PromptFrames) -> pl.DataFrame:
    return _consistency(_first_guess(frames), _sampled(frames[VERB_TOPK]), "probability")


def _p_true_prob(prompt: str) -> Callable[[PromptFrames], pl.DataFrame]:
    def estimate(frames: PromptFrames) -> pl.DataFrame:
        value = pl.col("p_true")
        readable = value.is_not_null() & value.is_finite()
        confidence = _greedy(frames[prompt]).select(
            "instance_id",
            confidence=pl.when(readable).then(value),
            refusal=pl.when(readable).then(pl.lit(None, pl.String)).otherwise(pl.lit(NO_P_TRUE)),
        )
        return _with_answer(frames, confidence)

    return estimate


def _p_true_consis(prompt: str) -> Callable[[PromptFrames], pl.DataFrame]:
    def estimate(frames: PromptFrames) -> pl.DataFrame:
        shares = (
            _sampled(frames[prompt])
            .group_by("instance_id")
            .agg(confidence=(pl.col("judgement") == TRUE_JUDGEMENT).mean())
        )
        confidence = (
            _greedy(frames[prompt])
            .select("instance_id")
            .join(shares, on="instance_id", how="left")
            .with_columns(refusal=pl.when(pl.col("confidence").is_null()).then(pl.lit(NO_SAMPLE)))
        )
        return _with_answer(frames, confidence)

    return estimate


def _self_ask(prompt: str) -> Callable[[PromptFrames], pl.DataFrame]:
    def estimate(frames: PromptFrames) -> pl.DataFrame:
        return _with_answer(frames, _greedy(frames[prompt]).select("instance_id", "confidence", "refusal"))

    return estimate


p_true_prob = _p_true_prob(P_TRUE)
p_true_consis = _p_true_consis(P_TRUE)
p_true_prob_cand = _p_true_prob(P_TRUE_CAND)
p_true_consis_cand = _p_true_consis(P_TRUE_CAND)
self_ask = _self_ask(SELF_ASK)
self_ask_cand = _self_ask(SELF_ASK_CAND)
