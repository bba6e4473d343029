"""One entry point from a statements frame to its scores: picks the scorer and adds optional columns.

The scorer follows the model's kind: causal LMs take the prefix-packing fast path (prefix.py) unless
it is switched off or the model fails its check; masked LMs take pseudo-log-likelihood (mlm.py) in
the configured variant. Optional score columns — M dropout passes (DropoutMean/DropoutVar) and the
subject-masked statement (TemplateDiff), each with the columns that record how they were made
(dropout_rate/dropout_source, subject_mask_method/subject_mask_text) — are always present in the
output, null when not computed, so every partition of statement_scores has the same schema for SQL.
A statements frame's `context_end` (where a statement's context ends; absent, null or 0: none)
goes to every pass: context tokens are conditioned on and never scored (clm.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import polars as pl

from kcal_pipeline.core.frames import require_columns
from kcal_pipeline.core.options import ScoringOptions
from kcal_pipeline.scoring.budget import recorded_budget
from kcal_pipeline.scoring.clm import PLAIN, score_clm
from kcal_pipeline.scoring.mlm import score_mlm
from kcal_pipeline.scoring.native import ENGINE as NATIVE_ENGINE
from kcal_pipeline.scoring.native import score_clm_native
from kcal_pipeline.scoring.precision import tf32_applies
from kcal_pipeline.scoring.prefix import (
    PACKED,
    packing_decision,
    packing_supported,
    score_clm_shared_prefix,
)
from kcal_pipeline.scoring.served.client import ENGINE as SERVED_ENGINE
from kcal_pipeline.scoring.served.scorer import score_clm_served
from kcal_pipeline.scoring.stochastic import SCHEMA as DROPOUT_SCHEMA
from kcal_pipeline.scoring.stochastic import dropout_plan, dropout_scores
from kcal_pipeline.scoring.subject_mask import CONTEXT_COLUMN, context_ends_of, subject_masked_scores
from kcal_pipeline.scoring.subject_mask import SCHEMA as MASKED_SCHEMA

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel

# Bump when a change to any scorer changes scores: it is part of every scoring fingerprint.
SCORER_VERSION = "4"  # 4: float32 cascaded normaliser, tiny packed calls padded (~1e-6); 3: MLM subject masks
INPUT_COLUMNS = ["statement_id", "text", "subject_start", "subject_end", "object_start", "object_end"]
OPTIONAL_SCHEMA = {**DROPOUT_SCHEMA, **MASKED_SCHEMA}

Scorer = Callable[..., pl.DataFrame]


def scorer_for(loaded: LoadedModel, options: ScoringOptions) -> tuple[str, Scorer]:
    """The scorer for this model and its name for provenance ('clm-packed', 'mlm-original', ...)."""
    if getattr(loaded, "kind", "clm") == "mlm":
        variant = options.mlm_variant
        return f"mlm-{variant}", lambda *a, **k: score_mlm(*a, variant=variant, **k)
    if getattr(loaded, "engine", "torch") == NATIVE_ENGINE:
        return f"clm-{NATIVE_ENGINE}", score_clm_native
    if getattr(loaded, "engine", "torch") == SERVED_ENGINE:
        return f"clm-{SERVED_ENGINE}", score_clm_served
    if options.fast_path and packing_supported(loaded):
        return "clm-packed", score_clm_shared_prefix
    return "clm-plain", score_clm


def refuse_native_dropout(loaded: LoadedModel) -> None:
    """Dropout passes switch dropout on in the torch model; llama.cpp's forward has none."""
    engine = getattr(loaded, "engine", "torch")
    if engine != "torch":
        raise ValueError(
            f"model {loaded.key!r} has engine = {engine!r}, which has no dropout: dropout passes "
            "(scoring_settings.dropout) need engine = 'torch'"
        )


