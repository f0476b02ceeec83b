"""One install command per Airflow minor: the installation page shows it, the provider's
``testing-airflow<major><minor>`` extra holds the bounds that minor's ``dag.test()`` needs, and ``run_dag``
names the same bounds when it meets the failure they prevent. Every extra a page or a hint names is
found as typed by every pip, old ones included. (.ci/docs_install_check runs each page command in a
fresh venv with the pip ``python -m venv`` installs.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from airflow_jobwatch_testing import dagrun

ROOT = Path(__file__).resolve().parents[2]
MINORS = ("3.1", "3.2", "3.3")


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _named_extras() -> dict[str, str]:
    """Each extra that a user page, a README or a hint of the package tells users to install -> where."""
    found: dict[str, str] = {}
    files = [
        *(ROOT / "docs").glob("*.md"),
        *ROOT.glob("README*.md"),
        *(ROOT / "airflow_jobwatch").rglob("*.py"),
    ]
    for path in files:
        for extra in re.findall(r"airflow-jobwatch\[([\w.,\- ]+)\]", path.read_text()):
            for name in extra.split(","):
                found.setdefault(name.strip(), str(path.relative_to(ROOT)))
    for minor in MINORS:
        found.setdefault(
            dagrun.testing_extra(minor), "airflow-jobwatch-testing/airflow_jobwatch_testing/dagrun.py"
        )
    return found


def test_every_extra_users_are_told_to_install_needs_no_normalisation() -> None:
    """pip before 23.3 (what `python -m venv` installs with Python 3.11.7 and 3.12.1: pip 23.2.1) compares
    the extra's name as typed, after its old rule (runs of characters other than letters, digits, '.' and
    '-' become '_', then lowercase), with the wheel's ``Provides-Extra``, which setuptools writes in the
    normal form of PEP 685 (runs of '-', '_', '.' become '-', then lowercase). A name both rules leave
    unchanged is found by every pip; "testing-3.1" (declared as testing-3-1) was ignored with a warning."""
    named = _named_extras()
    assert len(named) >= 4, named
    for name, where in named.items():
        assert name in _extras(), f"{where} names the extra {name!r}, which pyproject.toml does not declare"
        pep685 = re.sub(r"[-_.]+", "-", name).lower()
        before_pip_23_3 = re.sub(r"[^A-Za-z0-9.-]+", "_", name).lower()
        assert name == pep685 == before_pip_23_3, (
            f"{where} names the extra {name!r}: pip < 23.3 looks for {before_pip_23_3!r}, the wheel "
            f"declares {pep685!r}; use lowercase letters, digits and single hyphens"
        )


@pytest.mark.parametrize("minor", MINORS)
def test_each_minor_has_one_command_and_an_extra_with_its_pins(minor: str) -> None:
    page = (ROOT / "docs" / "installation.md").read_text()
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", page, re.S) if b.startswith(f"# Airflow {minor}\n")]
    assert len(blocks) == 1, f"installation.md needs one bash block starting '# Airflow {minor}'"
    assert f'"airflow-jobwatch[{dagrun.testing_extra(minor)}]"' in blocks[0]
    assert f'"apache-airflow=={minor}.' in blocks[0]
    assert _extras()[dagrun.testing_extra(minor)] == [*_extras()["testing"], *dagrun.TESTING_PINS[minor]]
    for pin in dagrun.TESTING_PINS[minor]:
        assert f"`{pin}`" in page, f"installation.md does not name {pin}"


# Lines as Airflow 3.2.2's dag.test() writes them with the newest libraries (fastapi 0.165, cadwyn 9,
# svcs 26.2), recorded from a fresh install.
DISCRIMINATOR = (
    "E         pydantic.errors.PydanticUserError: Model 'TITerminalStatePayload' needs a discriminator "
    "field for key <function ti_state_discriminator at 0x7f1a1bc21260>"
)
SVCS = "E         AttributeError: 'State' object has no attribute 'svcs_registry'"


@pytest.mark.parametrize("line", [DISCRIMINATOR, SVCS], ids=["discriminator", "svcs"])
def test_run_dag_names_the_extra_and_its_pins_on_airflow_3_2(
    monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    import importlib.metadata

    versions = {"apache-airflow-core": "3.2.2", "fastapi": "0.165.0", "cadwyn": "9.0.0", "svcs": "26.2.0"}
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: versions.get(name) or real(name))
    message = dagrun._library_failure(f"[DAG TEST] starting task_id=hello map_index=-1\n{line}\n")
    assert message is not None
    assert "Airflow 3.2.2 does not work with the libraries installed here" in message
    assert "fastapi 0.165.0" in message
    assert (
        """pip install "airflow-jobwatch[testing-airflow32]" (it holds 'fastapi<0.137' 'cadwyn<8' 'svcs<26')"""
        in message
    )


def test_a_task_failing_on_its_own_is_not_blamed_on_libraries() -> None:
    assert dagrun._library_failure("RuntimeError: this task fails on purpose\n") is None
