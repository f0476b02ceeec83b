"""JobTrigger.run() against the sandbox, driven in the test's own event loop.

Every test checks the one event a user's task would be resumed with.
"""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest
from kubernetes_asyncio.client import BatchV1Api

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

pytestmark = pytest.mark.timeout(120)


async def test_success_reports_pods(sandbox, kubeconfig, k8s_async_client):
    job = await create_job(k8s_async_client, job_manifest("ok", ["sh", "-c", "echo hi; exit 0"]))
    events = await collect(make_trigger(sandbox, kubeconfig, "ok", job["metadata"]["uid"]))
    assert len(events) == 1
    event = events[0]
    assert event["status"] == "success", event
    assert (event["name"], event["namespace"], event["uid"]) == ("ok", NS, job["metadata"]["uid"])
    assert [p["phase"] for p in event["pods"]] == ["succeeded"]
    assert event["pods"][0]["exit_code"] == 0
    # upstream's keys, with upstream's shapes
    assert event["outcome"] == "success"
    assert event["pod_names"] == [event["pods"][0]["name"]]
    assert event["pod_namespace"] == NS
    assert event["xcom_result"] is None  # do_xcom_push is off
    assert event["job"]["metadata"]["uid"] == job["metadata"]["uid"]
    assert event["job"]["status"]["succeeded"] == 1  # kubernetes.client.V1Job.to_dict()'s snake_case
    # the whole Job, read at the end: the shared cache keeps no pod template (kube/engine/projection.py)
    assert (
        event["job"]["spec"]["template"]["spec"]["containers"][0]["command"]
        == job_manifest("ok", ["sh", "-c", "echo hi; exit 0"])["spec"]["template"]["spec"]["containers"][0][
            "command"
        ]
    )
    # the shared watch is gone with its last subscriber
    assert get_registry().active() == {}


async def test_failure_with_reason_names_exit_code(sandbox, kubeconfig, k8s_async_client):
    await create_job(k8s_async_client, job_manifest("bad", ["sh", "-c", "exit 3"]))
    [event] = await collect(make_trigger(sandbox, kubeconfig, "bad"))
    assert event["outcome"] == "failed"
    assert event["status"] == "error"  # upstream's word for a failed Job
    assert event["reason"] == "BackoffLimitExceeded"
    assert event["pods"][0]["exit_code"] == 3
    assert "3" in event["message"]


@pytest.mark.sandbox(job_controller=False, kubelet=False)
async def test_success_whose_pods_never_show_is_reported_after_the_settle_time_not_the_poll(
    sandbox, kubeconfig, k8s_async_client
):
    """A success held for its pods (which never come: no kubelet here) ends when the hold does; the
    safety net's poll (an hour here) must not be what ends the wait."""
    await create_job(k8s_async_client, job_manifest("nopods", ["true"]))
    trigger = make_trigger(sandbox, kubeconfig, "nopods", poll_interval=3600.0)
    # The namespace's watch is synced before the trigger joins it, so the trigger sees the Job running
    # and waits; the Job ends only then.
    async with make_trigger(sandbox, kubeconfig, "nopods").watching():
        task = asyncio.create_task(collect(trigger, limit=20.0))
        await wait_until(lambda: sum(get_registry().active().values()) == 2, what="the trigger joining")
        await complete_without_pods(k8s_async_client, "nopods")
        [event] = await task
    assert event["outcome"] == "success", event
    assert event["pods"] == []


