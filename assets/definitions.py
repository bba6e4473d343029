"""The Dagster code location of kcal (see workspace.yaml).

Automation (assets/automation.py) is attached here, not in the asset modules: the model-dependent
assets get their automation conditions through `map_asset_specs`, and two sensors run by default
under `dagster dev` (DefaultSensorStatus.RUNNING, no click in the UI needed):
`model_registry_sensor` keeps the `model` partitions equal to models.toml, and
`kcal_automation_sensor` requests runs for missing or stale model partitions.
"""

from dagster import Definitions, load_assets_from_modules, map_asset_specs

from assets import dataset, estimation, evaluation, reporting, scoring
from assets.automation import automation_sensor, with_automation
from assets.sensors import model_registry_sensor
from resources import default_resources

all_assets = map_asset_specs(
    with_automation, load_assets_from_modules([dataset, scoring, estimation, evaluation, reporting])
)

defs = Definitions(
    assets=all_assets, sensors=[model_registry_sensor, automation_sensor], resources=default_resources()
)
