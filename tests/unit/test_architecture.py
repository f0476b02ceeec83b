"""The provider's import graph: no cycle among its modules, and no import from a lower layer to a higher one;
and the testing distribution's place beside it (its sandbox imports nothing of either package).

Every import counts, wherever it stands: at module level, inside a function (a lazy import), or under
``TYPE_CHECKING`` (a reader has to follow those too). The layers are written down in docs/internals.md
("The map"); :data:`LAYERS` is the same table.
"""

from __future__ import annotations

import ast
import collections
import importlib.util
from pathlib import Path

import pytest

import airflow_jobwatch

PACKAGE = "airflow_jobwatch"
#: The folder the package is imported from: the checkout, or an installed wheel (the packaging tests run
#: the unit tests against one).
PACKAGE_DIR = Path(airflow_jobwatch.__file__).resolve().parent

#: Each part of the package and its layer. A module may import modules of its own part and of parts of a lower
#: layer, never of a higher one, and never of another part of its own layer.
LAYERS: dict[str, float] = {
    # What Kubernetes objects mean, the watch engine and how to reach a cluster: knows nothing of Airflow.
    "kube": 0,
    # What every Airflow-facing part shares: configuration, metrics, the Airflow minors' differences,
    # connections, the provider's metadata.
    "config": 1,
    "metrics": 1,
    "compat": 1,
    "connections": 1,
    "get_provider_info": 1,
    "pod_template": 1,
    # The end of a deferred task, which the trigger and the operator's resume both do.
    "ending": 1.5,
    # The executor and the trigger: two consumers of the watch engine, neither using the other.
    "executors": 2,
    "triggers": 2,
    # The operator (it defers to the trigger) and the CLI (it reads the executor's pods).
    "operators": 3,
    "cli": 3,
    # The deprecated import paths of the testing distribution's package (airflow_jobwatch_testing): modules
    # that only forward there (see test_the_provider_only_forwards_to_the_testing_distribution).
    "sandbox": 4,
    "testing": 4,
}
#: The layers inside ``kube/`` (its ``__init__`` docstring): what objects mean and how to reach a cluster at
#: the bottom, neither importing the other; the watch engine above both. A kube module lives in one of these.
KUBE_LAYERS: dict[str, float] = {"meaning": 0, "cluster": 0, "engine": 1}

#: Modules left at an old path after a move (a deprecation shim): each imports the module it moved to and
#: nothing else of the provider.
DEPRECATED_PATHS: dict[str, str] = {
    f"{PACKAGE}.kube.{name}": f"{PACKAGE}.kube.cluster.{name}" for name in ("client", "credhelper")
}

#: Layer-1 parts may import each other (one shared foundation); parts of layers 2 and up may not.
SHARED_LAYERS = {0, 1}
#: The provider's parts that hold only the forwarding modules of paths moved to the testing distribution.
FORWARDING = {"sandbox", "testing"}
#: The testing distribution's import package (the sandbox, run_dag, the pytest plugin): its own top-level
#: package, so that it never installs files into the provider's. It may import the provider.
TESTING_PACKAGE = "airflow_jobwatch_testing"

#: Imports that go up a layer on purpose, each with why. Keep this short.
UPWARD_ALLOWED: dict[tuple[str, str], str] = {
    (
        "airflow_jobwatch.compat",
        "airflow_jobwatch.cli.definition",
    ): "Airflow 3.1 reads CLI commands from the configured executor only; compat hands them over lazily.",
}

#: Cycles that exist and are still to be taken apart. The test fails on any other cycle, and when one of
#: these is gone (remove it here): the list only shrinks.
KNOWN_CYCLES: list[frozenset[str]] = []


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(PACKAGE_DIR).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imported(name: str, path: Path, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> set[str]:
    """The provider's modules an import statement loads (a ``from package import module`` names the module)."""
    targets: list[str] = []
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        if node.level:
            base = name.split(".")
            if path.name != "__init__.py":
                base.pop()
            base = base[: len(base) - (node.level - 1)]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        targets = [
            f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
            for alias in node.names
        ]
    found = set()
    for target in targets:
        while target not in modules and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in modules and target != name and target.startswith(PACKAGE + "."):
            found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = collections.defaultdict(set)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name] |= _imported(name, path, node, modules)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def _part(module: str) -> str:
    return module.split(".")[1]


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return _graph()


def test_every_part_of_the_package_has_a_layer(graph):
    parts = {_part(module) for module in _modules() if module != PACKAGE}
    assert parts <= set(LAYERS), (
        f"give these parts a layer in LAYERS and docs/internals.md: {parts - set(LAYERS)}"
    )


