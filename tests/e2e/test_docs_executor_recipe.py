"""The testing page's executor recipe ("With the executor"), run as a reader runs it: its three bash
blocks taken from docs/testing.md, the settings file written where its first line says, the second block
(sandbox, then Airflow's processes) started in one shell, the third (trigger, list the runs) repeated in
another until the DAG processor has read the DAG, on the page's first DAG. The task must end
``success``: a recipe that started the sandbox before the settings left the worker "pods" (children of
the sandbox) without the execution API's address, and every task failed with "container 'base' exited
with code 1".

The one change made to the page's text: its api-server port (``AIRFLOW__API__PORT=8080``, which the
page says to choose) is a free port, since other Airflows may run on this machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "testing.md"

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _recipe() -> list[str]:
    page = PAGE.read_text()
    section = page.split("## With the executor", 1)[1].split("\n## ", 1)[0]
    blocks = [textwrap.dedent(b) for _, b in re.findall(r"^( *)```bash\n(.*?)^\1```", section, re.S | re.M)]
    assert len(blocks) == 3, f"the executor recipe of testing.md has {len(blocks)} bash blocks, expected 3"
    return blocks


def _first_dag(project: Path) -> str:
    block = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)[0]
    target = project / block.splitlines()[0][2:].strip()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(block)
    return re.search(r'DAG\("(\w+)"', block).group(1)  # type: ignore[union-attr]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env() -> dict[str, str]:
    """A reader's shell: this venv on PATH, none of this test run's Airflow settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_")) and k not in ("AIRFLOW_HOME", "AIRFLOW_CONFIG")
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _bash(
    script: str, project: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_executor_recipe_runs_the_first_dag_as_written(tmp_path: Path) -> None:
    settings, start, trigger = _recipe()
    project = tmp_path / "project"
    project.mkdir()
    dag_id = _first_dag(project)
    assert f"airflow dags trigger {dag_id}" in trigger, "the recipe triggers the page's first DAG"
    name = settings.splitlines()[0].lstrip("# ").strip()
    assert "AIRFLOW__API__PORT=8080\n" in settings
    (project / name).write_text(
        settings.replace("AIRFLOW__API__PORT=8080\n", f"AIRFLOW__API__PORT={_free_port()}\n")
    )
    env = _clean_env()
    log = (tmp_path / "processes.log").open("w")
    processes = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", start],
        cwd=project,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # one process group: the sandbox, its pods and Airflow's processes
    )

    def tail() -> str:
        return (tmp_path / "processes.log").read_text()[-6000:]

    try:
        # Step 3 as a reader repeats it until the DAG processor has read the DAG (trigger fails before).
        deadline = time.monotonic() + 240
        while (done := _bash(trigger, project, env, timeout=120)).returncode != 0:
            assert processes.poll() is None, f"the recipe's processes ended:\n{tail()}"
            assert time.monotonic() < deadline, f"step 3 kept failing:\n{done.stderr[-3000:]}\n{tail()}"
            time.sleep(2)
        list_runs = f"source {name}\nairflow dags list-runs {dag_id} --output json"
        deadline = time.monotonic() + 240
        while True:
            runs = _bash(list_runs, project, env, timeout=120)
            # the JSON list ends the output (Airflow may log a warning to stdout just before it)
            at = runs.stdout.rfind("[{")
            states = (
                [r["state"] for r in json.loads(runs.stdout[at:])] if runs.returncode == 0 and at >= 0 else []
            )
            if states and states[0] in ("success", "failed"):
                break
            assert processes.poll() is None, f"the recipe's processes ended:\n{tail()}"
            assert time.monotonic() < deadline, f"the run did not end ({states}):\n{tail()}"
            time.sleep(2)
        assert states == ["success"], f"the run ended {states}:\n{tail()}"
    finally:
        _stop_group(processes)
        log.close()


def _stop_group(processes: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the recipe's process group (as Ctrl-C stops it), SIGKILL to what is left after 60 s."""
    deadline = time.monotonic() + 60
    try:
        os.killpg(processes.pid, signal.SIGTERM)
        while time.monotonic() < deadline:
            processes.poll()  # reap the shell
            os.killpg(processes.pid, 0)  # raises once the group is empty
            time.sleep(0.5)
        os.killpg(processes.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    processes.poll()