@pytest.mark.sandbox(job_controller=False, kubelet=False)
async def test_job_cached_before_its_trigger_came_is_read_whole_once(sandbox, kubeconfig, k8s_async_client):
    """A Job the shared cache holds in its projected form (it ended before its trigger joined the watch)
    is read whole by one GET, so the event's `job` still carries the pod template."""
    await create_job(k8s_async_client, job_manifest("early", ["true"]))
    await create_job(k8s_async_client, job_manifest("other", ["true"]))
    async with make_trigger(sandbox, kubeconfig, "other").watching() as watch:
        await complete_without_pods(k8s_async_client, "early")

        def cached_complete() -> bool:
            conditions = ((watch.job("early") or {}).get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Complete" for c in conditions)

        await wait_until(cached_complete, what="the ended Job in the shared cache")
        assert "template" not in (watch.job("early") or {}).get("spec", {})  # cached projected
        sandbox.reset_counters()
        [event] = await collect(make_trigger(sandbox, kubeconfig, "early"), limit=20.0)
    assert event["outcome"] == "success", event
    assert event["job"]["spec"]["template"]["spec"]["containers"][0]["name"] == "base"
    assert sandbox.counters().get("get jobs", 0) == 1, sandbox.counters()


@pytest.mark.sandbox(job_controller=False, kubelet=False)
async def test_failed_condition_without_reason_is_a_failure_and_false_is_not_final(
    sandbox, kubeconfig, k8s_async_client
):
    """Upstream reports a Failed Job with no reason as success and treats status "False" as final."""
    await create_job(k8s_async_client, job_manifest("noreason", ["true"]))
    task = asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, "noreason")))
    api = BatchV1Api(k8s_async_client)

    async def set_conditions(conditions):
        await api.patch_namespaced_job_status(
            "noreason",
            NS,
            {"status": {"conditions": conditions}},
            _content_type="application/merge-patch+json",
        )

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await set_conditions(
        [
            {"type": "Complete", "status": "False", "lastTransitionTime": now},
            {"type": "Failed", "status": "False", "lastTransitionTime": now},
        ]
    )
    await wait_until(lambda: job_condition(sandbox, "noreason", "Complete") == "False")
    await asyncio.sleep(0.5)  # give a wrong trigger the chance to fire on the "False" conditions
    assert not task.done(), task.result() if task.done() else None
    await set_conditions([{"type": "Failed", "status": "True", "lastTransitionTime": now}])
    [event] = await task
    assert event["outcome"] == "failed", event
    assert event["reason"] == "Failed"


async def test_backoff_retries_then_success(sandbox, kubeconfig, k8s_async_client, tmp_path):
    marker = tmp_path / "first-try-done"
    script = f"if [ -f {marker} ]; then exit 0; else touch {marker}; exit 1; fi"
    await create_job(k8s_async_client, job_manifest("retry", ["sh", "-c", script], backoff_limit=3))
    [event] = await collect(make_trigger(sandbox, kubeconfig, "retry"))
    assert event["status"] == "success", event
    phases = sorted(p["phase"] for p in event["pods"])
    assert phases == ["failed", "succeeded"]


async def test_deadline_exceeded(sandbox, kubeconfig, k8s_async_client):
    await create_job(k8s_async_client, job_manifest("slow", ["sleep", "30"], activeDeadlineSeconds=1))
    [event] = await collect(make_trigger(sandbox, kubeconfig, "slow"))
    assert event["outcome"] == "failed"
    assert event["reason"] == "DeadlineExceeded"


async def test_suspended_waits_then_resumed_succeeds(sandbox, kubeconfig, k8s_async_client):
    await create_job(k8s_async_client, job_manifest("susp", ["sh", "-c", "exit 0"], suspend=True))
    task = asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, "susp")))
    await wait_until(lambda: job_condition(sandbox, "susp", "Suspended") == "True", what="Suspended")
    await asyncio.sleep(0.5)
    assert not task.done()
    await BatchV1Api(k8s_async_client).patch_namespaced_job(
        "susp", NS, {"spec": {"suspend": False}}, _content_type="application/merge-patch+json"
    )
    [event] = await task
    assert event["status"] == "success", event


async def test_suspended_past_deadline_is_timeout(sandbox, kubeconfig, k8s_async_client):
    await create_job(k8s_async_client, job_manifest("susp2", ["true"], suspend=True))
    started = time.monotonic()
    [event] = await collect(make_trigger(sandbox, kubeconfig, "susp2", timeout=1.5))
    assert event["outcome"] == "timeout"
    assert "suspended" in event["message"]
    assert time.monotonic() - started >= 1.4


