"""Server-side printing (``meta.k8s.io/v1`` Table) of pods and jobs, for ``kubectl get``.

kubectl asks for ``application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the server's columns;
without it, it can only show NAME and AGE. The columns and cell texts follow the real printers
(pkg/printers/internalversion) for the fields the sandbox fills.
"""

from __future__ import annotations

import calendar
import time
from typing import Any

_NAME = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}
_AGE = {
    "name": "Age",
    "type": "string",
    "format": "",
    "description": "CreationTimestamp is a timestamp representing the server time when this object was created.",
    "priority": 0,
}


def wants_table(accept: str) -> bool:
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def _age(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        seconds = int(time.time() - calendar.timegm(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return "<unknown>"
    seconds = max(0, seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 48 * 3600:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _pod_status(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            return str(state["waiting"]["reason"])
        if state.get("terminated", {}).get("reason") and reason not in ("Succeeded", "Failed"):
            return str(state["terminated"]["reason"])
    if reason == "Succeeded":
        return "Completed"
    if reason == "Failed":
        terminated = [cs.get("state", {}).get("terminated") for cs in status.get("containerStatuses") or []]
        return next((str(t["reason"]) for t in terminated if t and t.get("reason")), "Error")
    return str(reason)


def _pod_row(pod: dict[str, Any]) -> list[Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for cs in statuses if cs.get("ready"))
    restarts = sum(int(cs.get("restartCount", 0)) for cs in statuses)
    return [
        pod["metadata"]["name"],
        f"{ready}/{total}",
        _pod_status(pod),
        restarts,
        _age(pod["metadata"].get("creationTimestamp")),
        (pod.get("status") or {}).get("podIP") or "<none>",
        (pod.get("spec") or {}).get("nodeName") or "<none>",
    ]


def _job_status(job: dict[str, Any]) -> str:
    conds = {
        c.get("type"): c
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }
    for key, text in (
        ("Complete", "Complete"),
        ("Failed", "Failed"),
        ("FailureTarget", "FailureTarget"),
        ("SuccessCriteriaMet", "SuccessCriteriaMet"),
        ("Suspended", "Suspended"),
    ):
        if key in conds:
            return text
    return "Terminating" if job["metadata"].get("deletionTimestamp") else "Running"


def _job_row(job: dict[str, Any]) -> list[Any]:
    status = job.get("status") or {}
    completions = (job.get("spec") or {}).get("completions")
    succeeded = status.get("succeeded", 0)
    done = (
        f"{succeeded}/{completions}"
        if completions is not None
        else f"{succeeded}/1 of {job['spec'].get('parallelism', 1)}"
    )
    start = status.get("startTime")
    end = status.get("completionTime")
    duration = ""
    if start:
        try:
            t0 = calendar.timegm(time.strptime(start, "%Y-%m-%dT%H:%M:%SZ"))
            t1 = calendar.timegm(time.strptime(end, "%Y-%m-%dT%H:%M:%SZ")) if end else time.time()
            duration = f"{max(0, int(t1 - t0))}s"
        except ValueError:
            duration = ""
    return [
        job["metadata"]["name"],
        _job_status(job),
        done,
        duration,
        _age(job["metadata"].get("creationTimestamp")),
    ]


COLUMNS: dict[str, list[dict[str, Any]]] = {
    "pods": [
        _NAME,
        {
            "name": "Ready",
            "type": "string",
            "format": "",
            "description": "The aggregate readiness state of this pod for accepting traffic.",
            "priority": 0,
        },
        {
            "name": "Status",
            "type": "string",
            "format": "",
            "description": "The aggregate status of the containers in this pod.",
            "priority": 0,
        },
        {
            "name": "Restarts",
            "type": "string",
            "format": "",
            "description": "The number of times the containers in this pod have been restarted.",
            "priority": 0,
        },
        _AGE,
        {
            "name": "IP",
            "type": "string",
            "format": "",
            "description": "IP address allocated to the pod.",
            "priority": 1,
        },
        {
            "name": "Node",
            "type": "string",
            "format": "",
            "description": "Name of the Node this pod runs on.",
            "priority": 1,
        },
    ],
    "jobs": [
        _NAME,
        {
            "name": "Status",
            "type": "string",
            "format": "",
            "description": "Status of the job.",
            "priority": 0,
        },
        {
            "name": "Completions",
            "type": "string",
            "format": "",
            "description": "The desired number of successfully finished pods the job should be run with.",
            "priority": 0,
        },
        {
            "name": "Duration",
            "type": "string",
            "format": "",
            "description": "Time required to complete the job.",
            "priority": 0,
        },
        _AGE,
    ],
    "events": [
        {
            "name": "Last Seen",
            "type": "string",
            "format": "",
            "description": "Time since the event was last seen.",
            "priority": 0,
        },
        {
            "name": "Type",
            "type": "string",
            "format": "",
            "description": "Type of this event (Normal, Warning).",
            "priority": 0,
        },
        {
            "name": "Reason",
            "type": "string",
            "format": "",
            "description": "Why the action was taken.",
            "priority": 0,
        },
        {
            "name": "Object",
            "type": "string",
            "format": "",
            "description": "The object this event is about.",
            "priority": 0,
        },
        {
            "name": "Message",
            "type": "string",
            "format": "",
            "description": "A human-readable description.",
            "priority": 0,
        },
    ],
    "namespaces": [
        _NAME,
        {
            "name": "Status",
            "type": "string",
            "format": "",
            "description": "The status of the namespace",
            "priority": 0,
        },
        _AGE,
    ],
}


def _event_row(event: dict[str, Any]) -> list[Any]:
    involved = event.get("involvedObject") or {}
    last = event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp")
    return [
        _age(last if isinstance(last, str) else None),
        event.get("type", ""),
        event.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        event.get("message", ""),
    ]


def _row(resource: str, obj: dict[str, Any]) -> list[Any]:
    if resource == "events":
        return _event_row(obj)
    if resource == "pods":
        return _pod_row(obj)
    if resource == "jobs":
        return _job_row(obj)
    return [
        obj["metadata"]["name"],
        (obj.get("status") or {}).get("phase", "Active"),
        _age(obj["metadata"].get("creationTimestamp")),
    ]


def table(
    resource: str, objects: list[dict[str, Any]], resource_version: str, continue_token: str | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": COLUMNS[resource],
        "rows": [
            {
                "cells": _row(resource, obj),
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj["metadata"],
                },
            }
            for obj in objects
        ],
    }
