"""The findings profile: the stage stores `kcal findings --build` materializes (issue 30).

The seed papers' claims need settings that cannot share one store (template kinds, dropout and the
answer-space sweep are global per store), so the profile is several ordinary stores, one per stage,
each sized to decide its claims: >= 1,000 closed-set test instances behind Base/Margin and the
aggregations, >= 20 dev instances behind every fitted threshold or temperature. Pure definitions
only: the build (imports, Dagster runs, timing) lives in assets/findings_profile.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from kcal_pipeline.core.options import OptionsError, ProbeOptions, ScoringOptions
from kcal_pipeline.dataset.relations import relation_ids

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BEAR = REPO.parent / "shared" / "data" / "bear"
DEFAULT_KISSLING = REPO.parent / "shared" / "data" / "kissling-templates" / "metadata_relations.json"
BEAR_PREFIX = "bear-"

# Scale 1 targets (scale s multiplies them, rounding up). Every stage whose claims pool over
# relations has at least MIN_CLUSTERS relations: the bootstrap resamples relations first, and with
# 2-3 clusters its first stage has only 3-10 distinct draws (issue 51).
MIN_CLUSTERS = 6
BEAR_TEST_TARGET = 1000  # closed-set test instances behind Base/Margin and the aggregations
MARKER_RELATIONS = MIN_CLUSTERS  # the smallest answer spaces: 8 templates per instance stay cheap
MARKER_INSTANCES = 100  # per relation (of BEAR's 144-153): 6 relations x 8 templates in ~8 min
SWEEP_RELATIONS = MIN_CLUSTERS  # BEAR's 60-option 1:1 relations (60 instances each), as Fig. 5
SWEEP_SPACE = 60  # Kissling §5.4: "sampling subsets of the 60 options in the 1:1 relations in BEAR"
SWEEP_K = (5, 10, 20, 40)  # and the full 60
SWEEP_DRAWS = 3  # Fig. 5: "Each point represents the mean over three repeated samplings"
SELECTIVE_INSTANCES = 60  # per relation: 10 dropout passes and a subject mask are 12 forwards each
CONTEXT_INSTANCES = 64  # per relation; 35 % dev = 22 dev instances behind each fitted threshold
CONTEXT_DEV_FRACTION = 0.35
MACE_INSTANCES = 120  # per MACE domain (a quarter per gold count); 25 % dev = 30
# Embedded relations whose relation-wide answer space (25 options) is smaller than their distinct
# objects, so unprobed subjects can demonstrate (docs/experiments.md "Context"): each of these gives
# every one of 100 probed instances a 1-shot, 3-shot and wrong demonstration (checked on the
# embedded snapshot: P103, P30, P101, P413, P449, P463 and P495 leave some or all out). P36 and
# P1376 qualify too, but their 60-option one-to-one spaces cost 2.4x the statements.
CONTEXT_RELATIONS = ("P37", "P38", "P17", "P19", "P27", "P1412")


@dataclass(frozen=True)
class Stage:
    """One stage store: what it serves, which relations, with which settings.

    `relations` are BEAR's own ids (P105) for source "bear", catalog ids for "embedded"; a stage
    that cannot run here (BEAR absent) has no relations and says why in `skipped`.
    """

    name: str
    purpose: str
    source: Literal["bear", "embedded"]
    relations: tuple[str, ...] = ()
    settings: Mapping[str, object] = field(default_factory=dict)
    bear_templates: Literal["kissling"] | None = None
    skipped: str | None = None
    chosen: str = ""  # how its relations were chosen (the profile's provenance prints it)

    def __post_init__(self) -> None:
        if self.source not in ("bear", "embedded"):
            raise ValueError(f"stage {self.name}: source={self.source!r}: must be 'bear' or 'embedded'")
        split_settings(self.settings)  # a bad setting fails here, naming the field and value

    @property
    def probe_relations(self) -> list[str]:
        """The catalog ids the stage's run probes (BEAR's get the import's prefix)."""
        prefix = BEAR_PREFIX if self.source == "bear" else ""
        return [prefix + r for r in self.relations]


def split_settings(settings: Mapping[str, object]) -> tuple[dict, dict]:
    """(probe, scoring) values, each validated by its options class; an unknown name is an error."""
    probe = {k: v for k, v in settings.items() if k in ProbeOptions.model_fields}
    scoring = {k: v for k, v in settings.items() if k in ScoringOptions.model_fields}
    unknown = sorted(set(settings) - set(probe) - set(scoring))
    if unknown:
        raise OptionsError(f"unknown setting(s) {unknown}: not a probe or scoring option")
    ProbeOptions(**probe)
    ScoringOptions(**scoring)
    return probe, scoring