async def test_deleted_while_waiting(sandbox, kubeconfig, k8s_async_client):
    await create_job(k8s_async_client, job_manifest("gone", ["sleep", "30"]))
    sandbox.reset_counters()
    task = asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, "gone")))
    await wait_until(lambda: bool(sandbox.objects("pods", NS)), what="the Job's pod")
    # "deleted" claims a deletion the watch saw while the Job ran: delete it only once the trigger's Job
    # watch is running, i.e. past the list that showed the Job running (a deletion before that is not
    # seen, and is the "unknown" outcome instead).
    await wait_until(lambda: sandbox.counters().get("watch jobs", 0) >= 1, what="the trigger's Job watch")
    await BatchV1Api(k8s_async_client).delete_namespaced_job("gone", NS, propagation_policy="Background")
    [event] = await task
    assert event["outcome"] == "deleted", event
    assert event["reason"] == "Deleted"


async def test_ttl_deletion_right_after_completion_is_success(sandbox, kubeconfig, k8s_async_client):
    await create_job(
        k8s_async_client, job_manifest("ttl", ["sh", "-c", "sleep 0.5"], ttlSecondsAfterFinished=0)
    )
    [event] = await collect(make_trigger(sandbox, kubeconfig, "ttl"))
    assert event["status"] == "success", event
    await wait_until(lambda: sandbox.get_object("jobs", NS, "ttl") is None, what="TTL deletion")


async def test_job_finished_before_trigger_started_is_reported_at_once(sandbox, kubeconfig, k8s_async_client):
    await create_job(k8s_async_client, job_manifest("early", ["true"]))
    await wait_until(lambda: job_condition(sandbox, "early", "Complete") == "True", what="Complete")
    started = time.monotonic()
    [event] = await collect(make_trigger(sandbox, kubeconfig, "early", poll_interval=60))
    assert event["status"] == "success"
    assert time.monotonic() - started < 10  # well before the 60 s safety-net period


@pytest.mark.parametrize("poll_interval", [5.0, 3600.0])
async def test_job_deleted_before_trigger_started(sandbox, kubeconfig, k8s_async_client, poll_interval):
    """The Job is missing from the synced cache: confirmed by a GET once the watch has synced, however
    long the safety net's poll (with an hour-long poll, nothing but the sync wakes the wait)."""
    trigger = make_trigger(sandbox, kubeconfig, "never-existed", poll_interval=poll_interval)
    [event] = await collect(trigger, limit=20.0)
    assert (event["outcome"], event["reason"]) == ("unknown", "FinalStateUnknown"), event
    assert "no longer exists, and the trigger's watch never saw it end" in event["message"]


async def test_unpullable_image_fails_fast(sandbox, kubeconfig, k8s_async_client):
    sandbox.set_image_pull_failure(r"^no-such-registry\.example/")
    await create_job(
        k8s_async_client,
        job_manifest("pull", ["true"], image="no-such-registry.example/app:1", backoff_limit=6),
    )
    started = time.monotonic()
    [event] = await collect(make_trigger(sandbox, kubeconfig, "pull", timeout=60))
    assert event["outcome"] == "failed", event
    assert event["reason"] in ("ErrImagePull", "ImagePullBackOff")
    assert time.monotonic() - started < 30  # long before the 60 s timeout


async def test_parallelism_above_completions(sandbox, kubeconfig, k8s_async_client):
    await create_job(
        k8s_async_client, job_manifest("par", ["sh", "-c", "sleep 0.3"], parallelism=3, completions=1)
    )
    [event] = await collect(make_trigger(sandbox, kubeconfig, "par"))
    assert event["status"] == "success", event


