"""Helpers for the watch-engine tests: a kubernetes_asyncio client for a sandbox, a recording subscriber, and the two invariants every scenario must end with:

1. the informer's store equals the server's objects (by uid and resourceVersion);
2. subscribers saw each object's final state exactly once per uid: the last event of every live object carries
   its current resourceVersion, every vanished object got exactly one deletion (DELETED or DELETED_UNKNOWN, never
   both, never twice) as its last event, and no event follows a deletion.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes_asyncio.client as k8s
import kubernetes_asyncio.config as k8s_config

from airflow_jobwatch.kube.engine.informer import (
    EventType,
    Informer,
    InformerConfig,
    InformerEvent,
    InformerHealth,
)
from airflow_jobwatch_testing.sandbox import SandboxThread

NS = "default"

# Everything small so reconnects, stalls, backoffs and health changes happen within a test's seconds.
FAST = InformerConfig(
    watch_timeout_seconds=5,
    stall_timeout_seconds=1.0,
    connect_timeout_seconds=1.0,
    backoff_initial_seconds=0.05,
    backoff_max_seconds=0.4,
    backoff_reset_after_seconds=5,
    unhealthy_after_seconds=1.0,
    page_size=7,  # several pages even for a handful of pods
)

# The sandbox options of the informer tests: no kubelet or Job controller, so every change to a pod is one
# the test makes (deterministic), bookmarks often so resourceVersions stay fresh.
SANDBOX_DEFAULTS: dict[str, Any] = {"kubelet": False, "job_controller": False, "bookmark_interval": 0.5}


@contextlib.asynccontextmanager
async def api_client_for(sandbox: SandboxThread, tmp_path: Path) -> AsyncIterator[k8s.ApiClient]:
    path = sandbox.write_kubeconfig(str(tmp_path / f"kubeconfig-{sandbox.port}"))
    client = await k8s_config.new_client_from_config(config_file=path)
    try:
        yield client
    finally:
        await client.close()


@dataclass
class Recorder:
    """A subscriber that keeps every event and health report."""

    events: list[tuple[EventType, str, str, dict[str, Any]]] = field(default_factory=list)
    health: list[InformerHealth] = field(default_factory=list)

    def on_event(self, event: InformerEvent) -> None:
        self.events.append(
            (event.type, event.uid, event.obj["metadata"].get("resourceVersion", ""), event.obj)
        )

    def on_health(self, health: InformerHealth) -> None:
        self.health.append(health)

    def types(self) -> collections.Counter[EventType]:
        return collections.Counter(t for t, *_ in self.events)


@contextlib.asynccontextmanager
async def running_informer(
    client: k8s.ApiClient, *, config: InformerConfig = FAST, sync_timeout: float = 10, **kwargs: Any
) -> AsyncIterator[tuple[Informer, Recorder]]:
    """An informer with a Recorder subscribed, started and synced; stopped (and checked stopped) after."""
    kwargs.setdefault("kind", "pods")
    kwargs.setdefault("namespace", NS)
    informer = Informer(client, config=config, **kwargs)
    recorder = Recorder()
    informer.subscribe(recorder.on_event, recorder.on_health)
    await informer.start()
    try:
        assert await informer.wait_synced(sync_timeout), f"informer not synced within {sync_timeout} s"
        yield informer, recorder
    finally:
        await informer.stop()
    leftover = [t for t in asyncio.all_tasks() if t.get_name().startswith("informer ") and not t.done()]
    assert not leftover, f"informer tasks left running after stop(): {leftover}"
    assert not informer.health.connected


def server_state(sandbox: SandboxThread, kind: str = "pods", namespace: str | None = NS, **match_labels: str):
    return {
        o["metadata"]["uid"]: o["metadata"]["resourceVersion"]
        for o in sandbox.objects(kind, namespace)
        if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in match_labels.items())
    }


def check_invariants(informer: Informer, recorder: Recorder, server: dict[str, str]) -> None:
    """Raise AssertionError unless the store equals the server and subscribers saw every final state once."""
    store = {o["metadata"]["uid"]: o["metadata"]["resourceVersion"] for o in informer.items()}
    assert store == server, "informer store differs from the server"
    last: dict[str, tuple[EventType, str]] = {}
    deletions: collections.Counter[str] = collections.Counter()
    for etype, uid, rv, _ in recorder.events:
        assert deletions[uid] == 0, f"event {etype.name} rv={rv} for uid {uid} after its deletion"
        if etype in (EventType.DELETED, EventType.DELETED_UNKNOWN):
            deletions[uid] += 1
        last[uid] = (etype, rv)
    for uid, rv in server.items():
        assert uid in last, f"live object {uid} never reached subscribers"
        assert last[uid] == (last[uid][0], rv) and last[uid][0] in (EventType.ADDED, EventType.MODIFIED), (
            f"last event of live object {uid} is {last[uid]}, server has rv {rv}"
        )
    for uid in set(last) - set(server):
        assert deletions[uid] == 1, f"vanished object {uid} deleted {deletions[uid]} times"


async def eventually(
    check: Callable[[], Any], *, within: float = 15, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll ``check`` until it returns something other than False without raising AssertionError; at the
    deadline re-raise its last AssertionError (or fail naming ``what``)."""
    deadline = time.monotonic() + within
    while True:
        try:
            result = check()
            if isinstance(result, Awaitable):
                result = await result
            if result is not False:
                return result
            if time.monotonic() >= deadline:
                raise AssertionError(f"not true within {within} s: {what or check}")
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
        await asyncio.sleep(interval)


async def consistent(
    informer: Informer, recorder: Recorder, sandbox: SandboxThread, *, within: float = 15, **labels: str
) -> None:
    """Wait until check_invariants holds against the server's current objects (with these labels)."""
    await eventually(
        lambda: check_invariants(informer, recorder, server_state(sandbox, **labels)), within=within
    )


def pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "informer-test", **labels}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
        },
    }


class Pods:
    """Create / change status / delete pods through the real kubernetes_asyncio client."""

    def __init__(self, client: k8s.ApiClient, namespace: str = NS) -> None:
        self.core = k8s.CoreV1Api(client)
        self.ns = namespace

    async def create(self, name: str, **labels: str) -> None:
        await self.core.create_namespaced_pod(self.ns, pod(name, **labels))

    async def set_phase(self, name: str, phase: str) -> None:
        await self.core.patch_namespaced_pod_status(name, self.ns, {"status": {"phase": phase}})

    async def delete(self, name: str) -> None:
        await self.core.delete_namespaced_pod(name, self.ns, grace_period_seconds=0)
