"""The watch engine against the sandbox, one fault at a time.

Every scenario ends with the two invariants of conftest.check_invariants: the store equals the server, and each
object's final state (or its one deletion) reached the subscriber exactly once.
"""

from __future__ import annotations

import asyncio

import pytest
from informer_helpers import (
    FAST,
    NS,
    Pods,
    api_client_for,
    consistent,
    eventually,
    running_informer,
    server_state,
)

from airflow_jobwatch.kube.engine.backoff import Backoff
from airflow_jobwatch.kube.engine.informer import EventType, InformerConfig


async def test_initial_list_then_live_changes(sb, api, pods: Pods):
    for i in range(10):  # FAST.page_size is 7: the initial list takes two pages
        await pods.create(f"pre-{i}")
    sb.reset_counters()
    async with running_informer(api) as (informer, rec):
        assert rec.types() == {EventType.ADDED: 10}
        assert all(o["kind"] == "Pod" and o["apiVersion"] == "v1" for o in informer.items())
        await pods.create("live")
        await pods.set_phase("pre-0", "Running")
        await pods.set_phase("pre-0", "Succeeded")
        await pods.delete("pre-1")
        await consistent(informer, rec, sb)
        assert informer.by_name(NS, "live") is not None
        assert informer.by_name(NS, "pre-1") is None
        assert informer.by_name(NS, "pre-0")["status"]["phase"] == "Succeeded"
        # the deletion seen live is a DELETED, with the object's final state
        deleted = [e for e in rec.events if e[0] is EventType.DELETED]
        assert [e[3]["metadata"]["name"] for e in deleted] == ["pre-1"]
        assert informer.health.relists == 0
    assert sb.counters().get("list pods") == 2  # two pages, one list


async def test_label_and_field_selectors(sb, api, pods: Pods):
    await pods.create("a", team="x")
    await pods.create("b", team="y")
    async with running_informer(api, label_selector="team=x", field_selector="metadata.name!=zzz") as (
        informer,
        rec,
    ):
        await pods.create("c", team="x")
        await pods.create("d", team="y")
        await consistent(informer, rec, sb, team="x")
        assert sorted(o["metadata"]["name"] for o in informer.items()) == ["a", "c"]


async def test_all_namespaces_and_jobs(make_sandbox, tmp_path):
    sandbox = make_sandbox(namespaces=("default", "other"))
    async with api_client_for(sandbox, tmp_path) as client:
        await Pods(client, "other").create("p-other")
        await Pods(client, "default").create("p-default")
        async with running_informer(client, namespace=None) as (informer, rec):
            assert {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in informer.items()} == {
                ("other", "p-other"),
                ("default", "p-default"),
            }
            await consistent(informer, rec, sandbox, namespace=None)
        # jobs (batch/v1) go through the same engine
        from kubernetes_asyncio.client import BatchV1Api

        body = {
            "metadata": {"name": "j1"},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "x", "command": ["true"]}],
                    }
                }
            },
        }
        async with running_informer(client, kind="jobs", namespace="default") as (informer, rec):
            await BatchV1Api(client).create_namespaced_job("default", body)
            await eventually(lambda: [o["kind"] for o in informer.items()] == ["Job"])
            await consistent(informer, rec, sandbox, kind="jobs")


async def test_watch_expired_at_watch_start(sb, api, pods: Pods):
    """Every watch answers 410 at once: the engine relists (bounded by the backoff) and stays consistent; once
    the server behaves again it watches normally."""
    await pods.create("p0")
    sb.set_watch_expired(True)
    async with running_informer(api) as (informer, rec):
        await pods.create("p1")
        await pods.set_phase("p0", "Running")
        await eventually(lambda: informer.health.relists >= 2)
        await pods.delete("p1")
        await pods.create("p2")
        sb.set_watch_expired(False)
        await consistent(informer, rec, sb)
        assert "410" in (informer.health.last_error or "")
        # back to live watching: a change is seen without another relist
        relists = informer.health.relists
        await eventually(lambda: informer.health.connected)
        await pods.set_phase("p2", "Succeeded")
        await consistent(informer, rec, sb)
        assert informer.health.relists == relists
        # p1 was created and deleted between two relists: either never seen, or seen and tombstoned once
        assert rec.types()[EventType.DELETED] == 0


