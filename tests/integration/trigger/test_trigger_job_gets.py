"""When a JobTrigger sends a GET of its Job, counted in the sandbox's request log and in
the registry's own counter.

A trigger that subscribes before its Job ends gets the whole Job from the shared watch: no GET, however
soon after the Job's create it subscribes (an operator defers right after the create is answered, so its
trigger usually joins before the watch has delivered the new Job). A GET is left only for a Job the
watch cannot answer for: one that ended while cached projected before its trigger came (read whole
once), or one missing from the synced cache past a grace (deleted before the watch saw it, or a watch
that lags: confirmed once).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_jobwatch.triggers.registry import get_registry

from .conftest import (
    NS,
    collect,
    complete_without_pods,
    create_job,
    job_condition,
    job_manifest,
    make_trigger,
    wait_until,
)


@pytest.fixture
def watch_may_lag(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Job missing from the cache is confirmed by a GET only after 30 s here, not 2 s: on a loaded CI
    machine the watch may deliver a new Job more than 2 s late, and that GET would be legitimate. The
    tests that use this check that no *other* path reads the Job (the old code read it at once)."""
    from airflow_jobwatch.triggers import waiting

    monkeypatch.setattr(waiting, "_MISSING_GRACE_SECONDS", 30.0)


pytestmark = pytest.mark.timeout(180)


def _job_gets(sandbox: Any) -> int:
    return sandbox.counters().get("get jobs", 0)


async def _read_as_upstream(kubeconfig: Any, name: str) -> dict[str, Any]:
    """The Job as ``kubernetes.client`` reads it and ``V1Job.to_dict()`` returns it (upstream's ``job``)."""

    def read() -> dict[str, Any]:
        from kubernetes import client, config

        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            return client.BatchV1Api(api_client).read_namespaced_job(name, NS).to_dict()  # type: ignore[no-any-return]
        finally:
            api_client.close()

    return await asyncio.to_thread(read)


async def test_triggers_subscribed_right_after_each_create_read_no_job(
    sandbox, kubeconfig, k8s_async_client, watch_may_lag
):
    """20 Jobs, each trigger started as soon as its Job's create is answered, on a watch already open
    (another trigger of the namespace keeps it): the Jobs run and end through the sandbox's Job
    controller and kubelet (2 s each, so that none ends before its trigger subscribes: such a Job is read
    once, see test_job_ended_before_its_trigger_subscribed_is_read_once), and no trigger GETs its Job.
    Each event's ``job`` is still the whole Job, equal to what upstream's client reads."""
    n = 20
    async with make_trigger(sandbox, kubeconfig, "keeper").watching():
        sandbox.reset_counters()
        tasks = []
        for i in range(n):
            name = f"soon-{i}"
            job = await create_job(
                k8s_async_client, job_manifest(name, ["sh", "-c", f"sleep 2; exit {i % 2}"])
            )
            trigger = make_trigger(sandbox, kubeconfig, name, job["metadata"]["uid"], poll_interval=30.0)
            tasks.append(asyncio.create_task(collect(trigger)))
        results = [events for events in await asyncio.gather(*tasks)]
        gets = _job_gets(sandbox)
    assert [len(events) for events in results] == [1] * n
    events = [events[0] for events in results]
    assert [e["outcome"] for e in events] == ["success" if i % 2 == 0 else "failed" for i in range(n)], events
    assert gets == 0, (sandbox.counters(), dict(get_registry().job_gets))
    assert dict(get_registry().job_gets) == {}
    for i, event in enumerate(events):
        assert (
            event["job"]["spec"]["template"]["spec"]["containers"][0]["command"][-1]
            == f"sleep 2; exit {i % 2}"
        )
    # the whole Job, exactly as upstream's KubernetesJobTrigger's event carries it
    upstream = await _read_as_upstream(kubeconfig, "soon-0")
    assert events[0]["job"] == upstream


async def test_triggers_subscribed_while_each_create_is_in_flight_read_no_job(
    sandbox, kubeconfig, k8s_async_client, watch_may_lag
):
    """20 triggers, each started just before its Job's create is sent, so each looks at the shared cache
    before the Job is in it: the watch delivers the Job within moments, and no trigger GETs it."""
    n = 20
    async with make_trigger(sandbox, kubeconfig, "keeper").watching():
        sandbox.reset_counters()
        tasks = []
        for i in range(n):
            name = f"early-{i}"
            tasks.append(
                asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, name, poll_interval=30.0)))
            )
            await create_job(k8s_async_client, job_manifest(name, ["true"]))
        events = [e for events in await asyncio.gather(*tasks) for e in events]
        gets = _job_gets(sandbox)
    assert [e["outcome"] for e in events] == ["success"] * n, events
    assert gets == 0, (sandbox.counters(), dict(get_registry().job_gets))
    assert dict(get_registry().job_gets) == {}
    assert all(e["job"]["spec"]["template"] is not None for e in events)