def check_scale(scale: object) -> float:
    """A positive, finite multiplier of the profile's sizes."""
    try:
        value = float(scale)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"--scale {scale!r}: not a number (give e.g. 1 or 0.5)") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"--scale {scale!r}: must be a number > 0 (give e.g. 1 or 0.5)")
    return value


def scaled(n: int | float, scale: float) -> int:
    """n × scale rounded up (at least 1): sizes grow with --scale, never to zero."""
    return max(1, math.ceil(round(n * scale, 9)))


def bear_sizes(bear_dir: Path) -> dict[str, tuple[int, int]]:
    """BEAR relation -> (answer-space size, instances): metadata_relations.json's answer_space_ids
    and the non-blank lines of <relation>.jsonl."""
    meta = json.loads((Path(bear_dir) / "metadata_relations.json").read_text("utf-8"))
    sizes = {}
    for rid, entry in meta.items():
        lines = (Path(bear_dir) / f"{rid}.jsonl").read_text("utf-8").splitlines()
        sizes[rid] = (len(entry["answer_space_ids"]), sum(1 for line in lines if line.strip()))
    return sizes


def by_space_size(sizes: Mapping[str, tuple[int, int]]) -> list[str]:
    """Relations in ascending order of answer-space size, ties by relation id (as strings: P103
    before P19, so the 25-option relations open with P103, P108)."""
    return sorted(sizes, key=lambda r: (sizes[r][0], r))


def select_bear_relations(
    sizes: Mapping[str, tuple[int, int]], target_test: float, dev_fraction: float
) -> tuple[str, ...]:
    """The smallest answer spaces first, added until their test share reaches the target: the
    most test instances per statement scored."""
    chosen, instances = [], 0
    for rid in by_space_size(sizes):
        if instances * (1 - dev_fraction) >= target_test:
            break
        chosen.append(rid)
        instances += sizes[rid][1]
    return tuple(chosen)


def mace_relations() -> tuple[str, ...]:
    """Every MACE domain of the embedded catalog."""
    return tuple(r for r in relation_ids() if r.startswith("mace-"))


def profile_stages(
    scale: float = 1.0, bear_dir: Path | None = DEFAULT_BEAR, kissling: Path | None = DEFAULT_KISSLING
) -> list[Stage]:
    """The profile's stages at `scale` (1 = sized for <= 90 min on 2 CPU cores from an empty store)."""
    scale = check_scale(scale)
    bear = _LocalBear.find(bear_dir, kissling)
    return [
        _kissling_stage(bear, scale),
        _markers_stage(bear, scale),
        _sweep_stage(bear, scale),
        _context_stage(scale),
        _mace_stage(scale),
        # Last: its dropout passes are scored unpacked (training mode), the slowest statements of the
        # profile, so an over-long build has every other stage done first.
        _selective_stage(bear, scale),
    ]


@dataclass(frozen=True)
class _LocalBear:
    """BEAR as found here: its relations' sizes, and why a BEAR stage (or one with Kissling's
    templates) cannot run, if it cannot."""

    sizes: dict[str, tuple[int, int]]
    missing: str | None
    kissling_missing: str | None

    @classmethod
    def find(cls, bear_dir: Path | None, kissling: Path | None) -> _LocalBear:
        bear_dir = Path(bear_dir) if bear_dir is not None else None
        kissling = Path(kissling) if kissling is not None else None
        bear_missing = None
        if bear_dir is None or not (bear_dir / "metadata_relations.json").is_file():
            bear_missing = f"BEAR not found at {bear_dir} (give --bear DIR)"
        kissling_missing = bear_missing
        if bear_missing is None and (kissling is None or not kissling.is_file()):
            kissling_missing = f"Kissling templates not found at {kissling} (give --bear-templates FILE)"
        sizes = bear_sizes(bear_dir) if bear_missing is None else {}
        return cls(sizes, bear_missing, kissling_missing)

    def stage(self, name, purpose, relations, settings, templates=None, chosen="") -> Stage:
        """A stage on BEAR's relations, or skipped (no relations) with the reason it cannot run."""
        reason = self.kissling_missing if templates else self.missing
        if reason is not None:
            return Stage(name, purpose, "bear", (), settings, templates, skipped=reason, chosen=chosen)
        return Stage(name, purpose, "bear", tuple(relations), settings, templates, chosen=chosen)

    def smallest_spaces(self, scale: float) -> tuple[list[str], str]:
        """(relations, how they were chosen): BEAR's relations with the smallest answer spaces."""
        n = max(MIN_CLUSTERS, scaled(MARKER_RELATIONS, scale))
        rule = f"BEAR's {n} relations with the smallest answer spaces (ties by relation id)"
        return by_space_size(self.sizes)[:n], rule


