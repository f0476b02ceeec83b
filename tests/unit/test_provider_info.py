"""The provider's metadata: provider.yaml is the source, get_provider_info() must agree with it,
and Airflow must accept and find it the way users will (entry point, schema, CLI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from importlib.resources import files
from pathlib import Path

import jsonschema
import yaml

from airflow_jobwatch.get_provider_info import get_provider_info

ROOT = Path(__file__).resolve().parents[2]


def _provider_yaml() -> dict:
    return yaml.safe_load((ROOT / "provider.yaml").read_text())


def test_get_provider_info_matches_provider_yaml():
    expected = _provider_yaml()
    expected.pop("versions")
    assert get_provider_info() == expected


def test_provider_info_is_valid_against_airflows_schema():
    schema = json.loads(files("airflow").joinpath("provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_version_in_provider_yaml_is_the_package_version():
    import airflow_jobwatch

    assert _provider_yaml()["versions"][0] == airflow_jobwatch.__version__


def test_entry_point_is_registered():
    eps = [ep for ep in entry_points(group="apache_airflow_provider") if ep.dist.name == "airflow-jobwatch"]
    assert [ep.value for ep in eps] == ["airflow_jobwatch.get_provider_info:get_provider_info"]
    assert eps[0].load()() == get_provider_info()


def test_every_declared_module_and_class_imports():
    import importlib

    info = get_provider_info()
    for section in ("operators", "triggers"):
        for entry in info[section]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for path in info["executors"]:
        module, _, name = path.rpartition(".")
        assert getattr(importlib.import_module(module), name)


def _airflow(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    airflow = Path(sys.executable).with_name("airflow")
    return subprocess.run([str(airflow), *args], env=env, capture_output=True, text=True, timeout=180)


def test_airflow_cli_lists_the_provider_and_its_config(tmp_path):
    listed = _airflow("providers", "list", "--output", "json", home=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "airflow-jobwatch" in {p["package_name"] for p in json.loads(listed.stdout)}

    value = _airflow("config", "get-value", "jobwatch", "watch_stall_timeout_seconds", home=tmp_path)
    assert value.returncode == 0, value.stderr
    assert value.stdout.strip() == "90"