async def test_410_storm_while_waiting(sandbox, kubeconfig, k8s_async_client):
    await create_job(k8s_async_client, job_manifest("storm", ["sleep", "3"]))
    task = asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, "storm")))
    sandbox.set_watch_expired(True)
    try:
        for _ in range(10):
            sandbox.drop_watches()
            await asyncio.sleep(0.2)
    finally:
        sandbox.set_watch_expired(False)
    [event] = await task
    assert event["status"] == "success", event


async def test_stalled_watches_while_waiting(sandbox, kubeconfig, k8s_async_client):
    """A half-open watch sends nothing; the informer's stall timeout (2 s here) reconnects it."""
    await create_job(k8s_async_client, job_manifest("stall", ["sleep", "1"]))
    trigger = make_trigger(sandbox, kubeconfig, "stall", poll_interval=60)
    task = asyncio.create_task(collect(trigger))
    await asyncio.sleep(0.5)
    sandbox.stall_watches(True)
    await asyncio.sleep(0.5)
    sandbox.stall_watches(False)  # the stalled streams stay silent, like a half-open connection
    [event] = await task
    assert event["status"] == "success", event


async def test_short_api_outage_is_tolerated(sandbox, kubeconfig, k8s_async_client):
    await create_job(k8s_async_client, job_manifest("outage", ["sleep", "2"]))
    task = asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, "outage", api_failure_tolerance=30)))
    await asyncio.sleep(0.5)
    sandbox.outage(3.0)
    [event] = await task
    assert event["status"] == "success", event


async def test_long_api_outage_ends_with_error(sandbox, kubeconfig, k8s_async_client):
    await create_job(k8s_async_client, job_manifest("outage2", ["sleep", "30"]))
    task = asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, "outage2", api_failure_tolerance=2)))
    await wait_until(lambda: bool(sandbox.objects("pods", NS)), what="the Job's pod")
    await asyncio.sleep(0.3)
    sandbox.start_outage()
    try:
        [event] = await task
    finally:
        sandbox.end_outage()
    assert event["status"] == "error", event
    assert event["reason"] == "ApiUnreachable"
    assert "last error" in event["message"]


@pytest.mark.sandbox(job_controller=False, kubelet=False)
async def test_timeout_racing_success_first_result_wins(sandbox, kubeconfig, k8s_async_client):
    """Deadlines spread around the moment the Job completes: each trigger yields exactly one event,
    and the results are ordered: every trigger whose deadline came first says timeout, every later
    one says success; a success is never overwritten by a later deadline, nor a timeout by a success."""
    await create_job(k8s_async_client, job_manifest("race", ["true"]))
    api = BatchV1Api(k8s_async_client)
    # Wait until a shared watch is up so all deadlines fall around the completion, not the start-up.
    warm = asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, "race")))
    await wait_until(lambda: any(n for n in get_registry().active().values()), what="shared watch")
    await asyncio.sleep(0.3)
    base = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=0.5)
    deadlines = [base + datetime.timedelta(milliseconds=10 * i) for i in range(40)]
    tasks = [
        asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, "race", timeout=d))) for d in deadlines
    ]
    await asyncio.sleep(max(0.0, (base - datetime.datetime.now(datetime.UTC)).total_seconds() + 0.2))
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await api.patch_namespaced_job_status(
        "race",
        NS,
        {"status": {"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": now}]}},
        _content_type="application/merge-patch+json",
    )
    results = await asyncio.gather(*tasks)
    assert all(len(events) == 1 for events in results)
    statuses = [events[0]["outcome"] for events in results]
    assert set(statuses) <= {"success", "timeout"}
    assert "timeout" in statuses and "success" in statuses, statuses
    first_success = statuses.index("success")
    assert statuses[first_success:] == ["success"] * (len(statuses) - first_success), statuses
    [warm_event] = await warm
    assert warm_event["status"] == "success"


