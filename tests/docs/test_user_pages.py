"""The user guide speaks to users: its pages name no issue number, no file of this repository's tests or
harness, no private module and no private function. Internals belong to the internals pages
(architecture, sandbox, benchmarks, failure modes, how it is built and tested)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


def test_the_scan_finds_what_it_forbids() -> None:
    samples = {
        "an issue number": "fixed (issue 21)",
        "a path in this repository's tests": "see tests/e2e/test_executor.py",
        "a source file of the package": "`airflow_jobwatch/compat.py`",
        "the repository's test harness": "airflow_jobwatch.devtools",
        "an internal module": "python -m airflow_jobwatch.kube.credhelper",
        "a private name": "the `_process_workloads` path",
        "a sentence for the project's own developers": "the project's CI runs these two blocks",
    }
    for what, sample in samples.items():
        pattern = dict(FORBIDDEN)[what]
        assert pattern.search(sample), (what, sample)
    # the kubernetes client's `_request_timeout` is an argument users set in `kube_client_request_args`
    allowed = "`AIRFLOW__CORE__EXECUTOR`, `__init__`, `kubernetes_conn_id`, my_dags/tests/ folder, `_request_timeout`"
    assert not [w for w, p in FORBIDDEN if p.search(allowed)], allowed


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
