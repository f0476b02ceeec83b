"""Regenerate airflow_jobwatch/get_provider_info.py from provider.yaml (run by `make provider-info`)."""

from __future__ import annotations

import pprint
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
HEADER = '''"""Provider metadata for Airflow's provider manager.

GENERATED from provider.yaml by `make provider-info`; do not edit by hand.
tests/unit/test_provider_info.py fails when the two disagree.
"""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return '''


def render() -> str:
    info = yaml.safe_load((ROOT / "provider.yaml").read_text())
    info.pop("versions", None)
    # One line; ruff then breaks it into the usual layout, keeping every string whole (a description is
    # one string literal with its "\n"s, greppable, not one word per line).
    body = pprint.pformat(info, width=10**6, sort_dicts=False)
    raw = HEADER + body.replace("\n", "\n    ") + "\n"
    # ruff formats it the way the rest of the code base is formatted, so `ruff format --check` agrees.
    return subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", "get_provider_info.py", "-"],
        input=raw,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout


if __name__ == "__main__":
    target = ROOT / "airflow_jobwatch" / "get_provider_info.py"
    text = render()
    if "--check" in sys.argv:
        sys.exit(
            0 if target.read_text() == text else "get_provider_info.py is stale: run `make provider-info`"
        )
    target.write_text(text)
