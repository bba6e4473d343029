"""A seeded, synthetic but schema-true kcal store of M models × R relations, for bench/scale.py.

Nothing runs a model. The dataset tables come from the library itself (the real catalog's relations,
templates, estimator and metric catalogs, statements rendered by relation_statements from synthetic
probe instances of the real schema); statement_scores get random but plausible log-likelihoods (the
gold option is favoured on the instances a model "knows"). Estimation runs for real once per
relation (on the first model's scores) and its tables are copied to every other model with the
confidences perturbed; evaluation runs for real once (metrics_and_differences, consistency_table)
and is copied the same way. Every file is written with write_parquet_atomic at its real partition
path and records the data version the runner would expect (assets.runner.expected_version), so a
`kcal demo` over this store finds nothing to do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from kcal_pipeline.core.versions import DATA_VERSION_KEY

SCALE_MODEL_PREFIX = "scale/model-"
TOKENS_RANGE = (6, 15)  # tokens per statement
PROBABILITY = "probability"
# The partitioned tables the store holds, by partition kind (what the up-to-date check walks).
RELATION_TABLES = ("probe_instances", "statements")
MODEL_RELATION_TABLES = (
    "statement_scores",
    "estimates",
    "option_estimates",
    "estimator_fits",
    "estimator_status",
)
MODEL_TABLES = ("metrics", "metric_differences", "consistency")
CROSS_MODEL_TABLES = ("cross_model_report", "family_comparison")


@dataclasses.dataclass(frozen=True)
class StoreShape:
    """Sizes of the synthetic store; relations above the catalog's count are capped (see relations)."""

    relations: int = 60
    instances: int = 100
    templates: int = 5
    options: int = 25
    seed: int = 0
    resamples: int | None = None  # the evaluation's bootstrap B (None: the library's default)


def model_id(index: int) -> str:
    return f"{SCALE_MODEL_PREFIX}{index:03d}"


def catalog_relations(requested: int) -> list[str]:
    """The first `requested` catalog relations. The catalog bounds R: the runner, the sensors and
    the Dagster relation partitions only know catalog ids, so suffixed copies would be invisible."""
    from kcal_pipeline.dataset.relations import relation_ids

    return relation_ids()[:requested]


# Automated assets the synthetic store writes no file for: with `record_events`, their partitions
# get a materialization event only, so the automation's tick sees a store with nothing to do.
EVENT_ONLY_MODEL_TABLES = ("curves", "decision_thresholds", "report")


def model_kind(index: int) -> str:
    """One model in five masked ("mlm": the fifth, tenth, ...), so family_comparison has M/5 pairs
    to compare. A pair's table is every key both models have (≈ 1.2 M rows at the default sizes),
    so the output itself grows with the pairs: a lab's few masked models among many causal ones."""
    return "mlm" if index % 5 == 4 else "clm"