def test_no_new_import_cycle(graph):
    cycles = _cycles(graph)
    new = [sorted(c) for c in cycles if not any(c <= known for known in KNOWN_CYCLES)]
    assert not new, f"import cycles (type-only and lazy imports count): {new}"


def test_the_known_cycles_are_still_there_or_removed_from_the_list(graph):
    cycles = _cycles(graph)
    gone = [sorted(known) for known in KNOWN_CYCLES if not any(c & known for c in cycles)]
    assert not gone, f"these cycles are gone: remove them from KNOWN_CYCLES: {gone}"


def _kube_subpart(module: str) -> str | None:
    """The folder of ``kube/`` a module lives in (a module directly in ``kube/`` counts as its own folder);
    None for ``kube/__init__`` and the deprecated paths."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "kube" and module not in DEPRECATED_PATHS else None


def _against_kube_layers(source: str, target: str) -> str | None:
    src, dst = _kube_subpart(source), _kube_subpart(target)
    if src == dst or src not in KUBE_LAYERS or dst not in KUBE_LAYERS:
        return (
            None  # a module outside the folders fails test_every_kube_module_lives_in_a_folder_with_a_layer
        )
    if KUBE_LAYERS[dst] > KUBE_LAYERS[src]:
        return f"{source} -> {target} (kube/{src}/ is below kube/{dst}/)"
    if KUBE_LAYERS[dst] == KUBE_LAYERS[src]:
        return f"{source} -> {target} (kube/{src}/ and kube/{dst}/ are beside each other)"
    return None


def _against_layers(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for source, targets in sorted(graph.items()):
        if source == PACKAGE:
            continue
        if source in DEPRECATED_PATHS:
            if targets != {DEPRECATED_PATHS[source]}:
                wrong.append(f"{source} -> {sorted(targets)} (a deprecated path imports only its new module)")
            continue
        for target in sorted(targets):
            src, dst = _part(source), _part(target)
            if target in DEPRECATED_PATHS:
                wrong.append(f"{source} -> {target} (deprecated: import {DEPRECATED_PATHS[target]})")
                continue
            if src == dst == "kube":
                found = _against_kube_layers(source, target)
                if found:
                    wrong.append(found)
                continue
            if src == dst or (source, target) in UPWARD_ALLOWED:
                continue
            if LAYERS[dst] > LAYERS[src]:
                wrong.append(f"{source} -> {target} (layer {LAYERS[src]} imports layer {LAYERS[dst]})")
            elif LAYERS[dst] == LAYERS[src] and LAYERS[src] not in SHARED_LAYERS:
                wrong.append(f"{source} -> {target} (two parts of layer {LAYERS[src]})")
    return wrong


def test_no_import_goes_up_a_layer_or_across_one(graph):
    wrong = _against_layers(graph)
    assert not wrong, "imports against the layers in docs/internals.md:\n" + "\n".join(wrong)


def test_every_kube_module_lives_in_a_folder_with_a_layer():
    loose = [
        name
        for name in _modules()
        if name.startswith(f"{PACKAGE}.kube.") and name not in DEPRECATED_PATHS
        if _kube_subpart(name) not in KUBE_LAYERS
    ]
    assert not loose, f"put these in a folder of kube/ listed in KUBE_LAYERS: {loose}"


def test_the_watch_engine_knows_nothing_of_airflow():
    airflow_imports = []
    for name, path in _modules().items():
        if name == PACKAGE or _part(name) != "kube":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            airflow_imports += [f"{name}: {n}" for n in names if n == "airflow" or n.startswith("airflow.")]
    assert not airflow_imports, airflow_imports


def test_the_checker_sees_a_cycle_and_an_upward_import():
    """The checks above can fail: a made-up graph with a cycle and a kube module importing the executor."""
    made_up = {
        "airflow_jobwatch.kube.a": {"airflow_jobwatch.kube.b"},
        "airflow_jobwatch.kube.b": {"airflow_jobwatch.kube.a", "airflow_jobwatch.executors.x"},
        "airflow_jobwatch.executors.x": set(),
    }
    made_up["airflow_jobwatch.triggers.y"] = {"airflow_jobwatch.executors.x"}
    # Inside kube/: what objects mean must not import the engine, nor how to reach a cluster.
    made_up["airflow_jobwatch.kube.meaning.m"] = {
        "airflow_jobwatch.kube.engine.e",
        "airflow_jobwatch.kube.cluster.c",
    }
    made_up["airflow_jobwatch.kube.engine.e"] = {"airflow_jobwatch.kube.meaning.m"}
    made_up["airflow_jobwatch.kube.cluster.c"] = set()
    assert _cycles(made_up) == [
        frozenset({"airflow_jobwatch.kube.a", "airflow_jobwatch.kube.b"}),
        frozenset({"airflow_jobwatch.kube.meaning.m", "airflow_jobwatch.kube.engine.e"}),
    ]
    assert _against_layers(made_up) == [
        "airflow_jobwatch.kube.b -> airflow_jobwatch.executors.x (layer 0 imports layer 2)",
        "airflow_jobwatch.kube.meaning.m -> airflow_jobwatch.kube.cluster.c "
        "(kube/meaning/ and kube/cluster/ are beside each other)",
        "airflow_jobwatch.kube.meaning.m -> airflow_jobwatch.kube.engine.e (kube/meaning/ is below kube/engine/)",
        "airflow_jobwatch.triggers.y -> airflow_jobwatch.executors.x (two parts of layer 2)",
    ]


def _absolute_imports(name: str, path: Path) -> set[str]:
    """Every module name an import statement in ``path`` (the module ``name``) names, relative ones resolved."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = name.split(".")
            if node.level:
                if path.name != "__init__.py":
                    base.pop()
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            found |= {source} if node.module or not node.level else {f"{source}.{a.name}" for a in node.names}
    return found


