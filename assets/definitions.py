"""The Dagster code location of kcal (see workspace.yaml)."""
from dagster import Definitions, load_assets_from_modules

from assets import dataset, estimates, reports, scoring
from assets.sensors import model_registry_sensor
from resources import default_resources

all_assets = load_assets_from_modules([dataset, scoring, estimates, reports])

defs = Definitions(assets=all_assets, sensors=[model_registry_sensor], resources=default_resources())