class ScaleStore:
    """Writes the store under `home` and grows it model by model (add_models). With
    `record_events`, every partition written is also reported to the Dagster instance under
    DAGSTER_HOME (assets.instance.get_instance) as a runless materialization carrying its data
    version, and the dynamic partitions are registered, as if runs had made the store: what the
    automation sensor and the UI's asset pages read."""

    def __init__(
        self,
        home: Path,
        shape: StoreShape,
        log: Callable[[str], None] = lambda _: None,
        record_events: bool = False,
    ):
        from resources import default_resources

        self.home = Path(home)
        self.shape = shape
        self.log = log
        self.relations = catalog_relations(shape.relations)
        self.resources = default_resources(home=str(self.home), max_templates=shape.templates)
        self.rng = np.random.default_rng(shape.seed)
        self.statements: dict[str, pl.DataFrame] = {}
        self.instances: dict[str, pl.DataFrame] = {}
        self.templates: pl.DataFrame | None = None
        self.estimates: dict[str, dict[str, pl.DataFrame]] = {}  # relation → table → first model's
        self.evaluation: dict[str, pl.DataFrame] = {}  # table → first model's
        self.models: list[str] = []
        self.instance = None
        if record_events:
            from assets.instance import get_instance

            self.instance = get_instance(self.home)
        self.events_seconds = 0.0  # time spent reporting materializations (not writing files)

    # -- versions ---------------------------------------------------------------------------------

    def _write(self, frame: pl.DataFrame, table: str, dims: dict[str, str]) -> None:
        """Write one partition recording the data version the runner expects of it now."""
        from assets.runner import expected_version

        version = expected_version(self.home, table, dims, self.resources)
        write_parquet_atomic(frame, partition_path(self.home, table, dims), {DATA_VERSION_KEY: version})
        self._record(table, dims, version)

    def _record(self, table: str, dims: dict[str, str], version: str) -> None:
        """The partition's materialization in the Dagster instance (with record_events)."""
        if self.instance is None:
            return
        import time

        from dagster import AssetMaterialization, MultiPartitionKey
        from dagster._core.definitions.data_version import DATA_VERSION_TAG

        started = time.perf_counter()
        if {"model", "relation"} <= set(dims):
            partition = str(MultiPartitionKey(dims))
        else:
            partition = dims.get("model") or dims.get("relation")
        if "relation" in dims and "model" not in dims:
            known = set(self.instance.get_dynamic_partitions("relation"))
            if dims["relation"] not in known:
                self.instance.add_dynamic_partitions("relation", [dims["relation"]])
        self.instance.report_runless_asset_event(
            AssetMaterialization(table, partition=partition, tags={DATA_VERSION_TAG: version})
        )
        self.events_seconds += time.perf_counter() - started

    # -- dataset ----------------------------------------------------------------------------------

    def write_dataset(self) -> None:
        """relations, templates, the two catalogs, and probe_instances + statements per relation."""
        from kcal_pipeline.dataset.instances.probe import relations_frame, templates_frame
        from kcal_pipeline.dataset.instances.relation_probe import curated_and_variants
        from kcal_pipeline.dataset.relations import load_catalog
        from kcal_pipeline.estimation.catalog import estimator_catalog
        from kcal_pipeline.evaluation.catalog import metric_catalog

        probe = self.resources["probe_settings"]
        catalog = load_catalog()
        self._write(relations_frame(catalog), "relations", {})
        self.templates = curated_and_variants(
            templates_frame(catalog), probe.perturbation_seeds, log=lambda _: None
        )
        self._write(self.templates, "templates", {})
        self._write(estimator_catalog(), "estimator_catalog", {})
        self._write(metric_catalog(), "metric_catalog", {})
        for relation in self.relations:
            instances = self._instances(relation, catalog[relation])
            self._write(instances, "probe_instances", {"relation": relation})
            self.instances[relation] = instances
            statements = self._statements(relation, instances)
            self._write(statements, "statements", {"relation": relation})
            self.statements[relation] = statements

    def _instances(self, relation: str, spec) -> pl.DataFrame:
        """probe_instances of the real schema: `instances` subjects, `options` options each, one gold
        (MACE question relations: 1, 2, 4 or 6), a fifth in dev."""
        from kcal_pipeline.dataset.instances.probe import INSTANCE_SCHEMA

        shape, rng = self.shape, self.rng
        pool = [f"kcal:scale-{relation}-o{j}" for j in range(shape.options * 2)]
        mace = bool(spec.questions)
        rows = []
        for i in range(shape.instances):
            options = [pool[j] for j in rng.choice(len(pool), shape.options, replace=False)]
            n_gold = int(rng.choice([1, 2, 4, 6])) if mace else 1
            gold = options[:n_gold]
            rng.shuffle(options)
            rows.append(
                {
                    "instance_id": f"{relation}:s{i:04d}",
                    "relation_id": relation,
                    "subject_id": f"kcal:scale-s{i}",
                    "subject_label": f"Subject {i}",
                    "gold_ids": gold,
                    "gold_labels": [f"Object {g.rsplit('o', 1)[-1]}" for g in gold],
                    "n_gold": n_gold,
                    "option_ids": options,
                    "option_labels": [f"Object {o.rsplit('o', 1)[-1]}" for o in options],
                    "n_options": len(options),
                    "split": "dev" if rng.random() < 0.2 else "test",
                    "answer_space": "sampled" if mace else "relation",
                    "answer_space_size": None if mace else len(pool),
                }
            )
        return pl.DataFrame(rows, schema=INSTANCE_SCHEMA)

    def _statements(self, relation: str, instances: pl.DataFrame) -> pl.DataFrame:
        from kcal_pipeline.dataset.instances.relation_probe import relation_statements, run_templates

        probe = self.resources["probe_settings"]
        chosen = run_templates(
            self.templates.filter(pl.col("relation_id") == relation),
            None,
            probe.template_kinds,
            probe.template_limit,
            probe.perturbation_seeds,
            log=lambda _: None,
        )
        return relation_statements(
            instances, chosen, probe.seed, capitalize=probe.capitalize_statements, log=lambda _: None
        )

    # -- models -----------------------------------------------------------------------------------

    def add_models(self, count: int) -> list[str]:
        """Register and write `count` more models (scores, estimation and evaluation tables)."""
        from kcal_pipeline.core.paths import registry_path
        from kcal_pipeline.scoring.models.registry import ModelEntry, Registry

        registry = Registry(registry_path(self.home))
        added = []
        for _ in range(count):
            index = len(self.models)
            entry = registry.add(ModelEntry(id=model_id(index), kind=model_kind(index)))
            self.models.append(entry.key)
            added.append(entry)
            if self.instance is not None:
                self.instance.add_dynamic_partitions("model", [entry.key])
            for relation in self.relations:
                self._write_partition(entry, relation)
            self._write_evaluation(entry)
            for table in EVENT_ONLY_MODEL_TABLES:
                self._record(table, {"model": entry.key}, f"scale-{table}-{entry.key}")
            self.log(f"wrote {entry.id}")
        self._write_cross_model()
        return [e.key for e in added]

    def _write_cross_model(self) -> None:
        """The cross_model stage's tables over every model so far (the library calls its assets make)."""
        for table, frame in cross_model_tables(self.home).items():
            self._write(frame, table, {})

    def _write_partition(self, entry, relation: str) -> None:
        dims = {"model": entry.key, "relation": relation}
        scores = self.scores(entry.id, relation, entry.kind)
        self._write(scores, "statement_scores", dims)
        if relation not in self.estimates:  # the real estimation stage, once per relation
            self.estimates[relation] = estimate(scores, self.instances[relation], self.templates)
        for table, frame in self.estimates[relation].items():
            self._write(perturbed(frame, entry.id, self.rng), table, dims)

    def _write_evaluation(self, entry) -> None:
        dims = {"model": entry.key}
        if not self.evaluation:  # the real evaluation stage, once
            self.evaluation = evaluate(self.home, entry.key, self.shape.resamples)
        for table, frame in self.evaluation.items():
            self._write(perturbed(frame, entry.id, self.rng), table, dims)

    def scores(self, model: str, relation: str, kind: str = "clm") -> pl.DataFrame:
        """statement_scores of one partition: per-token log-probs summing to ll_sum; a model knows
        about half the instances (their gold options score ~2 nats higher under every template)."""
        from kcal_pipeline.scoring.partition import CARRIED, FINGERPRINT_COLUMN, KIND_COLUMN

        statements, rng = self.statements[relation], self.rng
        n = statements.height
        n_tokens = rng.integers(*TOKENS_RANGE, size=n)
        instance_codes = statements["instance_id"].cast(pl.Categorical).to_physical().to_numpy()
        known = rng.random(instance_codes.max() + 1) < 0.5
        boost = np.where(statements["is_gold"].to_numpy() & known[instance_codes], 2.0, 0.0)
        total = int(n_tokens.sum())
        logprobs = -rng.gamma(1.5, 1.6, size=total).astype(np.float32)
        starts = np.concatenate([[0], np.cumsum(n_tokens)[:-1]])
        logprobs[starts + n_tokens - 1] += boost.astype(np.float32)  # the answer's last token
        logprobs = np.minimum(logprobs, -1e-3)
        ll_sum = np.add.reduceat(logprobs.astype(np.float64), starts)
        answer = np.maximum(1, n_tokens // 4)
        answer_sum = np.array(
            [logprobs[s + k - a : s + k].sum() for s, k, a in zip(starts, n_tokens, answer, strict=True)]
        )
        roles = np.zeros(total, dtype=np.int8)
        for s, k, a in zip(starts, n_tokens, answer, strict=True):
            roles[s + 1 : s + 3] = 1
            roles[s + k - a : s + k] = 2
        offsets = np.concatenate([[0], np.cumsum(n_tokens)])
        frame = statements.select(CARRIED).with_columns(
            model_id=pl.lit(model),
            **{KIND_COLUMN: pl.lit(kind)},
            n_tokens=pl.Series(n_tokens, dtype=pl.Int32),
            ll_sum=pl.Series(ll_sum),
            ll_mean=pl.Series(ll_sum / n_tokens),
            ll_answer_sum=pl.Series(answer_sum),
            ll_answer_mean=pl.Series(answer_sum / answer),
            token_logprobs=_lists(logprobs, offsets, pl.Float32),
            token_roles=_lists(roles, offsets, pl.Int8),
        )
        from kcal_pipeline.scoring.engine import OPTIONAL_SCHEMA

        frame = frame.with_columns(pl.lit(None, dtype).alias(c) for c, dtype in OPTIONAL_SCHEMA.items())
        return frame.with_columns(**{FINGERPRINT_COLUMN: pl.lit(f"scale-{self.shape.seed}")})


def _lists(values: np.ndarray, offsets: np.ndarray, dtype) -> pl.Series:
    import pyarrow as pa

    array = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))
    return pl.Series(array).cast(pl.List(dtype))