def _package_modules(package_dir: Path, package: str) -> dict[str, Path]:
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [package, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _reaches(imported: str, package: str) -> bool:
    return imported == package or imported.startswith(package + ".")


def _sandbox_imports_wrong(imports: dict[str, set[str]]) -> list[str]:
    """The sandbox stands in for a cluster: it imports nothing of the provider, nor of the testing API
    around it (which drives the provider), only its own modules."""
    sandbox = f"{TESTING_PACKAGE}.sandbox"
    return [
        f"{source} -> {target} (the sandbox imports nothing outside itself)"
        for source, targets in sorted(imports.items())
        if _reaches(source, sandbox)
        for target in sorted(targets)
        if (_reaches(target, PACKAGE) or _reaches(target, TESTING_PACKAGE)) and not _reaches(target, sandbox)
    ]


@pytest.fixture(scope="module")
def testing_package() -> dict[str, set[str]]:
    spec = importlib.util.find_spec(TESTING_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the testing distribution (airflow-jobwatch-testing) is not installed")
    modules = _package_modules(Path(next(iter(spec.submodule_search_locations))), TESTING_PACKAGE)
    return {name: _absolute_imports(name, path) for name, path in modules.items()}


def test_the_sandbox_imports_nothing_of_the_provider_or_the_testing_api(testing_package):
    assert f"{TESTING_PACKAGE}.sandbox.thread" in testing_package, sorted(testing_package)
    wrong = _sandbox_imports_wrong(testing_package)
    assert not wrong, "\n".join(wrong)


def test_the_sandbox_check_can_fail():
    made_up = {
        f"{TESTING_PACKAGE}.sandbox.a": {
            f"{TESTING_PACKAGE}.sandbox.b",
            "aiohttp",
            "airflow_jobwatch.kube.x",
        },
        f"{TESTING_PACKAGE}.sandbox.b": {TESTING_PACKAGE},
        f"{TESTING_PACKAGE}.plugin": {"airflow_jobwatch.kube.x", f"{TESTING_PACKAGE}.sandbox"},
    }
    assert _sandbox_imports_wrong(made_up) == [
        f"{TESTING_PACKAGE}.sandbox.a -> airflow_jobwatch.kube.x (the sandbox imports nothing outside itself)",
        f"{TESTING_PACKAGE}.sandbox.b -> {TESTING_PACKAGE} (the sandbox imports nothing outside itself)",
    ]


def test_the_provider_only_forwards_to_the_testing_distribution():
    """The testing distribution's code is in its own package: the provider's ``sandbox`` and ``testing``
    folders hold the deprecated paths only (no class or function but a module ``__getattr__``, nothing of
    the provider imported but its root's forwarding helper), and no other provider module imports it."""
    wrong = []
    for name, path in _modules().items():
        imports = _absolute_imports(name, path)
        if name == PACKAGE or _part(name) not in FORWARDING:
            wrong += [f"{name} imports {i}" for i in sorted(imports) if _reaches(i, TESTING_PACKAGE)]
            continue
        tree = ast.parse(path.read_text())
        defined = [
            n.name
            for n in tree.body
            if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.name != "__getattr__"
        ]
        wrong += [f"{name} defines {d}" for d in defined]
        wrong += [f"{name} imports {i}" for i in sorted(imports) if i.startswith(PACKAGE + ".")]
    assert not wrong, "\n".join(wrong)