async def test_history_window_of_one_with_changes_while_disconnected(make_sandbox, tmp_path):
    """Created, changed and deleted while the engine's stream was stalled, and the history is too short to
    replay: the reconnect gets 410 and the relist reconciles, with tombstones for what vanished."""
    sandbox = make_sandbox(history_window=1)
    async with api_client_for(sandbox, tmp_path) as client:
        pods = Pods(client)
        for name in ("keep", "change", "gone-1", "gone-2"):
            await pods.create(name)
        async with running_informer(client) as (informer, rec):
            await eventually(lambda: informer.health.connected)
            sandbox.stall_watches(True)  # the open stream goes silent: the engine is effectively disconnected
            await pods.create("new")
            await pods.set_phase("change", "Failed")
            await pods.delete("gone-1")
            await pods.delete("gone-2")
            await pods.create("short-lived")
            await pods.delete("short-lived")
            sandbox.stall_watches(False)
            await consistent(informer, rec, sandbox)
            tombstones = sorted(
                e[3]["metadata"]["name"] for e in rec.events if e[0] is EventType.DELETED_UNKNOWN
            )
            assert tombstones == ["gone-1", "gone-2"]
            assert informer.health.relists >= 1
            assert informer.by_name(NS, "change")["status"]["phase"] == "Failed"
            assert "410" in (informer.health.last_error or "")


async def test_410_mid_session_after_stream_broke(make_sandbox, tmp_path):
    """Live for a while, then the stream breaks and history moves past the engine's resourceVersion."""
    sandbox = make_sandbox(history_window=3, bookmark_interval=None)
    async with api_client_for(sandbox, tmp_path) as client:
        pods = Pods(client)
        async with running_informer(client) as (informer, rec):
            for i in range(3):
                await pods.create(f"p{i}")
            await consistent(informer, rec, sandbox)
            sandbox.stall_watches(True)
            for i in range(3):
                await pods.set_phase(f"p{i}", "Running")
            await pods.delete("p0")
            await pods.create("p3")
            sandbox.stall_watches(False)
            await consistent(informer, rec, sandbox)
            assert [e[3]["metadata"]["name"] for e in rec.events if e[0] is EventType.DELETED_UNKNOWN] == [
                "p0"
            ]


async def test_dropped_watches_resume_without_relist(sb, api, pods: Pods):
    """A dropped connection is resumed from the last resourceVersion: the history replays what was missed."""
    async with running_informer(api) as (informer, rec):
        for round_ in range(5):
            await pods.create(f"p{round_}")
            assert sb.drop_watches() <= 1
            await pods.set_phase(f"p{round_}", "Running")
            if round_:
                await pods.delete(f"p{round_ - 1}")
        await consistent(informer, rec, sb)
        assert informer.health.relists == 0
        assert rec.types()[EventType.DELETED_UNKNOWN] == 0
        assert rec.types()[EventType.DELETED] == 4
        await eventually(lambda: informer.health.watches >= 2)


async def test_stalled_watch_is_detected_and_replaced(sb, api, pods: Pods):
    async with running_informer(api) as (informer, rec):
        await eventually(lambda: informer.health.connected)
        sb.stall_watches(True)
        await pods.create("during-stall")
        await pods.set_phase("during-stall", "Running")
        watches = informer.health.watches
        # while stalled the engine reconnects after each stall timeout (new watches stall too: headers never come)
        await eventually(lambda: sb.counters().get("watch pods", 0) >= 3, within=10)
        assert informer.by_name(NS, "during-stall") is None  # nothing arrived through a stalled stream
        sb.stall_watches(False)
        await consistent(informer, rec, sb)
        assert informer.health.watches > watches
        assert informer.health.relists == 0  # the history was long enough to replay