def estimate(
    scores: pl.DataFrame, instances: pl.DataFrame, templates: pl.DataFrame
) -> dict[str, pl.DataFrame]:
    """The estimation stage's four tables of one partition, as assets/estimation.py computes them."""
    from kcal_pipeline.estimation import build_cube
    from kcal_pipeline.estimation.marginal import option_estimates
    from kcal_pipeline.estimation.registry import compute_estimate_tables

    cube = build_cube(scores, instances, templates)
    tables = compute_estimate_tables(cube, log=lambda _: None)
    return {
        "estimates": tables.estimates,
        "option_estimates": option_estimates(cube),
        "estimator_fits": tables.fits,
        "estimator_status": tables.status,
    }


def model_inputs(home: Path, key: str) -> dict[str, pl.DataFrame]:
    """What the evaluation stage reads for one model: every relation's estimates and option
    estimates of the model, every probe relation's instances, templates and relations."""
    from kcal_pipeline.core.storage import existing_partitions

    def every(table: str, fixed: dict) -> pl.DataFrame:
        return pl.concat(
            [pl.read_parquet(p) for p in existing_partitions(home, table, fixed)], how="diagonal_relaxed"
        )

    return {
        "estimates": every("estimates", {"model": key}),
        "option_estimates": every("option_estimates", {"model": key}),
        "probe_instances": every("probe_instances", {}),
        "templates": pl.read_parquet(partition_path(home, "templates")),
        "relations": pl.read_parquet(partition_path(home, "relations")),
    }


