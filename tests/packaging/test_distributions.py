"""What users download: build each distribution's sdist and, from it, its wheel (the provider,
airflow-jobwatch, and the testing distribution, airflow-jobwatch-testing); install the provider's wheel
into a fresh venv and use it the way an Airflow deployment would (``airflow providers get``, the executor
import, no sandbox), then add the testing wheel as ``pip install "airflow-jobwatch[testing]"`` does; and
install the two side by side each way a user or a contributor does (two wheels, an editable provider with
the testing wheel, both editable), where neither may hide the other."""

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
from typing import Any

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
    # proves that each sdist holds everything its build needs.
    _run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    _run(sys.executable, "-m", "build", "--outdir", out, ROOT / "airflow-jobwatch-testing")
    (sdist,) = out.glob("airflow_jobwatch-*.tar.gz")
    (wheel,) = out.glob("airflow_jobwatch-*.whl")
    (testing_wheel,) = out.glob("airflow_jobwatch_testing-*.whl")
    return {"sdist": sdist, "wheel": wheel, "testing_wheel": testing_wheel, "dir": out}


def test_wheel_holds_runtime_code_only(dists: dict[str, Path]) -> None:
    names = zipfile.ZipFile(dists["wheel"]).namelist()
    code = {n for n in names if not n.startswith("airflow_jobwatch-")}
    assert "airflow_jobwatch/get_provider_info.py" in code
    assert "airflow_jobwatch/executors/__init__.py" in code
    assert "airflow_jobwatch/py.typed" in code
    # The emulator and the pytest plugin are the testing distribution's, not in scheduler/worker images:
    # the provider keeps only the deprecated paths that forward there.
    assert {n for n in code if n.startswith(("airflow_jobwatch/sandbox/", "airflow_jobwatch/testing/"))} == {
        "airflow_jobwatch/sandbox/__init__.py",
        "airflow_jobwatch/sandbox/__main__.py",
        "airflow_jobwatch/sandbox/credential.py",
        "airflow_jobwatch/sandbox/incluster.py",
        "airflow_jobwatch/sandbox/rbac.py",
        "airflow_jobwatch/testing/__init__.py",
        "airflow_jobwatch/testing/dagrun.py",
        "airflow_jobwatch/testing/pod_template.py",
    }
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
    assert 'Requires-Dist: airflow-jobwatch-testing==0.1.0; extra == "testing"' in metadata
    # pip before 23.3 compares the extra's name as the installation page types it with these lines.
    for minor in ("3.1", "3.2", "3.3"):
        assert f"Provides-Extra: testing-airflow{minor.replace('.', '')}\n" in metadata
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "pytest11" not in zipfile.ZipFile(dists["wheel"]).read(entry_points).decode()
    licenses = [n for n in names if "/licenses/" in n]
    assert {Path(n).name for n in licenses} == {"LICENSE", "NOTICE"}


def test_testing_wheel_holds_the_sandbox_and_the_plugin_only(dists: dict[str, Path]) -> None:
    archive = zipfile.ZipFile(dists["testing_wheel"])
    names = archive.namelist()
    code = {n for n in names if not n.startswith("airflow_jobwatch_testing-")}
    assert "airflow_jobwatch_testing/sandbox/__main__.py" in code
    assert "airflow_jobwatch_testing/__init__.py" in code
    assert "airflow_jobwatch_testing/plugin.py" in code
    assert "airflow_jobwatch_testing/_child.py" in code
    assert "airflow_jobwatch_testing/py.typed" in code
    # Its own top-level package: nothing installed into the provider's.
    assert not [n for n in code if not n.startswith("airflow_jobwatch_testing/")]
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "Requires-Dist: airflow-jobwatch==0.1.0" in archive.read(meta).decode()
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    # the pytest plugin of docs/testing.md, loaded by pytest from the installed wheel
    assert (
        "[pytest11]\nairflow_jobwatch_testing.plugin = airflow_jobwatch_testing.plugin"
        in archive.read(entry_points).decode()
    )