def _closed_set(**settings: object) -> dict[str, object]:
    """The BEAR stages' settings: closed-set probes of every instance, 20 % dev, curated templates,
    then the stage's own (which override these)."""
    return {"dev_fraction": 0.2, "max_instances": 0, "template_kinds": ["curated"], **settings}


def _kissling_stage(bear: _LocalBear, scale: float) -> Stage:
    """The "bear" stage: Kissling's claims on enough of BEAR's relations for the test target."""
    settings = _closed_set(max_templates=5, answer_space="relation")
    return bear.stage(
        "bear",
        "Kissling: Base vs Margin, Vote/Min aggregation, reductions, recalibration, ACE vs "
        "accuracy, template bias, overconfidence",
        select_bear_relations(bear.sizes, BEAR_TEST_TARGET * scale, settings["dev_fraction"]),
        settings,
        "kissling",
        f"BEAR's relations in ascending answer-space size (ties by id) until their test share "
        f"reaches {scaled(BEAR_TEST_TARGET, scale):,} instances",
    )


def _markers_stage(bear: _LocalBear, scale: float) -> Stage:
    """The "markers" stage: Kissling's epistemic markers on the smallest answer spaces."""
    relations, rule = bear.smallest_spaces(scale)
    return bear.stage(
        "markers",
        "Kissling: verbal and numeric epistemic markers vs Base",
        relations,
        _closed_set(
            max_templates=1,
            max_instances=scaled(MARKER_INSTANCES, scale),
            template_kinds=["curated", "marker_verbal", "marker_numeric"],
        ),
        "kissling",
        rule,
    )


def _sweep_stage(bear: _LocalBear, scale: float) -> Stage:
    """The "sweep" stage: Kissling's option-count sweep on BEAR's 60-option 1:1 relations."""
    n = max(MIN_CLUSTERS, scaled(SWEEP_RELATIONS, scale))
    full_space = [r for r in by_space_size(bear.sizes) if bear.sizes[r][0] == SWEEP_SPACE]
    return bear.stage(
        "sweep",
        "Kissling: more options lower ACE (option-count sweep on the 60-option 1:1 relations, "
        f"k = {', '.join(map(str, SWEEP_K))} and 60, {SWEEP_DRAWS} draws)",
        full_space[:n],
        _closed_set(max_templates=1, answer_space_k=list(SWEEP_K), answer_space_draws=SWEEP_DRAWS),
        chosen=f"the first {n} of BEAR's {SWEEP_SPACE}-option one-to-one relations by relation id",
    )


def _context_stage(scale: float) -> Stage:
    """The "context" stage: Tinner's demonstrations and Zhao's perturbations (embedded)."""
    return Stage(
        "context",
        "Tinner: demonstrations and context help or hurt; Zhao: decision consistency across "
        "perturbations and confidence methods",
        "embedded",
        CONTEXT_RELATIONS,
        {
            "template_kinds": [
                "curated",
                "context_1shot",
                "context_3shot",
                "context_wrong",
                "context_fixed",
                "perturbation",
            ],
            "max_templates": 1,
            "perturbation_seeds": [4, 44, 99],
            "max_instances": scaled(CONTEXT_INSTANCES, scale),
            "dev_fraction": CONTEXT_DEV_FRACTION,
        },
        chosen="embedded relations whose 25-option answer space leaves every probed instance a "
        "1-shot, 3-shot and wrong demonstration (see CONTEXT_RELATIONS)",
    )


def _mace_stage(scale: float) -> Stage:
    """The "mace" stage: MACE's estimators on every MACE domain of the embedded catalog."""
    return Stage(
        "mace",
        "MACE: SCA vs the other estimators, AUROC with mixed gold counts",
        "embedded",
        mace_relations(),
        {
            "template_kinds": ["curated", "question"],
            "max_instances": scaled(MACE_INSTANCES, scale),
            "dev_fraction": 0.25,
        },
        chosen="every MACE domain of the embedded catalog",
    )


def _selective_stage(bear: _LocalBear, scale: float) -> Stage:
    """The "selective" stage: Selective-LAMA's confidence functions on the smallest spaces."""
    relations, rule = bear.smallest_spaces(scale)
    return bear.stage(
        "selective",
        "Selective-LAMA: subject-masked and dropout confidence functions, RC-AUC vs accuracy",
        relations,
        _closed_set(
            max_templates=1,
            max_instances=scaled(SELECTIVE_INSTANCES, scale),
            subject_mask=True,
            dropout=True,
            dropout_passes=10,
            dropout_rate=0.1,
        ),
        chosen=rule,
    )