def evaluate(home: Path, key: str, resamples: int | None = None) -> dict[str, pl.DataFrame]:
    """metrics + metric_differences (as the metrics multi-asset) and consistency of one model."""
    from kcal_pipeline.evaluation.tables import N_RESAMPLES, consistency_table, metrics_and_differences

    inputs = model_inputs(home, key)
    metrics, differences = metrics_and_differences(
        inputs["estimates"], inputs["templates"], inputs["relations"], inputs["probe_instances"],
        inputs["option_estimates"], n_resamples=resamples or N_RESAMPLES,
    )  # fmt: skip
    consistency = consistency_table(inputs["estimates"], inputs["templates"], seed=13)
    return {"metrics": metrics, "metric_differences": differences, "consistency": consistency}


def metrics_partitions(home: Path) -> list[dict[str, str]]:
    """{'model': key} of every metrics file, in key order (as the IO manager maps them)."""
    from kcal_pipeline.core.storage import existing_partitions

    return [{"model": f.parent.name.split("=", 1)[1]} for f in existing_partitions(home, "metrics")]


def cross_model_report_inputs(home: Path) -> pl.DataFrame:
    """What the cross_model_report asset's input reads: the OVERALL_ROWS of every metrics file,
    with the IO manager's own reader (core.storage read_partitions, where=...)."""
    from kcal_pipeline.core.storage import read_partitions
    from kcal_pipeline.reporting.selection import OVERALL_ROWS

    return read_partitions(home, "metrics", metrics_partitions(home), where=OVERALL_ROWS)