@pytest.mark.parametrize(
    ("status", "retry_after"),
    [(429, 0.2), (500, None), (503, None)],
)
async def test_error_bursts(sb, api, pods: Pods, status, retry_after):
    """Half of all list and watch requests fail: the engine retries with backoff and ends consistent."""
    for i in range(12):
        await pods.create(f"pre-{i}")
    sb.set_error_rate(0.5, status=status, retry_after=retry_after, verbs={"list", "watch"})
    async with running_informer(api, sync_timeout=30) as (informer, rec):
        for i in range(6):
            await pods.set_phase(f"pre-{i}", "Running")
            sb.drop_watches()
            await pods.delete(f"pre-{i + 6}")
        await consistent(informer, rec, sb, within=30)

        def met_the_injected_error() -> bool:
            # Which requests fail is random: each dropped watch makes the informer toss the coin again,
            # so this ends after a few reconnects, whatever the first tosses were.
            if str(status) in (informer.health.last_error or ""):
                return True
            sb.drop_watches()
            return False

        await eventually(met_the_injected_error, within=60, interval=0.3, what=f"a request answered {status}")
        sb.set_error_rate(0.0)
        await consistent(informer, rec, sb)
    counters = sb.counters()
    assert counters.get("list pods", 0) + counters.get("watch pods", 0) >= 4


async def test_error_burst_retry_after_is_honoured(sb, api):
    """429 with Retry-After: 0.6 on every watch: the engine waits at least that long between watch attempts,
    even though its own backoff would retry sooner."""
    config = InformerConfig(**{**FAST.__dict__, "backoff_initial_seconds": 0.01, "backoff_max_seconds": 0.02})
    sb.set_error_rate(1.0, status=429, retry_after=0.6, verbs={"watch"})
    async with running_informer(api, config=config) as (informer, rec):
        sb.reset_counters()
        await asyncio.sleep(2.0)  # observe the request rate for a fixed period
        watches = sb.counters().get("watch pods", 0)
        assert 1 <= watches <= 4, f"{watches} watch attempts in 2 s with Retry-After 0.6"
        assert "429" in (informer.health.last_error or "")
        assert informer.health.consecutive_failures >= 1


async def test_short_outage_health_goes_unhealthy_and_back(make_sandbox, tmp_path):
    """The server refuses connections for a few seconds while pods are force-deleted behind the engine's back
    (the history window is short, so it must relist): subscribers are told unhealthy after
    unhealthy_after_seconds, healthy again afterwards, and every deletion reaches them once."""
    sandbox = make_sandbox(history_window=2)
    async with api_client_for(sandbox, tmp_path) as client:
        pods = Pods(client)
        for i in range(5):
            await pods.create(f"p{i}")
        async with running_informer(client) as (informer, rec):
            await eventually(lambda: informer.health.connected)
            sandbox.start_outage()
            sandbox.force_delete_pod(NS, "p0")
            sandbox.force_delete_pod(NS, "p1")
            sandbox.force_delete_pod(NS, "p2")
            await eventually(lambda: not informer.health.healthy, within=FAST.unhealthy_after_seconds + 5)
            health = informer.health
            assert not health.connected and health.consecutive_failures >= 2
            assert (
                health.seconds_since_sync is not None
                and health.seconds_since_sync >= FAST.unhealthy_after_seconds
            )
            assert [h.healthy for h in rec.health].count(False) == 1  # told once, not at every retry
            sandbox.end_outage()
            await consistent(informer, rec, sandbox)
            await eventually(lambda: informer.health.healthy)
            assert rec.health[-1].healthy
            tombstones = sorted(
                e[3]["metadata"]["name"] for e in rec.events if e[0] is EventType.DELETED_UNKNOWN
            )
            assert tombstones == ["p0", "p1", "p2"]
            transitions = [(h.connected, h.healthy) for h in rec.health]
            assert (False, False) in transitions and transitions[-1][1]