@pytest.mark.sandbox(job_controller=False, kubelet=False)
async def test_triggers_subscribed_before_the_first_list_read_no_job(
    sandbox, kubeconfig, k8s_async_client, watch_may_lag
):
    """The first trigger of a namespace opens the watch: its Job, listed after the trigger subscribed, is
    stored whole, so the event needs no GET either (the Jobs end by status writes here)."""
    for i in range(3):
        await create_job(k8s_async_client, job_manifest(f"first-{i}", ["true"]))
    sandbox.reset_counters()
    tasks = [asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, f"first-{i}"))) for i in range(3)]
    await wait_until(lambda: sum(get_registry().active().values()) == 3, what="the triggers subscribing")
    await wait_until(lambda: all(w.synced for w in get_registry()._watches.values()), what="the first list")
    for i in range(3):
        await complete_without_pods(k8s_async_client, f"first-{i}")
    events = [e for events in await asyncio.gather(*tasks) for e in events]
    assert [e["outcome"] for e in events] == ["success"] * 3
    assert all(e["job"]["spec"]["template"] is not None for e in events)
    assert _job_gets(sandbox) == 0, sandbox.counters()
    assert dict(get_registry().job_gets) == {}


async def test_job_ended_before_its_trigger_subscribed_is_read_once(sandbox, kubeconfig, k8s_async_client):
    """A triggerer restart: the Job ran and ended (Job controller, kubelet) while the namespace's watch
    held it projected and no trigger waited for it. The new trigger reads it whole with exactly one GET,
    counted as ``projected``."""
    async with make_trigger(sandbox, kubeconfig, "keeper").watching() as watch:
        await create_job(k8s_async_client, job_manifest("ended", ["sh", "-c", "exit 0"]))
        await wait_until(lambda: job_condition(sandbox, "ended", "Complete") == "True", what="Complete")

        def cached_complete() -> bool:
            conditions = ((watch.job("ended") or {}).get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Complete" for c in conditions)

        await wait_until(cached_complete, what="the ended Job in the shared cache")
        assert "template" not in (watch.job("ended") or {}).get("spec", {})  # cached projected
        sandbox.reset_counters()
        [event] = await collect(make_trigger(sandbox, kubeconfig, "ended"))
        gets = _job_gets(sandbox)
    assert event["outcome"] == "success", event
    assert event["job"] == await _read_as_upstream(kubeconfig, "ended")
    assert gets == 1, sandbox.counters()
    assert dict(get_registry().job_gets) == {"projected": 1}


async def test_job_deleted_before_its_trigger_subscribed_is_confirmed_by_one_get(
    sandbox, kubeconfig, k8s_async_client
):
    """A Job gone before any watch saw it: one GET (404) confirms it, counted as ``missing``."""
    async with make_trigger(sandbox, kubeconfig, "keeper").watching():
        sandbox.reset_counters()
        [event] = await collect(make_trigger(sandbox, kubeconfig, "never-here"), limit=30.0)
        gets = _job_gets(sandbox)
    assert event["outcome"] == "unknown", event  # gone, but neither its end nor its deletion was seen
    assert gets == 1, sandbox.counters()
    assert dict(get_registry().job_gets) == {"missing": 1}


async def test_job_the_watch_does_not_deliver_is_read_by_one_get(sandbox, kubeconfig, k8s_async_client):
    """The safety net still works when the watch lags: with every watch silent (stalled), a Job created
    and ended meanwhile is missing from the synced cache, and one GET (after the grace in which the watch
    could still deliver it) reads its end."""
    async with make_trigger(sandbox, kubeconfig, "keeper").watching():
        sandbox.stall_watches(True)
        try:
            await create_job(k8s_async_client, job_manifest("unseen", ["sh", "-c", "exit 0"]))
            await wait_until(lambda: job_condition(sandbox, "unseen", "Complete") == "True", what="Complete")
            sandbox.reset_counters()
            [event] = await collect(make_trigger(sandbox, kubeconfig, "unseen"), limit=30.0)
            gets = _job_gets(sandbox)
        finally:
            sandbox.stall_watches(False)
    assert event["outcome"] == "success", event
    assert event["job"]["spec"]["template"] is not None  # the GET's whole Job
    assert gets == 1, sandbox.counters()
    assert dict(get_registry().job_gets) == {"missing": 1}