@pytest.mark.sandbox(job_controller=False, kubelet=False)
async def test_300_triggers_share_one_watch(sandbox, kubeconfig, k8s_async_client):
    n = 300
    api = BatchV1Api(k8s_async_client)
    for i in range(n):
        await create_job(k8s_async_client, job_manifest(f"many-{i}", ["true"]))
    sandbox.reset_counters()
    tasks = [asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, f"many-{i}"))) for i in range(n)]
    await wait_until(lambda: sum(get_registry().active().values()) == n, what="all subscribed")
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {"status": {"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": now}]}}
    for i in range(n):
        await api.patch_namespaced_job_status(
            f"many-{i}", NS, body, _content_type="application/merge-patch+json"
        )
    results = await asyncio.gather(*tasks)
    assert [r[0]["status"] for r in results] == ["success"] * n
    counters = sandbox.counters()
    trigger_requests = {k: v for k, v in counters.items() if k.split()[1] in ("jobs", "pods")}
    trigger_requests = {k: v for k, v in trigger_requests.items() if not k.startswith("patch")}
    # Nothing per trigger, not even at the end: the shared cache keeps the Jobs triggers wait for whole
    # (the event's `job` is the whole Job, upstream's key), and projects the namespace's other Jobs.
    assert trigger_requests.get("get jobs", 0) == 0, counters
    assert all(r[0]["job"]["spec"]["template"] is not None for r in results)
    assert trigger_requests.get("list jobs", 0) <= 2, counters
    assert trigger_requests.get("watch jobs", 0) <= 2, counters
    assert trigger_requests.get("list pods", 0) <= 2, counters
    assert trigger_requests.get("watch pods", 0) <= 2, counters


@pytest.mark.sandbox(job_controller=False, kubelet=False, namespaces=("default", "other"))
async def test_watch_per_namespace_starts_with_first_and_stops_after_last(
    sandbox, kubeconfig, k8s_async_client
):
    from airflow_jobwatch.triggers.job import JobTrigger

    await create_job(k8s_async_client, job_manifest("a", ["true"]))
    await BatchV1Api(k8s_async_client).create_namespaced_job("other", job_manifest("b", ["true"]))
    registry = get_registry()
    sandbox.reset_counters()
    ta = asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, "a")))
    tb = asyncio.create_task(collect(JobTrigger("b", "other", config_file=str(kubeconfig), poll_interval=5)))
    await wait_until(lambda: sorted(k.namespace for k in registry.active()) == ["default", "other"])
    # Both watches are past their LISTs (each watches): no LIST of theirs can still be on its way to
    # the server, to be counted after the reset below as if the fresh watch had sent it.
    await wait_until(
        lambda: sandbox.counters().get("watch jobs", 0) == 2 and sandbox.counters().get("watch pods", 0) == 2,
        what="both namespaces' watches running",
    )
    ta.cancel()  # like a triggerer handing the trigger over: leaves the watch, touches nothing
    with pytest.raises(asyncio.CancelledError):
        await ta
    assert sorted(k.namespace for k in registry.active()) == ["other"]
    assert sandbox.get_object("jobs", NS, "a") is not None
    tb.cancel()
    with pytest.raises(asyncio.CancelledError):
        await tb
    assert registry.active() == {}
    sandbox.reset_counters()
    # a new subscriber starts a fresh watch
    tc = asyncio.create_task(collect(make_trigger(sandbox, kubeconfig, "a", timeout=0.5)))
    [event] = await tc
    assert event["outcome"] == "timeout"
    assert "running" in event["message"] or "pending" in event["message"]
    assert sandbox.counters().get("list jobs") == 1


async def test_unreadable_kubeconfig_is_an_error_event(tmp_path):
    from airflow_jobwatch.triggers.job import JobTrigger

    bad = tmp_path / "kubeconfig"
    bad.write_text("not: [a kubeconfig")
    [event] = await collect(JobTrigger("x", NS, config_file=str(bad)))
    assert event["status"] == "error"
    assert event["reason"] == "ConfigError"
    assert str(bad) in event["message"]
