"""`airflow jobwatch status` must not list a triggerer's watches once they closed.

The triggerer (here: this test's event loop, writing ``[jobwatch] triggerer_status_file``) runs a
JobTrigger to its end; its namespace watch then closes (linger 0). The real `airflow jobwatch status`
command must then show no open watch and no informer of it. Before the fix the file was last written
while the closing watch's informers were still running (the write came before their stop), so the
command kept listing them, for good, since nothing rewrites the file once no watch is open.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_jobwatch.compat import AIRFLOW_V_3_2_PLUS
from airflow_jobwatch.triggers.registry import get_registry

from .conftest import collect, create_job, job_manifest, make_trigger, wait_until

pytestmark = pytest.mark.timeout(300)


def airflow_jobwatch(*args: str, home: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`airflow jobwatch ...` as a user runs it (as tests/integration/test_jobwatch_cli.py does)."""
    full_env = dict(os.environ, AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False", **env)
    if not AIRFLOW_V_3_2_PLUS:  # Airflow 3.1 has `airflow jobwatch` where the executor is configured
        full_env.setdefault("AIRFLOW__CORE__EXECUTOR", "airflow_jobwatch.executors.JobWatchExecutor")
    exe = Path(sys.executable).with_name("airflow")
    return subprocess.run(
        [str(exe), "jobwatch", *args], env=full_env, capture_output=True, text=True, timeout=240
    )


async def test_status_lists_no_watch_once_it_closed(
    sandbox: Any, k8s_async_client: Any, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    status_file = tmp_path / "triggerer-status.json"
    env = {"AIRFLOW__JOBWATCH__TRIGGERER_STATUS_FILE": str(status_file)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    job = await create_job(k8s_async_client, job_manifest("short", ["sh", "-c", "sleep 1"]))
    trigger = make_trigger(sandbox, str(kubeconfig), "short", job["metadata"]["uid"], poll_interval=1.0)

    def informers_listed() -> list[Any]:
        try:
            return list(json.loads(status_file.read_text()).get("informers") or [])
        except (OSError, ValueError):
            return []

    collecting = collect(trigger)
    events = await collecting
    assert [e["status"] for e in events] == ["success"]
    await wait_until(lambda: not get_registry().active(), what="the watch to close")
    assert status_file.exists()

    result = airflow_jobwatch("status", "--output", "json", home=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    [report] = json.loads(result.stdout)
    assert report["shared_watches"] == 0, report
    assert report["informers"] == [], report  # the closed watch's two informers are gone
    assert informers_listed() == []