def family_comparison_inputs(home: Path) -> tuple[list[pl.LazyFrame], list[pl.LazyFrame]]:
    """What the family_comparison asset's inputs are: one lazy scan per metrics file and one per
    statement_scores file (model_id, model_kind), with the IO manager's scan_partition."""
    from kcal_pipeline.core.storage import existing_partitions
    from resources.parquet_io import scan_partition

    scores = [
        dict(part.split("=", 1) for part in f.parent.relative_to(home / "statement_scores").parts)
        for f in existing_partitions(home, "statement_scores")
    ]
    return (
        [scan_partition(home, "metrics", dims) for dims in metrics_partitions(home)],
        [scan_partition(home, "statement_scores", dims, ["model_id", "model_kind"]) for dims in scores],
    )


def cross_model_tables(home: Path) -> dict[str, pl.DataFrame]:
    """cross_model_report (the leaderboard) and family_comparison over every model, each read as
    its asset reads it (the page's rows only; one metrics file at a time, a pair at a time)."""
    from kcal_pipeline.evaluation.families import family_comparison_by_model, model_families_by_file
    from kcal_pipeline.reporting.cross_model import leaderboard, overall_headline

    metrics, scores = family_comparison_inputs(home)
    return {
        "cross_model_report": leaderboard(overall_headline(cross_model_report_inputs(home))),
        "family_comparison": family_comparison_by_model(metrics, model_families_by_file(scores)).table,
    }


# Columns moved together by the same shift, so an interval keeps containing its point.
_SHIFTED = {
    "confidence": (),
    "probability": (),
    "value": ("ci_low", "ci_high"),
    "difference": ("ci_low", "ci_high"),
}


def perturbed(frame: pl.DataFrame, model: str, rng: np.random.Generator) -> pl.DataFrame:
    """`frame` as another model's: model_id replaced, its confidence / probability / metric value
    shifted by N(0, 0.02) (probabilities clipped to [0, 1]; intervals moved with their point)."""
    out = frame.with_columns(model_id=pl.lit(model)) if "model_id" in frame.columns else frame
    for column, companions in _SHIFTED.items():
        if column not in out.columns or out.height == 0:
            continue
        shift = pl.Series(rng.normal(0.0, 0.02, out.height))
        moved = [(pl.col(c) + shift).alias(c) for c in (column, *companions) if c in out.columns]
        out = out.with_columns(moved)
        if column == "probability" or ("output_kind" in out.columns and column == "confidence"):
            bounded = pl.col("output_kind") == PROBABILITY if "output_kind" in out.columns else pl.lit(True)
            out = out.with_columns(
                pl.when(bounded).then(pl.col(column).clip(0.0, 1.0)).otherwise(pl.col(column)).alias(column)
            )
    return out
