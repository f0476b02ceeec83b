"""Why a Job's pods cannot be created comes from one shared watch of the namespace's FailedCreate events,
never from a request per Job: on the sandbox, with its Job controller slowed to a few pods per second.

* N Jobs waiting for a slow Job controller cost the same events requests for N=6 and N=30 (one LIST and
  one WATCH of the namespace's FailedCreate events), however many of them wait past the grace;
* a real refusal (a ResourceQuota's 403, recorded by the Job controller as FailedCreate) still reaches the
  waiting trigger's log, once;
* a triggerer whose Jobs all get their pods in time never watches events at all.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog.testing

from airflow_jobwatch.triggers import notes
from airflow_jobwatch.triggers.refusals import FIELD_SELECTOR

from .conftest import NS, collect, create_job, job_manifest, make_trigger, wait_until
from .test_job_operator import _rendered

pytestmark = pytest.mark.timeout(120)

RATE = 4.0  # pods per second, in all, from the sandbox's Job controller


def _simulated(name: str, seconds: int) -> dict[str, Any]:
    """A Job whose pod runs ``seconds`` with no host process (the sandbox's simulated pods)."""
    manifest = job_manifest(name, ["sleep", str(seconds)])
    manifest["spec"]["template"]["metadata"] = {"annotations": {"sandbox.jobwatch.io/simulate": "true"}}
    return manifest


def _events_requests(sandbox: Any) -> dict[str, int]:
    counters = sandbox.counters()
    return {key: counters.get(key, 0) for key in ("list events", "watch events", "get events")}


@pytest.mark.parametrize("jobs", [6, 30])
async def test_jobs_waiting_for_a_slow_job_controller_cost_no_events_request_each(
    sandbox, kubeconfig, k8s_async_client, monkeypatch, jobs: int
) -> None:
    # One second without a pod is enough to look for a reason here (5 s in production), so that most
    # of the N Jobs, which get their pods at RATE per second, wait past it.
    monkeypatch.setattr(notes, "MISSING_PODS_FIRST_CHECK_SECONDS", 1.0)
    sandbox.set_pod_creation_rate(RATE)
    # The quota admits the N pods (they run a minute) and refuses the last Job's: a real FailedCreate.
    sandbox.set_pod_quota(NS, jobs, "team-quota")
    names = [f"slow-{i}" for i in range(jobs)]
    for name in names:
        await create_job(k8s_async_client, _simulated(name, 60))
    await create_job(k8s_async_client, _simulated("capped", 1))
    sandbox.reset_counters()
    tasks: list[asyncio.Task[Any]] = []
    try:
        with structlog.testing.capture_logs() as logs:
            for name in [*names, "capped"]:
                trigger = make_trigger(sandbox, kubeconfig, name, poll_interval=0.5)
                tasks.append(asyncio.create_task(collect(trigger, limit=110)))
            await wait_until(
                lambda: len(sandbox.objects("pods", NS)) >= jobs,
                limit=jobs / RATE + 30,
                what=f"the slow Job controller's {jobs} pods",
            )
            await wait_until(
                lambda: "Job default/capped cannot create its pods yet" in _rendered(logs),
                limit=30,
                what="the quota's refusal in the capped Job's log",
            )
            assert not any(task.done() for task in tasks)  # every trigger still waits
            text = _rendered(logs)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert text.count("cannot create its pods yet") == 1, text  # the capped Job's only, and once
    assert "exceeded quota: team-quota, requested: pods=1" in text
    # The Jobs that waited for the slow controller cost nothing each: one LIST and one WATCH of the
    # namespace's refusals in all (a reconnect at most), for 6 Jobs as for 30.
    requests = _events_requests(sandbox)
    assert requests["list events"] == 1, requests
    assert requests["watch events"] <= 2, requests
    assert requests["get events"] == 0, requests


async def test_jobs_that_get_their_pods_in_time_never_watch_events(
    sandbox, kubeconfig, k8s_async_client
) -> None:
    for name in ("prompt-a", "prompt-b", "prompt-c"):
        await create_job(k8s_async_client, _simulated(name, 2))
    sandbox.reset_counters()
    results = await asyncio.gather(
        *(
            collect(make_trigger(sandbox, kubeconfig, n, poll_interval=0.5))
            for n in ("prompt-a", "prompt-b", "prompt-c")
        )
    )
    assert [events[0]["status"] for events in results] == ["success"] * 3
    assert _events_requests(sandbox) == {"list events": 0, "watch events": 0, "get events": 0}


def test_the_refusal_watch_selects_only_the_job_controllers_refusals() -> None:
    """The selector the API server filters with (a typo there would watch nothing, silently)."""
    assert FIELD_SELECTOR == "involvedObject.kind=Job,reason=FailedCreate"


async def test_a_quota_refusal_is_said_once_while_the_namespaces_usage_changes(
    sandbox, kubeconfig, k8s_async_client, monkeypatch
) -> None:
    """The quota's 403 names the namespace's usage (``used: pods=N``), which changes as other pods end;
    the Job controller records a new FailedCreate at each retry. The waiting task's log says it once."""
    from kubernetes_asyncio.client import CoreV1Api

    monkeypatch.setattr(notes, "MISSING_PODS_FIRST_CHECK_SECONDS", 0.3)
    for name, seconds in (("filler-a", 2), ("filler-b", 4)):
        await create_job(k8s_async_client, _simulated(name, seconds))
    await wait_until(lambda: len(sandbox.objects("pods", NS)) == 2, what="the fillers' pods")
    sandbox.set_pod_quota(NS, 0, "team-quota")  # every new pod refused, used: pods=2, then 1, then 0
    await create_job(k8s_async_client, _simulated("capped", 1))
    trigger = make_trigger(sandbox, kubeconfig, "capped", poll_interval=0.5)
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(collect(trigger, limit=110))

        async def usages_refused() -> set[str]:
            events = await CoreV1Api(k8s_async_client).list_namespaced_event(
                NS, field_selector=FIELD_SELECTOR
            )
            return {e.message.split("used: ")[1] for e in events.items if "used: " in (e.message or "")}

        async def several_usages() -> bool:
            return len(await usages_refused()) >= 2

        await wait_until(several_usages, limit=60, what="refusals naming two different usages")
        await wait_until(
            lambda: "cannot create its pods yet" in _rendered(logs), what="the refusal in the log"
        )
        sandbox.set_pod_quota(NS, None)
        events = await task
    assert events[0]["status"] == "success", events
    text = _rendered(logs)
    assert text.count("cannot create its pods") == 1, text
