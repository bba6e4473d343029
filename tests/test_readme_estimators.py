"""The estimator catalogue (docs/methods.md, linked from the README) names every registered estimator
(vote{k} stands for its levels, `{a,b}` for its alternatives), and names nothing the registry lacks."""

import re
from pathlib import Path

from kcal_pipeline.estimation import ESTIMATORS
from kcal_pipeline.estimation.aggregation import MAX_VOTE_K

METHODS = (Path(__file__).resolve().parents[1] / "docs" / "methods.md").read_text("utf-8")


def documented() -> set[str]:
    table = METHODS[METHODS.index("| estimator | grain, kind | definition | paper |") :].split("\n\n")[0]
    names = set()
    for row in table.splitlines()[2:]:
        for name in re.findall(r"`([a-z0-9_{},]+)`", row.split("|")[1]):
            if "{k}" in name:
                names |= {name.replace("{k}", str(k)) for k in range(2, MAX_VOTE_K + 1)}
            elif match := re.fullmatch(r"(\w+)\{([\d,]+)\}", name):
                names |= {match.group(1) + level for level in match.group(2).split(",")}
            else:
                names.add(name)
    return names


def test_every_registered_estimator_is_in_the_methods_table_and_nothing_else():
    assert documented() == set(ESTIMATORS)
