"""Sphinx configuration of the airflow-jobwatch documentation (``make docs``).

The guides are Markdown, read by MyST. Two pages are generated at build time into ``docs/_generated/``
(never edited by hand, not committed): the configuration reference, from ``provider.yaml`` (the same
source as ``get_provider_info.py``), and nothing else needs generating: the API reference is autodoc
over the package's docstrings (``api.md``), the metrics reference is ``metrics.md`` (checked against the
code by ``tests/unit/test_metrics.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))

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
# benchmarks/*.md, the parts benchmarks.md is assembled from (bench/run_all.py), are built as hidden pages
# (index.md) because guides link to them.
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = f"airflow-jobwatch {release}"

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
        "Generated from `provider.yaml` at build time. Set options in `airflow.cfg` or as",
        "`AIRFLOW__<SECTION>__<OPTION>` environment variables; `airflow config list --section jobwatch --show-values`",
        "shows the values in force. A value of the wrong kind stops the executor or the trigger with an",
        "error that names the option.",
        "",
        "JobWatchExecutor also reads the `[kubernetes_executor]` options of the cncf.kubernetes provider",
        "with their upstream meaning (see the [executor guide](../executor.md)).",
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


def _generate(app: object) -> None:
    out = DOCS / "_generated"
    out.mkdir(exist_ok=True)
    target = out / "configuration.md"
    text = _configuration_reference()
    if not target.exists() or target.read_text() != text:  # unchanged files keep Sphinx's cache valid
        target.write_text(text)


def setup(app: object) -> None:
    app.connect("builder-inited", _generate)  # type: ignore[attr-defined]
