"""Aggregations over the paraphrase templates (METHODS §2): Vote(k), Min and Max, each with an
Average and a Consistency confidence.

Each paraphrase template t that instance i has gives its own answer ỹ_t = argmax_o p_t(o) and
Base_t = max_o p_t(o) under the reduction; an aggregation picks one answer ŷ from them, and
    Average      C = (1/T_i) Σ_t 1[ỹ_t = ŷ] · Base_t
    Consistency  C = (1/T_i) Σ_t 1[ỹ_t = ŷ]            ∈ {0, 1/T_i, …, 1}
with T_i the number of paraphrase templates instance i has: it comes from the data, never a
constant. Only paraphrases (curated, generated: cube.paraphrase_templates) are aggregated: a
marker or perturbation variant restates its parent template, so counting it would give that
template a second vote, and a question template asks a different question.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from kcal_pipeline.estimation.cube import ALL_REDUCTIONS, OptionScoreCube
from kcal_pipeline.estimation.probabilities import option_probabilities, top_option
from kcal_pipeline.estimation.registry import NO_ANSWER, Estimate, register

PAPER = "Kissling et al."
# Vote(k) is registered for k = 2 … MAX_VOTE_K; on a cube it runs for k ≤ T (its `requires`), so
# vote2 is plurality and voteT unanimity. Twelve covers five curated templates plus generated
# paraphrases; more than that is unusual.
MAX_VOTE_K = 12
CONFIDENCES = ("average", "consistency")
# The vote shown as the aggregation family's one line (Kissling et al. read five paraphrases).
FAMILY_LINE_VOTE = "vote5"
NO_PARAPHRASES = "no paraphrase templates (curated or generated)"


@dataclass(frozen=True)
class TemplateAnswers:
    """Per instance and paraphrase template (`[I, P]`, P = the cube's paraphrase templates in
    ascending template order): its answer ỹ_t, its Base_t, and whether the instance has it."""

    answer: np.ndarray
    base: np.ndarray
    present: np.ndarray
    n_options: int

    @cached_property
    def n_templates(self) -> np.ndarray:
        """T_i [I]: the paraphrase templates each instance has."""
        return self.present.sum(axis=1)

    @cached_property
    def plurality(self) -> tuple[np.ndarray, np.ndarray]:
        """(the most frequent ỹ_t [I], its count [I]); the count is 0 where another answer has the
        same top count, since a tie for the top is no answer at any k."""
        votes = (self.answer[..., None] == np.arange(self.n_options)) & self.present[..., None]
        counts = votes.sum(axis=1)  # [I, O]
        top = counts.max(axis=1)
        alone = (counts == top[:, None]).sum(axis=1) == 1
        return counts.argmax(axis=1), np.where(alone, top, 0)


class _LastCube:
    """ỹ_t and Base_t of the last cube seen, per reduction: the 26 aggregation estimators of one
    (cube, reduction) share them, so the softmax over the cube runs once, not 26 times. A weak
    reference: the memo never keeps a cube alive, and a new cube replaces the old one's answers.
    The (cube, answers) pair is read and replaced as one tuple, so a thread working on another
    cube at the same time can cost a recomputation but never mix two cubes' answers."""

    def __init__(self) -> None:
        self._state: tuple[Callable[[], OptionScoreCube | None], dict[str, TemplateAnswers]] = (
            lambda: None,
            {},
        )

    def get(self, cube: OptionScoreCube, reduction: str) -> TemplateAnswers:
        seen, answers = self._state
        if seen() is not cube:
            answers = {}
            self._state = (weakref.ref(cube), answers)
        if reduction not in answers:
            answers[reduction] = _template_answers(cube, reduction)
        return answers[reduction]


def _template_answers(cube: OptionScoreCube, reduction: str) -> TemplateAnswers:
    templates = cube.paraphrase_templates()
    ll = cube.ll(reduction)[:, templates, :]
    answer, base = top_option(ll, option_probabilities(ll))
    return TemplateAnswers(answer, base, cube.present[:, templates], cube.shape[2])


