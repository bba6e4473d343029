"""A slow, obviously-correct reference for SCA, SNCA and SFCA (MACE), one instance at a time.

Plain Python over the statement rows: no cube, no padding, no broadcasting. Each instance's samples
are read from its question templates' statements, each definition is written as its formula reads
(METHODS §2, kcal_pipeline/estimation/multi_answer.py), and τ is tuned by looping over the grid. For
tests only; never make it fast.
"""

from __future__ import annotations

import math

import polars as pl

from tests.estimation.reference import COLUMNS as ESTIMATE_COLUMNS
from tests.estimation.reference import SORT_KEYS, answer_space

TAU_GRID = (0.0, 1e-4, 1e-3, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)  # written out again on purpose
FIT_COLUMNS = {
    "model_id": pl.String,
    "relation_id": pl.String,
    "estimator": pl.String,
    "reduction": pl.String,
    "template_id": pl.String,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
    "parameter": pl.String,
    "value": pl.Float64,
    "n_dev": pl.Int64,
    "note": pl.String,
}


def question_templates(templates: pl.DataFrame, relation_id: str) -> set[str]:
    """The question templates; without any, the curated ones whose [X] comes before [Y]."""
    rows = templates.filter(pl.col("relation_id") == relation_id).iter_rows(named=True)
    rows = list(rows)
    questions = {r["template_id"] for r in rows if r["kind"] == "question"}
    if questions:
        return questions
    return {
        r["template_id"]
        for r in rows
        if r["kind"] == "curated" and r["text"].index("[X]") < r["text"].index("[Y]")
    }


class Instance:
    """One instance's samples: per question template, {option_index: a_t(o)} and its ỹ_t."""

    def __init__(self, instance_id: str, split: str | None, space: tuple[int, int]):
        self.instance_id, self.split, self.space = instance_id, split, space  # (k, draw)
        self.per_template: dict[str, dict[int, float]] = {}
        self.ll: dict[str, dict[int, float]] = {}
        self.object_of: dict[int, str] = {}
        self.gold: set[int] = set()

    def add(self, template_id: str, option: int, object_id: str, is_gold: bool, ll: float) -> None:
        self.ll.setdefault(template_id, {})[option] = ll
        self.per_template.setdefault(template_id, {})[option] = math.exp(ll)
        self.object_of[option] = object_id
        if is_gold:
            self.gold.add(option)

    def n_templates(self) -> int:
        return len(self.per_template)

    def sca(self, option: int, tau: float) -> float:
        """SCA_τ(C_m) = (1/T_q) Σ_t a_t(m)·1[a_t(m) > τ]; templates in id order."""
        total = 0.0
        for template_id in sorted(self.per_template):
            a = self.per_template[template_id].get(option, 0.0)
            if a > tau:
                total += a
        return total / self.n_templates()

    def options(self) -> list[int]:
        return sorted(self.object_of)

    def predicted(self) -> int:
        """argmax_m SCA_0(C_m) over the scored options; the first maximum (lowest index) wins."""
        best, best_value = None, -1.0
        for option in self.options():
            value = self.sca(option, 0.0)
            if value > best_value:
                best, best_value = option, value
        return best

    def template_answer(self, template_id: str) -> int:
        """ỹ_t = argmax_o a_t(o) (= argmax of ll_t); the lowest index among ties."""
        lls = self.ll[template_id]
        best = None
        for option in sorted(lls):
            if best is None or lls[option] > lls[best]:
                best = option
        return best

    def confidence(self, name: str, tau: float) -> float:
        y = self.predicted()
        if name == "sca":
            total = 0.0
            for option in self.options():
                total += self.sca(option, tau)
            return min(total, 1.0)  # capped: a confidence
        if name == "snca":
            total = 0.0
            for option in self.options():
                total += self.sca(option, tau)
            return self.sca(y, tau) / total if total > 0 else 0.0
        agreeing = 0
        for template_id, probabilities in self.per_template.items():
            if self.template_answer(template_id) == y and probabilities.get(y, 0.0) > tau:
                agreeing += 1
        return agreeing / self.n_templates()


def _instances(scores: pl.DataFrame, templates: pl.DataFrame, instances: pl.DataFrame) -> dict[str, Instance]:
    relation_id = scores["relation_id"][0]
    questions = question_templates(templates, relation_id)
    info = {r["instance_id"]: r for r in instances.iter_rows(named=True)}
    out: dict[str, Instance] = {}
    for row in scores.iter_rows(named=True):
        iid = row["instance_id"]
        if iid not in out:
            meta = info[iid]
            out[iid] = Instance(iid, meta["split"], answer_space(meta))
        if row["template_id"] in questions:
            out[iid].add(
                row["template_id"],
                row["option_index"],
                row["object_id"],
                row["is_gold"],
                row["ll_answer_sum"],
            )
    return {iid: inst for iid, inst in out.items() if inst.n_templates() > 0}


def reference_multi_answer(
    scores: pl.DataFrame, templates: pl.DataFrame, instances: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(estimate rows, fit rows) of the six MACE estimators on one (model, relation) partition."""
    model_id, relation_id = scores["model_id"][0], scores["relation_id"][0]
    by_id = _instances(scores, templates, instances)
    rows, fits = [], []

    def row(inst: Instance, estimator: str, confidence: float):
        y = inst.predicted()
        return (
            model_id,
            relation_id,
            inst.instance_id,
            inst.split,
            *inst.space,
            None,
            estimator,
            "answer_sum",
            "instance",
            "probability",
            y,
            inst.object_of[y],
            confidence,
            y in inst.gold,
        )

    for name in ("sca", "snca", "sfca"):
        for inst in by_id.values():
            rows.append(row(inst, f"{name}_tau0", inst.confidence(name, 0.0)))
        for k, draw in sorted({inst.space for inst in by_id.values()}):
            group = [inst for inst in by_id.values() if inst.space == (k, draw)]
            dev = [inst for inst in group if inst.split == "dev"]
            fit = {"model_id": model_id, "relation_id": relation_id, "estimator": f"{name}_tuned"}
            fit |= {"reduction": "answer_sum", "template_id": None, "parameter": "tau"}
            fit |= {"answer_space_k": k, "answer_space_draw": draw}
            if not dev:
                fits.append(
                    fit
                    | {
                        "value": None,
                        "n_dev": 0,
                        "note": "no dev-split instances in this answer space: no rows",
                    }
                )
                continue
            best_tau, best_brier = None, math.inf
            for tau in TAU_GRID:
                brier = 0.0
                for inst in dev:
                    correct = 1.0 if inst.predicted() in inst.gold else 0.0
                    brier += (inst.confidence(name, tau) - correct) ** 2
                brier /= len(dev)
                if brier < best_brier:
                    best_tau, best_brier = tau, brier
            fits.append(fit | {"value": best_tau, "n_dev": len(dev), "note": None})
            for inst in group:
                rows.append(row(inst, f"{name}_tuned", inst.confidence(name, best_tau)))
    estimates = pl.DataFrame(rows, schema=ESTIMATE_COLUMNS, orient="row").sort(SORT_KEYS, nulls_last=True)
    return estimates, pl.DataFrame(fits, schema=FIT_COLUMNS)
