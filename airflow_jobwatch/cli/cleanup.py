"""``airflow jobwatch cleanup-pods``: upstream's ``airflow kubernetes cleanup-pods`` rules, for the worker
pods of JobWatchExecutor (and KubernetesExecutor, whose pods carry the same labels)."""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from airflow_jobwatch.kube.meaning.pod_states import completion_time, parse_time

#: Worker pods: the labels JobWatchExecutor (like KubernetesExecutor) puts on every pod it creates, with
#: ``[jobwatch] worker_pod_labels = upstream`` (the default); ``jobwatch_executor`` replaces
#: ``kubernetes_executor`` with ``worker_pod_labels = jobwatch``. Upstream's command also matches
#: KubernetesPodOperator pods (no executor label); this one touches executor worker pods only.
WORKER_POD_SELECTOR = "kubernetes_executor=True,dag_id,task_id,try_number"


def worker_pod_selector(executor_label: str = "kubernetes_executor") -> str:
    return f"{executor_label}=True,dag_id,task_id,try_number"


#: Upstream's floor: a pod pending for less than this is never deleted (it may just be scheduling).
MIN_PENDING_MINUTES_FLOOR = 5
PAGE_SIZE = 500


def verdict(
    pod: dict[str, Any], *, now: datetime.datetime, min_pending_minutes: int, min_completed_minutes: int
) -> str | None:
    """Why ``pod`` is to be deleted (``"completed"`` or ``"pending too long"``), or None to keep it.

    Upstream's rules: a pod is done when it Succeeded, Failed with ``restartPolicy: Never``, or was
    Evicted, and is deleted once it has been done for ``min_completed_minutes`` (0: at once); a Pending pod
    is deleted once it was created more than ``max(5, min_pending_minutes)`` minutes ago.
    """
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "").lower()
    reason = str(status.get("reason") or "").lower()
    restart_policy = str((pod.get("spec") or {}).get("restartPolicy") or "").lower()
    terminal = (
        phase == "succeeded" or (phase == "failed" and restart_policy == "never") or reason == "evicted"
    )
    if terminal:
        done_at = completion_time(pod)
        if min_completed_minutes == 0 or (
            done_at is not None and now - done_at > datetime.timedelta(minutes=min_completed_minutes)
        ):
            return "completed"
        return None
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    pending_floor = max(MIN_PENDING_MINUTES_FLOOR, min_pending_minutes)
    if (
        phase == "pending"
        and created is not None
        and now - created > datetime.timedelta(minutes=pending_floor)
    ):
        return "pending too long"
    return None


def _pages(core_v1: Any, namespace: str, selector: str) -> Iterator[dict[str, Any]]:
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"label_selector": selector, "limit": PAGE_SIZE}
        if token:
            kwargs["_continue"] = token
        page = json.loads(
            core_v1.list_namespaced_pod(
                namespace, _preload_content=False, _request_timeout=(10, 60), **kwargs
            ).data
        )
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


def cleanup_pods(
    core_v1: Any,
    namespace: str,
    *,
    min_pending_minutes: int,
    min_completed_minutes: int,
    dry_run: bool = False,
    verbose: bool = False,
    out: Callable[[str], None] = print,
    now: datetime.datetime | None = None,
    executor_label: str = "kubernetes_executor",
) -> tuple[list[str], list[str]]:
    """Delete the worker pods in ``namespace`` that upstream's ``cleanup-pods`` would delete.

    Returns ``(deleted, failed)`` pod names. A failed delete is reported with the server's status and
    message and the others go on; a pod already gone (404) counts as deleted.
    """
    from kubernetes.client.exceptions import ApiException

    now = now or datetime.datetime.now(datetime.UTC)
    deleted: list[str] = []
    failed: list[str] = []
    selector = worker_pod_selector(executor_label)
    if verbose:
        out(f"Listing worker pods in namespace {namespace} ({selector})")
    for pod in _pages(core_v1, namespace, selector):
        meta = pod.get("metadata") or {}
        name = meta.get("name", "")
        why = verdict(
            pod, now=now, min_pending_minutes=min_pending_minutes, min_completed_minutes=min_completed_minutes
        )
        status = pod.get("status") or {}
        if why is None:
            if verbose:
                out(f"No action taken on pod {name}")
            continue
        out(
            f'{"Would delete" if dry_run else "Deleting"} pod "{name}" ({why}): phase '
            f'"{str(status.get("phase") or "").lower()}", reason "{str(status.get("reason") or "").lower()}", '
            f'restart policy "{str((pod.get("spec") or {}).get("restartPolicy") or "").lower()}"'
        )
        if dry_run:
            deleted.append(name)
            continue
        try:
            core_v1.delete_namespaced_pod(name, namespace, _request_timeout=(10, 60))
            deleted.append(name)
        except ApiException as err:
            if err.status == 404:
                deleted.append(name)
                continue
            try:
                message = json.loads(err.body).get("message", "")
            except (TypeError, ValueError, AttributeError):
                message = str(err.body or "")
            print(
                f"Can't remove pod {namespace}/{name}: {err.status} {err.reason}: {message}", file=sys.stderr
            )
            failed.append(name)
    return deleted, failed
