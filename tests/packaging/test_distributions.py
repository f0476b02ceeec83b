"""What users download: build the sdist and, from it, the wheel; install the wheel into a fresh venv and
use it the way an Airflow deployment would (``airflow providers get``, the executor import)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _run(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 600, cwd: Path = ROOT) -> str:
    proc = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
    )
    assert proc.returncode == 0, (
        f"{args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    # Without --sdist/--wheel, build makes the sdist and then the wheel *from the sdist*, so this also
    # proves that the sdist holds everything the build needs.
    _run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return {"sdist": sdist, "wheel": wheel}


def test_wheel_holds_runtime_code_only(dists: dict[str, Path]) -> None:
    names = zipfile.ZipFile(dists["wheel"]).namelist()
    code = {n for n in names if not n.startswith("airflow_jobwatch-")}
    assert "airflow_jobwatch/get_provider_info.py" in code
    assert "airflow_jobwatch/testing/__init__.py" in code
    assert "airflow_jobwatch/testing/_child.py" in code
    assert "airflow_jobwatch/py.typed" in code
    assert not [n for n in code if n.startswith("airflow_jobwatch/devtools/")]
    assert not [n for n in code if not n.startswith("airflow_jobwatch/")], "only the package is installed"
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    metadata = zipfile.ZipFile(dists["wheel"]).read(meta).decode()
    assert "Classifier: Framework :: Apache Airflow :: Provider" in metadata
    assert "License-Expression: Apache-2.0" in metadata
    assert "Project-URL: Source, https://github.com/airflow-jobwatch/airflow-jobwatch" in metadata
    assert "Requires-Dist: cryptography" in metadata
    # The long description is the user README (README-pypi.md), not the contributors' README.md.
    assert "Description-Content-Type: text/markdown" in metadata
    long_description = metadata.split("\n\n", 1)[1]
    assert long_description.startswith("# airflow-jobwatch\n")
    assert "from airflow_jobwatch.operators.job import KubernetesJobOperator" in long_description
    assert "make demo" not in long_description
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    # the pytest plugin of docs/testing.md, loaded by pytest from the installed wheel
    assert "[pytest11]\nairflow_jobwatch.testing = airflow_jobwatch.testing" in (
        zipfile.ZipFile(dists["wheel"]).read(entry_points).decode()
    )
    licenses = [n for n in names if "/licenses/" in n]
    assert {Path(n).name for n in licenses} == {"LICENSE", "NOTICE"}


def test_sdist_holds_the_tests_and_docs(dists: dict[str, Path]) -> None:
    with tarfile.open(dists["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for expected in (
        "tests/packaging/test_distributions.py",
        "tests/unit/test_provider_info.py",
        "airflow_jobwatch/devtools/stack.py",
        "dags_example/executor_basics.py",
        "docs/architecture.md",
        "docs/index.md",
        "docs/conf.py",
        "provider.yaml",
        "constraints.txt",
        "constraints/airflow-3.1.txt",
        "constraints/airflow-3.2.txt",
        "tests/support/workloads.py",
        "LICENSE",
        "NOTICE",
        "CHANGELOG.md",
        "README-pypi.md",
    ):
        assert expected in names, f"{expected} missing from the sdist"
    assert not [n for n in names if "__pycache__" in n or n.startswith(".venv")]


@pytest.fixture(scope="module")
def installed(dists: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and its ``test`` extra (pytest and friends) installed, as a distribution
    packager would test it. Returns the venv's directory."""
    env_dir = tmp_path_factory.mktemp("wheel-venv") / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    wheel = f"{dists['wheel']}[test]"
    # Neither on PYTHONPATH nor in the working directory (`python -m` puts it on sys.path): pip would take
    # a checkout there (with the .egg-info of an editable install) for an installed airflow-jobwatch and
    # skip the wheel.
    env = _clean_env(env_dir.parent)
    constraints = ROOT / "constraints.txt"
    _run(
        py,
        "-m",
        "pip",
        "install",
        "--quiet",
        "-c",
        constraints,
        wheel,
        env=env,
        cwd=env_dir.parent,
        timeout=900,
    )
    return env_dir


def _clean_env(tmp_path: Path) -> dict[str, str]:
    """No PYTHONPATH (so nothing of the checkout is importable), no Airflow settings of the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON", "VIRTUAL_ENV"))}
    env.update(AIRFLOW_HOME=str(tmp_path / "airflow-home"), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    return env


def test_wheel_installs_and_airflow_finds_the_provider(installed: Path, tmp_path: Path) -> None:
    env_dir = installed
    py = env_dir / "bin" / "python"
    env = _clean_env(tmp_path)
    out = _run(
        env_dir / "bin" / "airflow", "providers", "get", "airflow-jobwatch", "--output", "json", env=env
    )
    info = json.loads(out)
    assert info, out
    assert info[0]["Provider"] == "airflow-jobwatch", info
    assert info[0]["Version"] == "0.1.0", info

    # From a directory outside the checkout, so the import can only come from the installed wheel.
    probe = (
        "import airflow_jobwatch, airflow_jobwatch.executors as e, airflow_jobwatch.testing as t;"
        "print(airflow_jobwatch.__file__); print(e.JobWatchExecutor.__name__);"
        "import importlib.util as u; print(u.find_spec('airflow_jobwatch.devtools'))"
    )
    proc = subprocess.run(
        [str(py), "-c", probe], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, executor, devtools = proc.stdout.strip().splitlines()[-3:]
    assert where.startswith(str(env_dir)), where
    assert executor == "JobWatchExecutor"
    assert devtools == "None"


def test_unit_tests_pass_against_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    """``tests/unit`` run against the wheel, as a distribution packager runs them: a copy of the tests
    (with the files they read: provider.yaml, docs/metrics.md, and pyproject.toml for pytest's settings)
    and no ``airflow_jobwatch`` source anywhere on ``sys.path``."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "tests", tree / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "docs").mkdir()
    for name in ("provider.yaml", "pyproject.toml", "docs/metrics.md"):
        shutil.copy(ROOT / name, tree / name)
    assert not (tree / "airflow_jobwatch").exists()
    py = installed / "bin" / "python"
    env = _clean_env(tmp_path)
    env["HYPOTHESIS_PROFILE"] = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    # -P: the working directory is not put on sys.path either
    where = _run(
        py, "-P", "-c", "import airflow_jobwatch; print(airflow_jobwatch.__file__)", env=env, cwd=tree
    )
    assert where.strip().startswith(str(installed)), where
    out = _run(
        py, "-P", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not slow", "tests/unit",
        env=env, cwd=tree, timeout=900,
    )  # fmt: skip
    summary = out.strip().splitlines()[-1]
    print(f"tests/unit against the wheel: {summary}")
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) > 100 and "failed" not in summary and "error" not in summary, out[
        -3000:
    ]
