"""Run every benchmark in bench/ and assemble docs/benchmarks.md from their fragments.

Each ``bench/bench_<part>.py`` prints a table and writes ``docs/benchmarks/<part>.md``; this script runs
them one after the other (never in parallel: they would measure each other) and then concatenates the
fragments under a common header. ``--quick`` is passed through; ``--only sandbox,informer`` selects some.
``--assemble-only`` rebuilds docs/benchmarks.md from the fragments already on disk.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORDER = [
    "sandbox",
    "informer",
    "executor",
    "trigger",
    "trigger_live",
    "e2e_trigger",
    "churn",
    "scale",
    "fence",
    "pod_build",
    "xcom_result",
]
# Parts that are a mode of another script: (script part, its arguments, and with --quick).
MODES = {
    "trigger_live": ("trigger", ["--live"], ["--live", "--live-jobs", "200", "--live-ended", "1000"]),
    # Executor cost per task at 1x and 3x on simulated pods (the 10x run, --scale-tasks 20000, is by hand:
    # see docs/benchmarks/scale.md for its command).
    "scale": (
        "executor",
        ["--scale"],
        ["--scale", "--scale-tasks", "40", "--min-seconds", "5", "--max-seconds", "10"],
    ),
}

HEADER = """# Benchmarks

Measured with the scripts in `bench/` (`make bench`, or `python bench/bench_<part>.py`), each against the
embedded sandbox running in its own process, and where a part has an upstream counterpart
(apache-airflow-providers-cncf-kubernetes 10.25.0) side by side with it *in the same run* on the same load.
The machines are 2-core and noisy: compare the ratios and request counts, not absolute times alone.
No test asserts on any of these figures.

Machine of the last run: {machine}.
"""


def assemble() -> Path:
    parts = [HEADER.format(machine=f"{platform.machine()}, Python {platform.python_version()}")]
    for name in ORDER:
        fragment = ROOT / "docs" / "benchmarks" / f"{name}.md"
        if fragment.exists():
            parts.append(fragment.read_text().strip() + "\n")
        else:
            parts.append(
                f"## {name}\n\nNot measured yet (`bench/bench_{name}.py` has not written its figures).\n"
            )
    target = ROOT / "docs" / "benchmarks.md"
    target.write_text("\n".join(parts))
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller loads, for a smoke run")
    parser.add_argument("--only", default=",".join(ORDER), help="comma-separated parts to run")
    parser.add_argument("--assemble-only", action="store_true")
    args = parser.parse_args()
    failed = []
    if not args.assemble_only:
        for name in args.only.split(","):
            part, full, quick = MODES.get(name, (name, [], ["--quick"]))
            script = ROOT / "bench" / f"bench_{part}.py"
            if not script.exists():
                print(f"skip {name}: {script} does not exist", file=sys.stderr)
                continue
            cmd = [sys.executable, str(script)] + (quick if args.quick else full)
            print(f"== {' '.join(cmd)}", flush=True)
            if subprocess.run(cmd, cwd=ROOT).returncode != 0:
                failed.append(name)
    print(f"wrote {assemble()}")
    if failed:
        print(f"benchmarks that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
