"""JobTrigger cannot tell a Job whose pods are simulated (no host process) from one whose pods are
processes: the same event, field by field, apart from the names and ids of the objects."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from airflow_jobwatch_testing.sandbox.simulated import SIMULATE_ANNOTATION

from .conftest import collect, create_job, job_manifest, make_trigger

pytestmark = pytest.mark.timeout(120)

# What differs between two Jobs by construction: their names, uids, times and pod names.
VOLATILE = {"name", "uid", "pod_names", "job", "pods", "message", "job_name"}


def manifest(name: str, command: str, *, simulated: bool, **spec: Any) -> dict[str, Any]:
    body = job_manifest(name, ["sh", "-c", command], **spec)
    body["spec"]["template"]["metadata"] = {
        "annotations": {SIMULATE_ANNOTATION: "true" if simulated else "false"}
    }
    return body


def comparable(event: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in event.items() if k not in VOLATILE}
    out["pods"] = [(p["phase"], p.get("exit_code"), p.get("reason")) for p in event.get("pods") or []]
    message = str(event.get("message", "")).replace("-sim", "-X").replace("-proc", "-X")
    out["message"] = re.sub(r"-X-[a-z0-9]{5}\b", "-X-<pod>", message)
    return out


@pytest.mark.parametrize(
    ("command", "backoff_limit", "outcome"),
    [("sleep 0.3; exit 0", 0, "success"), ("sleep 0.2; exit 3", 1, "failed")],
)
async def test_trigger_reports_simulated_job_like_a_process_job(
    sandbox, kubeconfig, k8s_async_client, command: str, backoff_limit: int, outcome: str
) -> None:
    jobs = {}
    for kind in ("proc", "sim"):
        jobs[kind] = await create_job(
            k8s_async_client,
            manifest(f"{outcome}-{kind}", command, simulated=kind == "sim", backoff_limit=backoff_limit),
        )
    proc_events, sim_events = await asyncio.gather(
        *(
            collect(make_trigger(sandbox, kubeconfig, f"{outcome}-{kind}", jobs[kind]["metadata"]["uid"]))
            for kind in ("proc", "sim")
        )
    )
    assert [e["outcome"] for e in sim_events] == [outcome]
    assert [comparable(e) for e in sim_events] == [comparable(e) for e in proc_events]
    assert len(sim_events[0]["pods"]) == backoff_limit + 1
