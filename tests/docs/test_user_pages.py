"""The user guide speaks to users: its pages name no issue number, no file of this repository's tests or
harness, no private module and no private function or class. Internals belong to the internals pages
(architecture, the executor's and the deferrable wait's design, sandbox, benchmarks, failure modes, how it
is built and tested). Every page, the internals included, speaks of the project and its measurements,
never of the work that produced them (who asked for what, which branch, whose runs)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

USER_PAGES = [
    "installation.md",
    "connections.md",
    "operators.md",
    "executor.md",
    "trigger.md",
    "cli.md",
    "testing.md",
    "deploying.md",
    "migration.md",
    "troubleshooting.md",
    "security.md",
    "compatibility.md",
    "metrics.md",
    "index.md",
]

# (what it is, pattern): each names something a user never touches.
FORBIDDEN = [
    ("an issue number", re.compile(r"\(issues? #?\d+|\bissues? #?\d+\b|\bissue #\d+", re.IGNORECASE)),
    ("a path in this repository's tests", re.compile(r"(?<![\w/.-])tests/")),
    ("a source file of the package", re.compile(r"airflow_jobwatch/[\w/]+\.py")),
    ("the repository's test harness", re.compile(r"devtools|AirflowStack")),
    (
        "an internal module",
        re.compile(r"airflow_jobwatch\.kube\b|executors\.watcher|credhelper|kube/\w+\.py"),
    ),
    ("an internal class", re.compile(r"\bDirectApiClient\b|\bInformerConfig\b|compact_store")),
    # The public modules: what a DAG or airflow.cfg names. Anything else under the package is private.
    (
        "a private module",
        re.compile(
            r"\bairflow_jobwatch\.(?!(?:testing|sandbox|operators\.(?:job|kueue)|triggers\.job)\b"
            r"|executors\b(?!\.[a-z]))\w+"
        ),
    ),
    # A user's own test files (the testing guide's `test_hello_job.py`) are theirs to name; ours are not.
    (
        "a test file of this repository",
        re.compile(
            r"\b(?:conftest|"
            + "|".join(sorted({re.escape(p.stem) for p in (ROOT / "tests").rglob("test_*.py")}))
            + r")\.py\b"
        ),
    ),
    (
        "a sentence for the project's own developers",
        re.compile(r"the project's (?:own |CI)|\bTested by CI\b|\bCI runs\b|`constraints/[\w./-]+`"),
    ),
    # `_name` in code: a private function or attribute (dunders and environment variables pass)
    ("a private name", re.compile(r"`[^`\n]*(?<![\w.])_(?!request_timeout\b)[a-z]\w*[^`\n]*`")),
]


def _user_text(name: str) -> str:
    if name == "README.md":
        text = (ROOT / name).read_text()
        # the contributors' part of the README is for people working on this repository
        return text.split("## Developing this provider", 1)[0]
    if name == "CHANGELOG.md":
        text = (ROOT / name).read_text()
        return text.split("\n## ", 2)[1] if "\n## " in text else text  # the newest section
    return (DOCS / name).read_text()


@pytest.mark.parametrize("page", [*USER_PAGES, "README.md", "CHANGELOG.md"])
def test_user_page_names_nothing_internal(page: str) -> None:
    text = _user_text(page)
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for what, pattern in FORBIDDEN:
            for match in pattern.finditer(line):
                found.append(f"{page}:{lineno}: {what}: {match.group(0)!r}")
    assert not found, "user pages must not name internals:\n" + "\n".join(found)


# Words of a working log, not of a provider's documentation: what an issue asked for, a branch, the runs
# of other sessions on a shared machine. Forbidden on every page of the site.
WORKING_LOG = re.compile(
    r"\bthe issue(?:'s\b| (?:asks|asked|wants|requires|says)\b)|\bthis branch\b|\bbranch's\b"
    r"|\b(?:other|another|this) sessions?\b|\bsessions?' (?:runs?|work)\b|\bshared with other work\b",
    re.IGNORECASE,
)

# Every Markdown page the site is built from (docs/_generated is built from provider.yaml).
SITE_PAGES = sorted(
    p.relative_to(DOCS).as_posix()
    for p in DOCS.rglob("*.md")
    if not {"_build", "_generated"} & set(p.relative_to(DOCS).parts)
)


def _scan(page: str, text: str, patterns: list[tuple[str, re.Pattern[str]]]) -> list[str]:
    return [
        f"{page}:{lineno}: {what}: {match.group(0)!r}"
        for lineno, line in enumerate(text.splitlines(), 1)
        for what, pattern in patterns
        for match in pattern.finditer(line)
    ]


@pytest.mark.parametrize("page", SITE_PAGES)
def test_page_reads_as_documentation_not_a_working_log(page: str) -> None:
    found = _scan(page, (DOCS / page).read_text(), [("a working-log phrase", WORKING_LOG)])
    assert not found, "pages speak of the project and its measurements only:\n" + "\n".join(found)


def test_the_sandbox_page_names_no_test_file() -> None:
    """The sandbox's design is read by people who use it in their own tests: it says what the sandbox
    does and where its answers come from (a real kube-apiserver's), not which of our tests show it."""
    patterns = [
        (w, p)
        for w, p in FORBIDDEN
        if w in ("a path in this repository's tests", "a test file of this repository")
    ]
    found = _scan("sandbox.md", (DOCS / "sandbox.md").read_text(), patterns)
    assert not found, "the sandbox page names test files:\n" + "\n".join(found)


# The names a DAG author or an operator may meet: the public classes, the Kubernetes client's
# `V1Job.to_dict()` (which an internal function of the same name mirrors), and the [jobwatch] options
# (some functions are named after the option they read).
PUBLIC_NAMES = {
    "JobWatchExecutor",
    "JobTrigger",
    "KubernetesJobOperator",
    "KubernetesStartKueueJobOperator",
    "to_dict",
}


def _internal_names() -> dict[str, str]:
    """The module-level classes and functions of the package's internals (kube/, executors/, triggers/,
    operators/), by name, with the file that defines each: a user page that names one describes how
    the provider works inside, which belongs to the internals pages. Only names no prose word can be
    mistaken for: with an underscore (``classify_pod``) or in CamelCase (``PodUpdate``)."""
    options = {
        option
        for section in yaml.safe_load((ROOT / "provider.yaml").read_text())["config"].values()
        for option in section["options"]
    }
    names: dict[str, str] = {}
    for package in ("kube", "executors", "triggers", "operators"):
        for path in sorted((ROOT / "airflow_jobwatch" / package).rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                name = node.name
                if name.startswith("_") or name in PUBLIC_NAMES or name in options:
                    continue
                if "_" in name or re.match(r"[A-Z][a-z0-9]+[A-Z]", name):
                    names.setdefault(name, path.relative_to(ROOT).as_posix())
    return names


def test_user_pages_name_no_internal_class_or_function() -> None:
    names = _internal_names()
    assert {"classify_pod", "PodUpdate", "NamespaceWatch"} <= names.keys(), "the scan lost its targets"
    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b")
    found = [
        f"{page}:{lineno}: {match.group(0)!r} (defined in {names[match.group(0)]})"
        for page in USER_PAGES
        for lineno, line in enumerate((DOCS / page).read_text().splitlines(), 1)
        for match in pattern.finditer(line)
    ]
    assert not found, "user pages name internal classes or functions:\n" + "\n".join(found)


def test_the_scan_finds_what_it_forbids() -> None:
    samples = {
        "an issue number": "fixed (issue 21)",
        "a path in this repository's tests": "see tests/e2e/test_executor.py",
        "a source file of the package": "`airflow_jobwatch/compat.py`",
        "the repository's test harness": "airflow_jobwatch.devtools",
        "an internal module": "python -m airflow_jobwatch.kube.cluster.credhelper",
        "a private name": "the `_process_workloads` path",
        "a sentence for the project's own developers": "the project's CI runs these two blocks",
        "a private module": "`airflow_jobwatch.executors.watcher.supervisor`, `airflow_jobwatch.config`",
        "a test file of this repository": "shown by test_credentials.py and conftest.py",
    }
    for what, sample in samples.items():
        pattern = dict(FORBIDDEN)[what]
        assert pattern.search(sample), (what, sample)
    # the kubernetes client's `_request_timeout` is an argument users set in `kube_client_request_args`
    allowed = (
        "`AIRFLOW__CORE__EXECUTOR`, `__init__`, `kubernetes_conn_id`, my_dags/tests/ folder, `_request_timeout`, "
        "your own `test_hello_job.py`"
    )
    assert not [w for w, p in FORBIDDEN if p.search(allowed)], allowed
    public = (
        "`airflow_jobwatch.executors.JobWatchExecutor`, `airflow_jobwatch.operators.job.KubernetesJobOperator`, "
        "`airflow_jobwatch.triggers.job.JobTrigger`, `python -m airflow_jobwatch_testing.sandbox`, "
        "`airflow_jobwatch_testing.pod_template`, `airflow_jobwatch.operators.kueue`, `airflow_jobwatch.executors`"
    )
    assert not dict(FORBIDDEN)["a private module"].search(public), public
    for phrase in (
        "The full size the issue asks for",
        "At the issue's full size",
        "this branch's foreign-objects benchmark",
        "2 cores; other sessions' runs count too",
        "2 CPUs, shared with other work",
    ):
        assert WORKING_LOG.search(phrase), phrase
    for sentence in ("collected from the issue trackers of Apache Airflow", "its RESTARTING+SUCCESS branch"):
        assert not WORKING_LOG.search(sentence), sentence


def test_the_testing_page_shows_every_dag_file_its_examples_run() -> None:
    """A reader copies the examples: each `run_dag("path")` names a file that a block of the page shows,
    a block whose first line is `# path`."""
    text = (DOCS / "testing.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    shown = {block.splitlines()[0][2:].strip() for block in blocks if block.startswith("# ")}
    used = {m for block in blocks for m in re.findall(r"run_dag\(\s*\"([^\"]+)\"", block)}
    assert used, "the page runs no DAG file"
    assert not used - shown, f"testing.md runs DAG files it never shows: {sorted(used - shown)}"


def test_the_pages_the_package_page_links_to_render_as_markdown() -> None:
    """The package page (README-pypi.md) links to these pages in the repository, where Markdown is shown
    as it is: a MyST directive ({include}, {literalinclude}) would show as raw text there."""
    linked = re.findall(r"/blob/main/(docs/[\w-]+\.md)", (ROOT / "README-pypi.md").read_text())
    assert linked
    directives = [
        f"{page}: {m.group(0)}"
        for page in sorted(set(linked))
        for m in re.finditer(r"```\{\w+\}[^\n]*", (ROOT / page).read_text())
    ]
    assert not directives, f"pages linked from the package page use MyST directives: {directives}"


def test_the_example_dags_on_the_operators_page_are_the_shipped_files() -> None:
    """operators.md shows each file of dags_example/ in full, as a block whose first line names it."""
    text = (DOCS / "operators.md").read_text()
    blocks = {
        b.splitlines()[0][2:]: b.split("\n", 1)[1]
        for b in re.findall(r"```python\n(.*?)```", text, flags=re.S)
        if b.startswith("# dags_example/")
    }
    assert blocks, "operators.md shows no example DAG"
    for name, code in blocks.items():
        assert code == (ROOT / name).read_text(), f"operators.md's copy of {name} differs from the file"