def test_sdist_holds_the_tests_and_docs(dists: dict[str, Path]) -> None:
    with tarfile.open(dists["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for expected in (
        "tests/packaging/test_distributions.py",
        "tests/unit/test_provider_info.py",
        "tests/support/stack.py",
        "airflow-jobwatch-testing/pyproject.toml",
        "airflow-jobwatch-testing/airflow_jobwatch_testing/sandbox/__main__.py",
        "airflow_jobwatch/sandbox/__main__.py",
        "dags_example/executor_basics.py",
        "docs/architecture.md",
        "docs/index.md",
        "deploy/rbac/worker.yaml",  # the docs point users and the RBAC tests at these files
        "deploy/helm/values-jobwatch.yaml",
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
def installed(dists: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A fresh venv with the provider's wheel and its ``test`` extra (pytest and friends) installed, as a
    distribution packager would test it; what the provider alone does is probed, then the testing wheel is
    added as the ``testing`` extra adds it. Returns the venv's directory and the provider-only probes."""
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
    without_testing = subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "airflow_jobwatch.sandbox", "--kubeconfig", "kc"],
        capture_output=True, text=True, timeout=300, env=env, cwd=env_dir.parent,
    )  # fmt: skip
    cli = subprocess.run(
        [str(env_dir / "bin" / "airflow"), "jobwatch", "sandbox", "--kubeconfig", str(env_dir.parent / "kc")],
        capture_output=True, text=True, timeout=300, env=env, cwd=env_dir.parent,
    )  # fmt: skip
    # The testing extra, resolved from the folder the two wheels were built into
    _run(
        env_dir / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-deps", "--find-links", dists["dir"],
        "airflow-jobwatch-testing==0.1.0", env=env, cwd=env_dir.parent, timeout=300,
    )  # fmt: skip
    return {"dir": env_dir, "sandbox_without_testing": without_testing, "cli_without_testing": cli}


def test_provider_alone_has_no_sandbox_and_says_how_to_get_it(installed: dict[str, Any]) -> None:
    module = installed["sandbox_without_testing"]
    assert module.returncode != 0
    assert 'install it with: pip install "airflow-jobwatch[testing]"' in module.stderr, module.stderr[-2000:]
    cli = installed["cli_without_testing"]
    assert cli.returncode != 0
    assert 'pip install "airflow-jobwatch[testing]"' in cli.stderr, cli.stderr[-2000:]
    assert "Traceback" not in cli.stderr, cli.stderr[-2000:]


def _clean_env(tmp_path: Path) -> dict[str, str]:
    """No PYTHONPATH (so nothing of the checkout is importable), no Airflow settings of the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON", "VIRTUAL_ENV"))}
    env.update(AIRFLOW_HOME=str(tmp_path / "airflow-home"), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    return env


def test_wheel_installs_and_airflow_finds_the_provider(installed: dict[str, Any], tmp_path: Path) -> None:
    env_dir = installed["dir"]
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
        "import airflow_jobwatch, airflow_jobwatch.executors as e, airflow_jobwatch_testing as t;"
        "print(airflow_jobwatch.__file__); print(e.JobWatchExecutor.__name__);"
        "import importlib.util as u; print(u.find_spec('airflow_jobwatch.devtools'))"
    )  # the repository's own test harness is in no distribution
    proc = subprocess.run(
        [str(py), "-c", probe], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, executor, devtools = proc.stdout.strip().splitlines()[-3:]
    assert where.startswith(str(env_dir)), where
    assert executor == "JobWatchExecutor"
    assert devtools == "None"


def test_unit_tests_pass_against_the_installed_wheel(installed: dict[str, Any], tmp_path: Path) -> None:
    """``tests/unit`` run against the wheel, as a distribution packager runs them: a copy of the tests
    (with the files they read: provider.yaml, docs/metrics.md, and pyproject.toml for pytest's settings)
    and no ``airflow_jobwatch`` source anywhere on ``sys.path``."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "tests", tree / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "docs").mkdir()
    for name in ("provider.yaml", "pyproject.toml", "docs/metrics.md"):
        shutil.copy(ROOT / name, tree / name)
    assert not (tree / "airflow_jobwatch").exists()
    py = installed["dir"] / "bin" / "python"
    env = _clean_env(tmp_path)
    env["HYPOTHESIS_PROFILE"] = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    # -P: the working directory is not put on sys.path either
    where = _run(
        py, "-P", "-c", "import airflow_jobwatch; print(airflow_jobwatch.__file__)", env=env, cwd=tree
    )
    assert where.strip().startswith(str(installed["dir"])), where
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


# -- the two distributions side by side -------------------------------------------------------------------

#: Run in each side-by-side venv: where each package is imported from, and what the deprecated paths give.
_SIDE_BY_SIDE_PROBE = """
import json, warnings
import airflow_jobwatch, airflow_jobwatch_testing, airflow_jobwatch_testing.sandbox as sandbox
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import airflow_jobwatch.testing as old_testing
    from airflow_jobwatch.sandbox import SandboxThread
    from airflow_jobwatch.sandbox.rbac import check_manifests
    from airflow_jobwatch.testing.pod_template import pod_template_yaml
import airflow_jobwatch_testing.sandbox.rbac as rbac, airflow_jobwatch_testing.pod_template as pod_template
print(json.dumps({
    "provider": airflow_jobwatch.__file__,
    "provider_origin": airflow_jobwatch.__spec__.origin,
    "testing": airflow_jobwatch_testing.__file__,
    "same_objects": old_testing.run_dag is airflow_jobwatch_testing.run_dag
    and SandboxThread is sandbox.SandboxThread and check_manifests is rbac.check_manifests
    and pod_template_yaml is pod_template.pod_template_yaml,
    "deprecations": sorted(str(w.message).split(" ")[0] for w in caught if w.category is DeprecationWarning),
}))
"""

#: A test file for pytest in each side-by-side venv: the plugin is registered once, however it is named.
_PLUGIN_ONCE_TEST = """
import airflow_jobwatch_testing.plugin as plugin


def test_the_plugin_is_registered_once(pytestconfig):
    manager = pytestconfig.pluginmanager
    ours = [p for p in manager.get_plugins() if getattr(p, "__name__", "").startswith("airflow_jobwatch")]
    hooks = [i.plugin for i in manager.hook.pytest_configure.get_hookimpls() if i.plugin in ours]
    assert hooks == [plugin], ours
    markers = [m for m in pytestconfig.getini("markers") if m.startswith("jobwatch_sandbox(")]
    assert len(markers) == 1, markers


def test_the_fixture_serves_a_sandbox(jobwatch_sandbox):
    assert jobwatch_sandbox.url.startswith("http://127.0.0.1:")
"""

#: How a user's test session may name the plugin: (extra pytest arguments, a conftest.py, environment).
_PLUGIN_SPELLINGS = {
    "entry point": ((), None, {}),
    "-p new name": (("-p", "airflow_jobwatch_testing.plugin"), None, {}),
    "-p old name": (("-p", "airflow_jobwatch.testing"), None, {}),
    "pytest_plugins old name": ((), 'pytest_plugins = ["airflow_jobwatch.testing"]\n', {}),
    "-p old name, no autoload": (
        ("-p", "airflow_jobwatch.testing"),
        None,
        {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    ),
}


def _shared_dependencies(target: Path) -> Path:
    """A folder of links to this venv's installed distributions except the two of this repository (and the
    editable installs' finders), for a fresh venv to import them from through a ``.pth`` line: no
    download, and nothing of airflow-jobwatch but what the venv installs itself."""
    site = Path(next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()))
    target.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("airflow_jobwatch", "__editable__", "_virtualenv")) or name.endswith(".pth"):
            continue
        (target / entry.name).symlink_to(entry)
    return target


@pytest.mark.parametrize("shape", ["two wheels", "editable provider, testing wheel", "both editable"])
def test_the_distributions_install_side_by_side(
    shape: str, dists: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Installed beside each other, as wheels or editable, each distribution keeps its own package: the
    provider is a regular package with its ``__init__`` (the testing distribution adds no file to it, so
    it cannot become a namespace package that hides an editable provider), the deprecated paths forward to
    the testing package with a DeprecationWarning, and pytest registers the plugin once."""
    work = tmp_path_factory.mktemp("side-by-side")
    env_dir = work / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    site = Path(_run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=work).strip())
    (site / "shared-dependencies.pth").write_text(f"{_shared_dependencies(work / 'deps')}\n")
    env = _clean_env(work)
    provider = ["-e", str(ROOT)] if shape != "two wheels" else [str(dists["wheel"])]
    testing = (
        ["-e", str(ROOT / "airflow-jobwatch-testing")]
        if shape == "both editable"
        else [str(dists["testing_wheel"])]
    )
    _run(py, "-m", "pip", "install", "--quiet", "--no-deps", *provider, *testing, env=env, cwd=work)

    probe = json.loads(_run(py, "-P", "-c", _SIDE_BY_SIDE_PROBE, env=env, cwd=work).strip().splitlines()[-1])
    provider_home = ROOT if shape != "two wheels" else site
    testing_home = ROOT / "airflow-jobwatch-testing" if shape == "both editable" else site
    assert probe["provider"] == str(provider_home / "airflow_jobwatch" / "__init__.py"), probe
    assert probe["provider_origin"] == probe["provider"], probe
    assert probe["testing"] == str(testing_home / "airflow_jobwatch_testing" / "__init__.py"), probe
    assert probe["same_objects"], probe
    assert probe["deprecations"] == [
        "airflow_jobwatch.sandbox",
        "airflow_jobwatch.sandbox.rbac",
        "airflow_jobwatch.testing",
        "airflow_jobwatch.testing.pod_template",
    ], probe

    for spelling, (args, conftest, extra_env) in _PLUGIN_SPELLINGS.items():
        tests = work / "tests" / re.sub(r"\W+", "-", spelling)
        tests.mkdir(parents=True)
        (tests / "test_plugin_once.py").write_text(_PLUGIN_ONCE_TEST)
        if conftest:
            (tests / "conftest.py").write_text(conftest)
        proc = subprocess.run(
            [str(py), "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(tests)],
            capture_output=True, text=True, timeout=300, env={**env, **extra_env}, cwd=tests,
        )  # fmt: skip
        assert proc.returncode == 0, (
            f"{shape}, plugin by {spelling}:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
        )
        assert "2 passed" in proc.stdout, proc.stdout[-2000:]
