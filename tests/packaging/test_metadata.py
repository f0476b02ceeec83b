"""Project metadata that users and PyPI read: it must agree with itself and with provider.yaml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_changelog_versions_are_provider_yaml_versions():
    changelog = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    versions = yaml.safe_load((ROOT / "provider.yaml").read_text())["versions"]
    assert changelog == [str(v) for v in versions]
    assert changelog[0] == _pyproject()["version"]


def test_python_classifiers_match_requires_python():
    project = _pyproject()
    assert project["requires-python"] == ">=3.11,<3.14"
    minors = sorted(
        c.rsplit(".", 1)[1]
        for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert minors == ["11", "12", "13"]
    assert "Framework :: Apache Airflow :: Provider" in project["classifiers"]


def test_license_and_notice_exist():
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert "Version 2.0" in (ROOT / "LICENSE").read_text()
    assert "airflow-jobwatch" in (ROOT / "NOTICE").read_text()
    assert _pyproject()["license"] == "Apache-2.0"


def test_cryptography_is_a_runtime_dependency():
    # The sandbox's TLS certificates are made with it.
    assert any(re.match(r"cryptography\b", d) for d in _pyproject()["dependencies"])
