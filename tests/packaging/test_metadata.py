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
    if changelog and changelog[0] == "Unreleased":  # changes merged since the last release
        changelog = changelog[1:]
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


REPO_BLOB = "https://github.com/airflow-jobwatch/airflow-jobwatch/blob/main/"


def test_readme_links_work_on_pypi():
    """PyPI renders README.md out of the repository, so relative links break there: every link is
    absolute, and each link into this repository names a file that exists."""
    links = re.findall(r"\]\(([^)]+)\)", (ROOT / "README.md").read_text())
    assert links
    for link in links:
        assert link.startswith(("https://", "http://")), f"relative link {link!r} breaks on PyPI"
        if link.startswith(REPO_BLOB):
            path = link.removeprefix(REPO_BLOB).split("#")[0]
            assert (ROOT / path).exists(), f"README links to {path}, which does not exist"


def test_docs_site_lists_every_guide():
    """Every Markdown page of docs/ is reachable from the site's index (explicitly or by its glob)."""
    index = (ROOT / "docs" / "index.md").read_text()
    assert ":glob:" in index and "\n*\n" in index
    assert (ROOT / "docs" / "failure-modes.md").exists()