@pytest.mark.slow
async def test_sixty_second_outage(make_sandbox, tmp_path):
    """A full minute without the API server, with the production backoff (0.8 s doubling to 30 s)."""
    sandbox = make_sandbox(history_window=1)
    config = InformerConfig(stall_timeout_seconds=5, connect_timeout_seconds=2, unhealthy_after_seconds=20)
    async with api_client_for(sandbox, tmp_path) as client:
        pods = Pods(client)
        for i in range(4):
            await pods.create(f"p{i}")
        async with running_informer(client, config=config) as (informer, rec):
            await eventually(lambda: informer.health.connected)
            loop = asyncio.get_running_loop()
            sandbox.start_outage()
            started = loop.time()
            sandbox.force_delete_pod(NS, "p0")
            await eventually(lambda: not informer.health.healthy, within=config.unhealthy_after_seconds + 5)
            # the outage lasts a minute: the wait is the scenario
            await eventually(lambda: loop.time() - started >= 60, within=65)
            assert not informer.health.healthy and not informer.health.connected
            # every reconnect attempt was refused; the backoff allows at most this many in a minute
            bound = Backoff(
                initial_seconds=config.backoff_initial_seconds,
                max_seconds=config.backoff_max_seconds,
                reset_after_seconds=config.backoff_reset_after_seconds,
            ).max_attempts_within(60, free_first=False)
            assert 3 <= informer.health.consecutive_failures <= bound
            sandbox.end_outage()
            await pods.set_phase("p1", "Succeeded")
            # the longest backoff is 30 s, so the engine is back within ~35 s of the end of the outage
            await consistent(informer, rec, sandbox, within=40)
            assert informer.health.healthy
            assert [e[3]["metadata"]["name"] for e in rec.events if e[0] is EventType.DELETED_UNKNOWN] == [
                "p0"
            ]


async def test_periodic_resync_redelivers_the_store_without_listing(sb, api, pods: Pods):
    """client-go's resync: every stored object is handed to the subscribers again, and the server is asked
    nothing but to resume the watch (a LIST would close the watch first, see test_watcher_resync.py)."""
    from airflow_jobwatch.kube.engine.observer import NoObserver

    class Counted(NoObserver):
        def __init__(self) -> None:
            self.events: list[str] = []

        def on_event(self, event_type: str) -> None:
            self.events.append(event_type)

    config = InformerConfig(**{**FAST.__dict__, "resync_interval_seconds": 0.5})
    await pods.create("a")
    observer = Counted()
    async with running_informer(api, config=config, observer=observer) as (informer, rec):
        await eventually(lambda: rec.types().get(EventType.MODIFIED, 0) >= 3, within=10)
        assert informer.health.relists == 0
        assert sb.counters()["list pods"] == 1
        # a replay is not news from the server: the metrics count (and time) only what the watch delivered
        assert observer.events == ["ADDED"]
        await pods.set_phase("a", "Running")
        await consistent(informer, rec, sb)
        assert informer.by_name(informer.namespace, "a")["status"]["phase"] == "Running"
        assert {etype for etype, *_ in rec.events} == {EventType.ADDED, EventType.MODIFIED}
        assert informer.health.consecutive_failures == 0


async def test_subscriber_errors_do_not_stop_the_engine(sb, api, pods: Pods):
    calls = []

    def broken(event):
        calls.append(event.name)
        raise RuntimeError("subscriber bug")

    async with running_informer(api) as (informer, rec):
        unsubscribe = informer.subscribe(broken, lambda h: 1 / 0)
        await pods.create("x")
        await pods.create("y")
        await consistent(informer, rec, sb)
        assert calls == ["x", "y"]
        unsubscribe()
        await pods.create("z")
        await consistent(informer, rec, sb)
        assert calls == ["x", "y"]


async def test_stop_is_prompt_even_while_backing_off(sb, api):
    sb.set_error_rate(1.0, status=503, verbs={"list"})
    config = InformerConfig(**{**FAST.__dict__, "backoff_initial_seconds": 20, "backoff_max_seconds": 30})
    from airflow_jobwatch.kube.engine.informer import Informer

    informer = Informer(api, kind="pods", namespace=NS, config=config)
    await informer.start()
    assert not await informer.wait_synced(0.5)
    await eventually(lambda: informer.health.consecutive_failures >= 1)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await informer.stop()
    assert loop.time() - t0 < 1.0
    with pytest.raises(RuntimeError, match="stopped"):
        await informer.start()
    assert server_state(sb) == {}
