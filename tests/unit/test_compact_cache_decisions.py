"""A trigger decides from the triggerer's compact cache exactly as from whole objects.

The shared namespace watch stores each Job and pod projected and packed (compact JSON, deflated, decoded on
every read), its pod index holds uids, and a deleted Job's tombstone keeps only what a decision reads.
For any generated Job and pods (realistic values and garbage, as the states property tests make them),
delivered through real (unstarted) informers in the registry's store form and in a whole-object form,
the trigger's payload is the same, the event's ``job`` included whenever a trigger waited for the Job
before it was stored (the registry keeps such a Job whole).
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st
from test_states_properties import SETTINGS, jobs, pod_lists

from airflow_jobwatch.kube.engine.informer import EventType, Informer, InformerConfig
from airflow_jobwatch.triggers.job import JobTrigger
from airflow_jobwatch.triggers.registry import NamespaceWatch, WatchKey

UID = "job-uid"
#: The registry's store form (projected, packed) and the reference (whole dicts, as listed).
COMPACT = InformerConfig(compact_store=True)
WHOLE = InformerConfig(compact_store=False, projection=False)


async def _no_client() -> Any:
    raise AssertionError("not used: the informers are not started")


def _api_json(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as an API server sends it: JSON (no NaN or infinity, which JSON cannot carry)."""

    def finite(value: Any) -> bool:
        if isinstance(value, float):
            return math.isfinite(value)
        if isinstance(value, dict):
            return all(finite(v) for v in value.values())
        if isinstance(value, list):
            return all(finite(v) for v in value)
        return True

    assume(finite(obj))
    result: dict[str, Any] = json.loads(json.dumps(obj))
    return result


def _job(generated: dict[str, Any]) -> dict[str, Any]:
    job = _api_json(generated)
    metadata = job.get("metadata") if isinstance(job.get("metadata"), dict) else {}
    job["metadata"] = {**metadata, "name": "j", "namespace": "ns", "uid": UID, "resourceVersion": "10"}
    job.setdefault("spec", {})
    if isinstance(job["spec"], dict):  # what the registry keeps whole and drops when projecting
        job["spec"]["template"] = {"spec": {"containers": [{"name": "base", "image": "busybox"}]}}
    return job


def _pod(generated: dict[str, Any], i: int) -> dict[str, Any]:
    pod = _api_json(generated)
    metadata = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    pod["metadata"] = {
        **metadata,
        "name": f"j-{i}",
        "namespace": "ns",
        "uid": f"pod-{i}",
        "resourceVersion": str(i + 1),
        "labels": {"controller-uid": UID, "batch.kubernetes.io/job-name": "j", "app": "x" * 40},
        "annotations": {"airflow": "y" * 200},
    }
    return pod


def _watch(config: InformerConfig) -> NamespaceWatch:
    """A namespace watch over two unstarted informers with ``config``'s store form, as ``_start`` wires
    them (the Jobs its triggers wait for kept whole), marked synced."""
    watch = NamespaceWatch(WatchKey("c", "ns"), _no_client, config=config)
    watch.jobs = Informer(object(), kind="jobs", namespace="ns", config=config)
    watch.pods = Informer(object(), kind="pods", namespace="ns", config=config)
    watch.jobs.keep_whole = watch._has_listeners
    watch.jobs.subscribe(watch._on_job_event)
    watch.pods.subscribe(watch._on_pod_event)
    for informer in (watch.jobs, watch.pods):
        informer._health.synced = True
    return watch


def _deliver(informer: Informer, etype: EventType, obj: dict[str, Any]) -> None:
    """What a watch event does to an informer: prepare (strip, project), store or remove, fan out."""
    prepared = informer._prepare(copy.deepcopy(obj))
    if etype is EventType.DELETED:
        informer.cache.delete(prepared["metadata"]["uid"], etype, prepared)
    else:
        informer.cache.put(prepared)


def _decide(
    config: InformerConfig, job: dict[str, Any], pods: list[dict[str, Any]], *, listened: bool, deleted: bool
) -> Any:
    async def run() -> Any:
        watch = _watch(config)
        trigger = JobTrigger("j", "ns", job_uid=UID, do_xcom_push=True)
        if listened:  # a trigger waits for the Job before the watch delivers it
            watch.listen("j", lambda: None, job_uid=UID)
        assert watch.pods is not None and watch.jobs is not None
        for pod in pods:
            _deliver(watch.pods, EventType.ADDED, pod)
        _deliver(watch.jobs, EventType.ADDED, job)
        if deleted:
            _deliver(watch.jobs, EventType.DELETED, job)
        try:
            return trigger._decisions().decide(watch)
        except Exception as e:  # garbage the trigger cannot read: it must fail alike from either cache
            return f"raised {type(e).__name__}: {e}"
        finally:
            trigger.notes.close()

    return asyncio.run(run())


@SETTINGS
@given(jobs, pod_lists, st.booleans(), st.booleans())
def test_a_trigger_decides_from_the_compact_cache_as_from_whole_objects(
    job: dict[str, Any], job_pods: list[dict[str, Any]] | None, listened: bool, deleted: bool
) -> None:
    whole_job = _job(job)
    pods = [_pod(p, i) for i, p in enumerate(job_pods or [])]
    compact = _decide(COMPACT, whole_job, pods, listened=listened, deleted=deleted)
    reference = _decide(WHOLE, whole_job, pods, listened=listened, deleted=deleted)
    if not isinstance(reference, dict):  # still waiting (None), or raised: the compact cache alike
        assert compact == reference
        return
    assert isinstance(compact, dict)
    if listened:
        assert compact == reference  # the Job a trigger waits for is kept whole: the event's job too
    else:
        assert {k: v for k, v in compact.items() if k != "job"} == {
            k: v for k, v in reference.items() if k != "job"
        }
