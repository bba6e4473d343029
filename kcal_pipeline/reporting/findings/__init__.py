"""Findings: the seed papers' claims re-tested on a store's models, with a stated verdict rule.

One claim = one spec (core.Claim: paper, table or figure, setting, the paper's number with its
model, comparison, test, preconditions, profile stage) in one module per paper; selections.py holds
what the claims read of a store, verdicts.py the verdicts' statistics and evaluate_claims, one
renderer (document.py) writes the Markdown. Importing this package registers every claim, in
document order.
"""

# isort: off
# Registration order is document order (within a paper, a module's claims in the order it defines
# them): the list below is in that order on purpose, not sorted.
from kcal_pipeline.reporting.findings import (  # noqa: F401  (register)
    kcal_adds,
    kissling,
    kissling_selection,  # votes, thresholds and markers, after kissling's Brier claims
    kissling_base,
    mace,
    mace_sca,  # SCA's claims after the gold-count claims
    selective_lama,
    selective_lama_tables,  # Tables 3 and 5, after the Table 1-2 claims
    tinner,
    tinner_relations,  # after tinner's paraphrase claims
    tinner_context,  # the demonstrations last
    zhao,
    zhao_metrics,  # Abstain-F1, the 0.5 safeguard, agreement: after the perturbation claims
    zhao_cross,  # the cross-method claims last
)

# isort: on
from kcal_pipeline.reporting.findings.core import *  # noqa: F403
from kcal_pipeline.reporting.findings.digest import *  # noqa: F403
from kcal_pipeline.reporting.findings.document import *  # noqa: F403
from kcal_pipeline.reporting.findings.kcal_adds import *  # noqa: F403
from kcal_pipeline.reporting.findings.kissling import *  # noqa: F403
from kcal_pipeline.reporting.findings.kissling_base import *  # noqa: F403
from kcal_pipeline.reporting.findings.kissling_selection import *  # noqa: F403
from kcal_pipeline.reporting.findings.mace import *  # noqa: F403
from kcal_pipeline.reporting.findings.mace_sca import *  # noqa: F403
from kcal_pipeline.reporting.findings.selections import *  # noqa: F403
from kcal_pipeline.reporting.findings.selective_lama import *  # noqa: F403
from kcal_pipeline.reporting.findings.selective_lama_blocks import *  # noqa: F403
from kcal_pipeline.reporting.findings.selective_lama_tables import *  # noqa: F403
from kcal_pipeline.reporting.findings.store import *  # noqa: F403
from kcal_pipeline.reporting.findings.tinner import *  # noqa: F403
from kcal_pipeline.reporting.findings.tinner_context import *  # noqa: F403
from kcal_pipeline.reporting.findings.tinner_relations import *  # noqa: F403
from kcal_pipeline.reporting.findings.verdicts import *  # noqa: F403
from kcal_pipeline.reporting.findings.verdicts import (  # noqa: F401  (the names tests and the CLI use)
    _with_power,
)
from kcal_pipeline.reporting.findings.zhao import *  # noqa: F403
from kcal_pipeline.reporting.findings.zhao_cross import *  # noqa: F403
from kcal_pipeline.reporting.findings.zhao_metrics import *  # noqa: F403
