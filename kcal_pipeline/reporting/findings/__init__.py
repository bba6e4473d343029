"""Findings: the seed papers' claims re-tested on a store's models, with a stated verdict rule.

One claim = one spec (core.Claim: paper, table or figure, setting, the paper's number with its
model, comparison, test, preconditions, profile stage) in one module per paper; selections.py holds
what the claims read of a store, verdicts.py the verdicts' statistics and evaluate_claims, one
renderer (document.py) writes the Markdown. Importing this package registers every claim, in
document order.
"""

from kcal_pipeline.reporting.findings import (  # noqa: F401  (register)
    kcal_adds,
    kissling,
    kissling_base,
    mace,
    selective_lama,
    tinner,
    zhao,
)
from kcal_pipeline.reporting.findings.core import *  # noqa: F403
from kcal_pipeline.reporting.findings.document import *  # noqa: F403
from kcal_pipeline.reporting.findings.kcal_adds import *  # noqa: F403
from kcal_pipeline.reporting.findings.kissling import *  # noqa: F403
from kcal_pipeline.reporting.findings.kissling_base import *  # noqa: F403
from kcal_pipeline.reporting.findings.mace import *  # noqa: F403
from kcal_pipeline.reporting.findings.selections import *  # noqa: F403
from kcal_pipeline.reporting.findings.selective_lama import *  # noqa: F403
from kcal_pipeline.reporting.findings.store import *  # noqa: F403
from kcal_pipeline.reporting.findings.tinner import *  # noqa: F403
from kcal_pipeline.reporting.findings.verdicts import *  # noqa: F403
from kcal_pipeline.reporting.findings.verdicts import (  # noqa: F401  (the names tests and the CLI use)
    _with_power,
)
from kcal_pipeline.reporting.findings.zhao import *  # noqa: F403
