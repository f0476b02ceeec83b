"""core/v1 Events written by the sandbox kubelet and Job controller, as a real cluster records them.

Clients read them to explain failures (``kubectl describe``, KubernetesPodOperator logs the pod's
events when it fails). Names, reasons, messages and sources follow the real components; repeated
events are not aggregated into ``count`` (each occurrence is its own Event).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from .errors import ApiError
from .store import now_rfc3339

log = logging.getLogger(__name__)

KINDS = {"pods": ("v1", "Pod"), "jobs": ("batch/v1", "Job")}
_last_stamp = 0


def _next_stamp() -> int:
    """Strictly increasing nanosecond timestamps (two events in one nanosecond stay distinct)."""
    global _last_stamp
    _last_stamp = max(time.time_ns(), _last_stamp + 1)
    return _last_stamp


def record(
    sandbox: Any,
    resource: str,
    obj: dict[str, Any],
    reason: str,
    message: str,
    *,
    type_: str = "Normal",
    component: str = "kubelet",
    field_path: str | None = None,
) -> None:
    """Create one Event about ``obj`` (a pod or a Job). Never raises: an event is best effort."""
    meta = obj["metadata"]
    namespace = meta.get("namespace", "")
    api_version, kind = KINDS[resource]
    involved: dict[str, Any] = {
        "kind": kind,
        "namespace": namespace,
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "apiVersion": api_version,
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    if field_path:
        involved["fieldPath"] = field_path
    now = now_rfc3339()
    host = "sandbox-node" if component == "kubelet" else ""
    source: dict[str, Any] = {"component": component}
    if host:
        source["host"] = host
    body = {
        # Like the real recorder: <object>.<hex nanoseconds>, so names sort in time order.
        "metadata": {"name": f"{meta['name']}.{_next_stamp():x}", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "source": source,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "type": type_,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": host,
    }
    try:
        sandbox.api.create("events", namespace, body)
    except ApiError as err:  # e.g. the namespace is being deleted
        log.debug(
            "sandbox: event %s for %s/%s not recorded: %s", reason, namespace, meta["name"], err.message
        )
