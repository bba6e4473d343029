"""Bad input stops a run with a clear message and leaves no partial table behind."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DagsterInstance, materialize

from assets.dataset import wikidata_facts
from kcal_pipeline.dataset.sources.sparql import LocalEndpoint
from resources import SparqlEndpoint, default_resources


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def failure_text(result) -> str:
    return "\n".join(
        str(e.event_specific_data.error) for e in result.all_events if e.event_type_value == "STEP_FAILURE"
    )


def run_facts(home: Path, sparql: SparqlEndpoint, relation: str = "P36"):
    resources = default_resources(home=str(home)) | {"sparql": sparql}
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("catalog_relation", [relation])
    return materialize(
        [wikidata_facts], partition_key=relation, resources=resources, instance=instance, raise_on_error=False
    )


def test_unreachable_endpoint_names_the_url(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/query"
    result = run_facts(tmp_path, SparqlEndpoint(url=url, home=str(tmp_path), retries=1, timeout=5))
    assert not result.success
    assert url in failure_text(result)
    assert not list(tmp_path.rglob("*.parquet"))


def test_relation_without_facts_is_refused(tmp_path):
    nt = tmp_path / "tiny.nt"
    nt.write_text(
        "<https://kcal.invalid/entity/country-FR> <http://www.wikidata.org/prop/direct/P31> "
        "<http://www.wikidata.org/entity/Q6256> .\n"
        "<https://kcal.invalid/entity/country-FR> <http://www.w3.org/2000/01/rdf-schema#label> "
        '"France"@en .\n'
    )
    store = tmp_path / "store"
    oxigraph = Path(sys.executable).with_name("oxigraph")
    subprocess.run(
        [str(oxigraph), "load", "--location", str(store), "--file", str(nt)], check=True, capture_output=True
    )
    with LocalEndpoint(store) as endpoint:
        result = run_facts(tmp_path / "home", SparqlEndpoint(url=endpoint.url, home=str(tmp_path / "home")))
    assert not result.success
    assert "relation 'P36' returned no facts" in failure_text(result)
    assert not list((tmp_path / "home").rglob("*.parquet"))


def test_unknown_model_is_named(tmp_path, monkeypatch):
    from assets.runner import run_missing

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    with pytest.raises(KeyError, match="no-such-model"):
        run_missing(tmp_path / "home", models=["no-such-model"], log=lambda m: None)
    assert not list((tmp_path / "home").rglob("*.parquet"))


def test_cli_reports_bad_input_without_traceback(tmp_path):
    exe = Path(sys.executable).with_name("kcal")
    out = subprocess.run(
        [str(exe), "--home", str(tmp_path), "demo", "--model", "nope"],
        capture_output=True,
        text=True,
        env={"DAGSTER_HOME": str(tmp_path / "d"), "PATH": ""},
    )
    assert out.returncode == 2 and "nope" in out.stderr and "Traceback" not in out.stderr
