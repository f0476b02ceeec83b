"""Sphinx configuration of the airflow-jobwatch documentation (``make docs``).

The guides are Markdown, read by MyST. Two files are generated at build time into ``docs/_generated/``
(never edited by hand, not committed): the configuration reference, from ``provider.yaml`` (the same
source as ``get_provider_info.py``), and the compatibility table as the Installation page includes it
(from ``compatibility.md``). Nothing else needs generating: the API reference is autodoc
over the package's docstrings (``api.md``), the metrics reference is ``metrics.md`` (checked against the
code by ``tests/unit/test_metrics.py``).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import yaml

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# Both distributions' packages from this checkout: the provider's and the testing distribution's.
sys.path[:0] = [str(ROOT), str(ROOT / "airflow-jobwatch-testing")]

project = "airflow-jobwatch"
author = "The airflow-jobwatch contributors"
copyright = "2026, The airflow-jobwatch contributors"
release = yaml.safe_load((ROOT / "provider.yaml").read_text())["versions"][0]
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
# The navigation (index.md's toctrees) lists the user guide, then Internals; nothing else. Pages that are
# built but not in it are "orphans" (_orphans below): benchmarks/*.md, the parts benchmarks.md is assembled
# from (bench/run_all.py; guides link to them), compatibility.md, which installation.md includes, and the
# Python API reference (api.md), which the guides link to where they name a class.
# _generated/compatibility.md is that page prepared for inclusion: included, never a page of its own.
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "_generated/compatibility.md"]
ORPHAN_PAGES = {"api", "compatibility"}
ORPHAN_FOLDERS = ("benchmarks/",)
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "furo"
# Our few style rules (docs/_static/jobwatch.css): names never split, wide tables and code scroll, the
# page's outline beside the text in a desktop window.
html_static_path = ["_static"]
html_css_files = ["jobwatch.css"]
html_title = f"airflow-jobwatch {release}"

# Where the code is and where to report a problem, on every page: pyproject.toml's project.urls, the
# same links as the package's page on PyPI. Below the navigation (docs/_templates/sidebar/) and as the
# footer's GitHub icon.
_URLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
templates_path = ["_templates"]
html_context = {"jobwatch_source_url": _URLS["Source"], "jobwatch_issues_url": _URLS["Issues"]}
html_sidebars = {
    "**": [
        "sidebar/scroll-start.html",
        "sidebar/brand.html",
        "sidebar/search.html",
        "sidebar/navigation.html",
        "sidebar/project-links.html",
        "sidebar/scroll-end.html",
    ]
}
# The mark is GitHub's (Octicons, MIT licence), as Furo's own documentation shows it.
_GITHUB_MARK = (
    '<svg stroke="currentColor" fill="currentColor" stroke-width="0" viewBox="0 0 16 16"><path fill-rule="evenodd" '
    'd="M8 0C3.58 0 0 3.58 0 8c0 3.54 2.29 6.53 5.47 7.59.4.07.55-.17.55-.38 0-.19-.01-.82-.01-1.49-2.01.37-2.53-.49'
    "-2.69-.94-.09-.23-.48-.94-.82-1.13-.28-.15-.68-.52-.01-.53.63-.01 1.08.58 1.23.82.72 1.21 1.87.87 2.33.66.07-.52"
    ".28-.87.51-1.07-1.78-.2-3.64-.89-3.64-3.95 0-.87.31-1.59.82-2.15-.08-.2-.36-1.02.08-2.12 0 0 .67-.21 2.2.82.64"
    "-.18 1.32-.27 2-.27.68 0 1.36.09 2 .27 1.53-1.04 2.2-.82 2.2-.82.44 1.1.16 1.92.08 2.12.51.56.82 1.27.82 2.15 0 "
    "3.07-1.87 3.75-3.65 3.95.29.25.54.73.54 1.48 0 1.07-.01 1.93-.01 2.2 0 .21.15.46.55.38A8.013 8.013 0 0016 8c0"
    '-4.42-3.58-8-8-8z"></path></svg>'
)
html_theme_options = {
    "footer_icons": [
        {"name": "Source code on GitHub", "url": _URLS["Source"], "html": _GITHUB_MARK, "class": ""},
    ],
}

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Imported only to read docstrings: Airflow and the Kubernetes clients are installed in the docs venv.
autodoc_mock_imports: list[str] = []
# Type hints that name third-party types Sphinx cannot resolve are not errors.
nitpicky = False
# The benchmark parts start at "##" (they are sections of benchmarks.md first): fine as pages too.
suppress_warnings = ["myst.header"]


def _configuration_reference() -> str:
    info = yaml.safe_load((ROOT / "provider.yaml").read_text())
    lines = [
        "# Configuration reference",
        "",
        "Every option of the provider's own configuration. Set options in `airflow.cfg` or as",
        "`AIRFLOW__<SECTION>__<OPTION>` environment variables;",
        "`airflow config list --section jobwatch --show-values` shows the values in force. A value of the",
        "wrong kind stops the executor or the trigger with an error that names the option.",
        "",
        "JobWatchExecutor also reads the `[kubernetes_executor]` options of the cncf.kubernetes provider:",
        "the [executor guide](../executor.md#configuration) says which it honours, and why.",
        "",
    ]
    for section, spec in info.get("config", {}).items():
        lines += [f"## `[{section}]`", "", spec["description"].strip(), ""]
        for option, o in spec["options"].items():
            default = o.get("default")
            lines += [
                f"### `{option}`",
                "",
                o["description"].strip(),
                "",
                f"- type: `{o.get('type')}`",
                f"- default: `{default!s}`" if default not in (None, "") else "- default: empty",
                f"- environment variable: `AIRFLOW__{section.upper()}__{option.upper()}`",
                f"- added in: {o.get('version_added')}",
            ]
            if o.get("example"):
                lines.append(f"- example: `{o['example']}`")
            lines.append("")
    return "\n".join(lines)


# Until docs/compatibility.md (the tested combinations) exists, the Installation page shows this.
_COMPATIBILITY_FALLBACK = """\
| Apache Airflow | apache-airflow-providers-cncf-kubernetes | Python |
|---|---|---|
| 3.3 | 10.25 or later 10.x | 3.11, 3.12, 3.13 |
"""


def _compatibility() -> str:
    """docs/compatibility.md as a part of the Installation page: its title dropped (the page has its
    own heading) and its headings one level down, so that it adds no entry to the navigation."""
    source = DOCS / "compatibility.md"
    if not source.exists():
        return _COMPATIBILITY_FALLBACK
    lines = source.read_text().splitlines()
    while lines and (not lines[0].strip() or lines[0].startswith("# ")):
        lines.pop(0)  # the title and the blank lines after it
    out, fence = [], False
    for line in lines:
        if line.startswith(("```", ":::")):
            fence = not fence
        out.append("#" + line if not fence and line.startswith("#") else line)
    return "\n".join(out) + "\n"


def _write(target: Path, text: str) -> None:
    if not target.exists() or target.read_text() != text:  # unchanged files keep Sphinx's cache valid
        target.write_text(text)


def _generate(app: object) -> None:
    out = DOCS / "_generated"
    out.mkdir(exist_ok=True)
    _write(out / "configuration.md", _configuration_reference())
    _write(out / "compatibility.md", _compatibility())


def _orphans(app: object, docname: str, source: list[str]) -> None:
    """Mark the pages that are built but deliberately not in the navigation as orphans (MyST front
    matter), so that Sphinx does not warn that no toctree names them."""
    if (docname in ORPHAN_PAGES or docname.startswith(ORPHAN_FOLDERS)) and not source[0].startswith("---"):
        source[0] = "---\norphan: true\n---\n" + source[0]


# One word of an inline code span, as Sphinx writes it, that holds a comma.
_WORD_WITH_COMMA = re.compile(r'<span class="pre">[^<]*,[^<]*</span>')


def _breaks_after_commas(
    app: object, pagename: str, templatename: str, context: dict[str, object], doctree: object
) -> None:
    """Let a comma-separated list in inline code (a label selector, an option's list of reasons) wrap
    after its commas, as prose does. Each word of an inline code span stays on one line
    (docs/_static/jobwatch.css), so that a name is never split; one long list would otherwise make its
    whole table scroll sideways."""
    body = context.get("body")
    if isinstance(body, str):
        context["body"] = _WORD_WITH_COMMA.sub(lambda m: m.group(0).replace(",", ",<wbr>"), body)


def setup(app: object) -> None:
    app.connect("builder-inited", _generate)  # type: ignore[attr-defined]
    app.connect("source-read", _orphans)  # type: ignore[attr-defined]
    app.connect("html-page-context", _breaks_after_commas)  # type: ignore[attr-defined]
