"""Project metadata that users and PyPI read: it must agree with itself and with provider.yaml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
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


PYPI_README = "README-pypi.md"


@pytest.mark.parametrize("readme", ["README.md", PYPI_README])
def test_readme_links_work_on_pypi(readme: str):
    """PyPI renders its README out of the repository (and README.md is read on GitHub mirrors too), so
    relative links break there: every link is absolute, and each link into this repository names a
    file that exists."""
    links = re.findall(r"\]\(([^)]+)\)", (ROOT / readme).read_text())
    assert links
    for link in links:
        assert link.startswith(("https://", "http://")), f"relative link {link!r} breaks on PyPI"
        if link.startswith(REPO_BLOB):
            path = link.removeprefix(REPO_BLOB).split("#")[0]
            assert (ROOT / path).exists(), f"README links to {path}, which does not exist"


def test_pypi_long_description_is_written_for_users():
    """The long description PyPI shows is the user README: what the provider is, how to install it,
    the one config line and the one import; the contributors' commands stay in README.md."""
    assert _pyproject()["readme"] == PYPI_README
    text = (ROOT / PYPI_README).read_text()
    assert text.startswith("# airflow-jobwatch\n")
    assert "pip install" in text and "airflow-jobwatch" in text
    assert "executor = airflow_jobwatch.executors.JobWatchExecutor" in text
    assert "from airflow_jobwatch.operators.job import KubernetesJobOperator" in text
    for internal in ("make ", "devtools", "tests/", "AirflowStack", "kube/"):
        assert internal not in text, f"{PYPI_README} mentions {internal!r}, which users do not have"
    contributors = (ROOT / "README.md").read_text()
    assert "make demo" in contributors and "make test" in contributors


def test_docs_site_names_every_guide_explicitly():
    """The navigation is exactly what index.md's toctrees list: no glob pulls in a page by accident
    (a Markdown page in no toctree fails `make docs`, unless docs/conf.py marks it as an orphan)."""
    index = (ROOT / "docs" / "index.md").read_text()
    assert ":glob:" not in index
    for page in ("installation", "connections", "operators", "executor", "trigger", "testing", "changelog"):
        assert f"<{page}>" in index, f"docs/index.md does not list {page}.md"
    assert (ROOT / "docs" / "failure-modes.md").exists()