def scoring_choices(loaded: LoadedModel, options: ScoringOptions) -> dict[str, str]:
    """What a causal LM's partition ran with, for its metadata: the packing decision with its
    evidence, and each path's token budget as it stands after scoring (it may have grown). Empty
    for masked LMs, which run fixed batches of masked rows."""
    if getattr(loaded, "kind", "clm") == "mlm":
        return {}
    if getattr(loaded, "engine", "torch") == NATIVE_ENGINE:
        return {"packing": "trie of sequence ids in llama.cpp", "engine": loaded.engine_check.describe()}
    if getattr(loaded, "engine", "torch") == SERVED_ENGINE:
        return {"endpoint": loaded.engine_check.endpoint, "engine": loaded.engine_check.describe()}
    choices = {"packing": packing_decision(loaded).describe() if options.fast_path else "off (fast_path)"}
    for path in (PACKED, PLAIN):
        budget = recorded_budget(loaded, path)
        if budget is not None:
            choices[f"token_budget_{path}"] = budget.describe()
    return choices


def fingerprint(loaded: LoadedModel, statements: pl.DataFrame, options: ScoringOptions) -> str:
    """What the scores depend on: the statements' scored fields, the exact weights, the options and
    the scorer version. Equal fingerprints mean equal scores, so nothing needs rescoring."""
    require_columns(statements, INPUT_COLUMNS, "statements")
    h = hashlib.sha256()
    meta = {
        "version": SCORER_VERSION,
        "model": loaded.revision,
        "dtype": loaded.dtype,
        "start": loaded.start_token_id,
        "options": options.fingerprint_values(),
    }
    if tf32_applies(loaded):  # only where it changes scores, so CPU fingerprints stay as they were
        meta["tf32"] = True
    if getattr(loaded, "engine", "torch") != "torch":  # likewise: torch fingerprints stay as they were
        meta["engine"] = loaded.engine_check.fingerprint_values()
    h.update(json.dumps(meta, sort_keys=True).encode())
    # context_end counts where some statement has a context, so every other set keeps its fingerprint
    columns = INPUT_COLUMNS + ([CONTEXT_COLUMN] if context_ends_of(statements) else [])
    h.update(statements.select(columns).write_ipc(None, compression="uncompressed").getvalue())
    return h.hexdigest()[:16]


def score_statements(
    loaded: LoadedModel,
    statements: pl.DataFrame,
    options: ScoringOptions,
    progress: Callable[[int, int], None] | None = None,
) -> pl.DataFrame:
    """Scores of every statement in input order: the scorer's columns plus the optional ones.

    progress(done, total) counts statement passes: 1 (+ dropout_passes with dropout, + 1 with
    subject_mask) per statement. A model that cannot take the dropout passes (no dropout of its
    own and no dropout_rate) fails here, before any scoring.
    """
    require_columns(statements, INPUT_COLUMNS, "statements")
    if options.dropout:
        refuse_native_dropout(loaded)
        dropout_plan(loaded.model, options.dropout_rate)
    _, scorer = scorer_for(loaded, options)  # decided in eval mode, before any dropout pass
    texts = statements["text"].to_list()
    subj = list(zip(statements["subject_start"], statements["subject_end"], strict=True))
    obj = list(zip(statements["object_start"], statements["object_end"], strict=True))
    n = len(texts)
    ends = context_ends_of(statements)  # None: no statement has a context
    context = {} if ends is None else {"context_ends": ends}
    passes = options.dropout_passes if options.dropout else 0
    stages = 1 + passes + int(options.subject_mask)

    def stage(offset: int, width: int = 1):
        if progress is None:
            return None
        return lambda done, total: progress(offset * n + done * width * n // max(total, 1), stages * n)

    frame = scorer(loaded, texts, subj, obj, progress=stage(0), **context)
    if passes:
        extra = dropout_scores(
            loaded,
            texts,
            subj,
            obj,
            passes=passes,
            seed=options.dropout_seed,
            rate=options.dropout_rate,
            scorer=scorer,
            progress=stage(1, passes),
            context_ends=ends,
        )
    else:
        extra = pl.DataFrame({c: [None] * n for c in DROPOUT_SCHEMA}, schema=DROPOUT_SCHEMA)
    frame = pl.concat([frame, extra], how="horizontal")
    if options.subject_mask:
        masked = subject_masked_scores(
            loaded, statements, options.placeholder, scorer=scorer, progress=stage(1 + passes)
        )
    else:
        masked = pl.DataFrame({c: [None] * n for c in MASKED_SCHEMA}, schema=MASKED_SCHEMA)
    return pl.concat([frame, masked], how="horizontal")
