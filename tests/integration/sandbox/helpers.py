"""Small helpers shared by the sandbox's own tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T], *, timeout: float = 20.0, interval: float = 0.05, what: str = ""
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: T = predicate()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)
        last = predicate()
    return last


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def job_body(name: str, command: str, **spec: Any) -> dict[str, Any]:
    restart = spec.pop("restart_policy", "Never")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            **spec,
            "template": {
                "spec": {
                    "restartPolicy": restart,
                    "terminationGracePeriodSeconds": 2,
                    "containers": [
                        {"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", command]}
                    ],
                }
            },
        },
    }


def pod_body(
    name: str, command: str = "true", *, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "restartPolicy": spec.pop("restart_policy", "Never"),
            "terminationGracePeriodSeconds": spec.pop("grace", 2),
            "containers": spec.pop(
                "containers", [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", command]}]
            ),
            **spec,
        },
    }