_MEMO = _LastCube()


def template_answers(cube: OptionScoreCube, reduction: str) -> TemplateAnswers:
    """ỹ_t and Base_t on every paraphrase template (argmax ties to the lowest option index)."""
    return _MEMO.get(cube, reduction)


def confidences(answers: TemplateAnswers, predicted: np.ndarray) -> dict[str, np.ndarray]:
    """{"average", "consistency"} → C [I] of the answers ŷ = `predicted`; 0 for NO_ANSWER (no ỹ_t
    equals it) and for an instance without paraphrase templates."""
    agree = answers.present & (answers.answer == predicted[:, None])
    n = answers.n_templates.astype(np.float64)
    totals = {"average": np.where(agree, answers.base, 0.0).sum(axis=1), "consistency": agree.sum(axis=1)}
    return {kind: np.divide(total, n, out=np.zeros(len(n)), where=n > 0) for kind, total in totals.items()}


def vote(answers: TemplateAnswers, k: int) -> np.ndarray:
    """ŷ [I] of Vote(k): the most frequent ỹ_t if it occurs ≥ k times and no other answer has the
    same count (a tie for the top count is no answer, as in the seed's code); else NO_ANSWER."""
    leader, count = answers.plurality
    return np.where(count >= k, leader, NO_ANSWER)


def extreme_template(answers: TemplateAnswers, largest: bool) -> np.ndarray:
    """ŷ [I] of Min / Max: ỹ_t of the template with the smallest / largest Base_t (ties to the
    lowest template index: np.argmin/argmax take the first); 0 where an instance has none (its
    row is not written)."""
    masked = np.where(answers.present, answers.base, -np.inf if largest else np.inf)
    chosen = masked.argmax(axis=1) if largest else masked.argmin(axis=1)
    return np.take_along_axis(answers.answer, chosen[:, None], axis=1)[:, 0]


Chooser = Callable[[TemplateAnswers], np.ndarray]


def _needs_paraphrases(n: int) -> Callable[[OptionScoreCube, str], str | None]:
    def check(cube: OptionScoreCube, reduction: str) -> str | None:
        found = len(cube.paraphrase_templates())
        if found >= n:
            return None
        # one text for every vote level, so a run's skipped levels share one log line
        return f"its vote level is above the cube's {found} paraphrase templates" if n > 1 else NO_PARAPHRASES

    return check


def _register(name: str, label: str, choose: Chooser, needs_templates: int, docstring: str) -> None:
    """`{name}_average` and `{name}_consistency`: the same answer ŷ, two confidences."""
    for kind in CONFIDENCES:

        def estimate(cube: OptionScoreCube, reduction: str, kind: str = kind) -> Estimate:
            answers = template_answers(cube, reduction)
            predicted = choose(answers)
            return Estimate(predicted, confidences(answers, predicted)[kind], rows=answers.n_templates > 0)

        estimate.__name__ = f"{name}_{kind}"
        estimate.__doc__ = f"{docstring} C = {kind.title()} over the paraphrase templates."
        register(
            f"{name}_{kind}",
            label=f"{label} {kind.title()}",
            family="aggregation",
            grain="instance",
            output_kind="probability",
            reductions=ALL_REDUCTIONS,
            requires=_needs_paraphrases(needs_templates),
            paper=PAPER,
            family_line=name == FAMILY_LINE_VOTE and kind == CONFIDENCES[0],
        )(estimate)


for _k in range(2, MAX_VOTE_K + 1):
    _register(
        f"vote{_k}",
        f"Vote({_k})",
        lambda answers, k=_k: vote(answers, k),
        _k,
        f"ŷ = the most frequent template answer if it occurs ≥ {_k} times, alone at the top; else no answer.",
    )
_register(
    "min",
    "Min",
    lambda answers: extreme_template(answers, largest=False),
    1,
    "ŷ = the answer of the template with the smallest Base.",
)
_register(
    "max",
    "Max",
    lambda answers: extreme_template(answers, largest=True),
    1,
    "ŷ = the answer of the template with the largest Base.",
)
