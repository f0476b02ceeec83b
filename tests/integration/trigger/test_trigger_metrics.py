"""The trigger registry's metrics (shared watches, triggers per watch, detection delay) and the
triggerer status file, from a real JobTrigger run against the sandbox, received by a StatsD listener."""

from __future__ import annotations

import json
import os

import pytest
from statsd_listener import statsd_listener

from .conftest import NS, collect, create_job, job_manifest, make_trigger

pytestmark = pytest.mark.timeout(120)

P = "airflow.jobwatch."


async def test_shared_watch_gauges_and_detection_delay(
    sandbox, kubeconfig, k8s_async_client, monkeypatch, tmp_path
):
    status_file = tmp_path / "triggerer-status.json"
    monkeypatch.setenv("AIRFLOW__JOBWATCH__TRIGGERER_STATUS_FILE", str(status_file))
    with statsd_listener(monkeypatch) as statsd:
        await create_job(k8s_async_client, job_manifest("m", ["sh", "-c", "exit 0"]))
        [event] = await collect(make_trigger(sandbox, kubeconfig, "m"))
        assert event["status"] == "success", event
        await statsd.names_received(
            P + "triggerer.shared_watches",
            P + f"triggerer.triggers_per_watch.{NS}",
            P + "triggerer.detection_delay",
            P + f"informer.triggerer.jobs.{NS}.lists",
            P + f"informer.triggerer.pods.{NS}.lists",
        )
    # One watch opened with one trigger on it, then closed when the trigger left.
    assert "1|g" in statsd.values(P + "triggerer.shared_watches")
    assert statsd.values(P + "triggerer.shared_watches")[-1] == "0|g"
    assert statsd.values(P + f"triggerer.triggers_per_watch.{NS}")[-1] == "0|g"
    [delay] = statsd.values(P + "triggerer.detection_delay")
    assert delay.endswith("|ms") and float(delay.split("|")[0]) >= 0
    status = json.loads(status_file.read_text())
    # Written by this process when the watch closed. (Its "healthy" covers every informer of the process,
    # which in this test process may include other tests' leftovers; the verdict rules are unit-tested.)
    assert status["shared_watches"] == 0 and status["triggers_per_watch"] == {}
    assert status["pid"] == os.getpid() and isinstance(status["healthy"], bool)
