"""``airflow jobwatch status``: how the running executor's watcher and the triggerer's shared watches are
doing, from the status files they write. Exits non-zero when unhealthy, so it can be a liveness probe."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Exit codes.
HEALTHY, UNHEALTHY, NOT_CONFIGURED = 0, 1, 2


@dataclass
class Verdict:
    """What one status file says."""

    component: str
    path: str
    problems: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return not self.problems


def _read(component: str, path: str) -> tuple[Verdict, dict[str, Any] | None]:
    verdict = Verdict(component, path)
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        verdict.problems.append(
            f"{path} does not exist (is the {component} running with this configuration?)"
        )
        return verdict, None
    except (OSError, ValueError) as err:
        verdict.problems.append(f"cannot read {path}: {err}")
        return verdict, None
    if not isinstance(data, dict):
        verdict.problems.append(f"{path} does not hold a JSON object")
        return verdict, None
    return verdict, data


def _age(data: dict[str, Any], now: float) -> float | None:
    updated = data.get("updated_at")
    return round(now - float(updated), 1) if isinstance(updated, int | float) else None


def _pid_alive(pid: Any) -> bool | None:
    """Whether the writer's process exists (None: cannot tell, e.g. another host's pid namespace)."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def executor_verdict(path: str, *, max_age: float, now: float | None = None) -> Verdict:
    """Healthy when the file was rewritten within ``max_age`` seconds (the executor rewrites it every
    scheduler loop, at most once a second) and its watcher reaches the Kubernetes API."""
    now = time.time() if now is None else now
    verdict, data = _read("executor", path)
    if data is None:
        return verdict
    age = _age(data, now)
    verdict.summary = {
        "scheduler_job_id": data.get("scheduler_job_id"),
        "updated_seconds_ago": age,
        "watcher_healthy": data.get("watcher_healthy"),
        "watcher_last_error": data.get("watcher_last_error"),
        "tracked_pods": data.get("tracked_pods", data.get("running")),
        "pending_creation": data.get("pending_creation"),
        "seconds_since_last_event": data.get("seconds_since_last_event"),
        "relists": data.get("relists"),
        "watcher_restarts": data.get("watcher_restarts"),
        "watchers": data.get("watchers"),
    }
    if age is None or age > max_age:
        verdict.problems.append(
            f"not updated for {age} s (more than {max_age:g} s): the scheduler loop is stuck or gone"
        )
    if not data.get("watcher_healthy"):
        verdict.problems.append(
            f"the watcher cannot reach the Kubernetes API: {data.get('watcher_last_error')}"
        )
    return verdict


def triggerer_verdict(path: str, *, max_age: float, now: float | None = None) -> Verdict:
    """Healthy when every shared watch's informers are healthy and, while watches are open, the file was
    rewritten recently (every 10 s) by a process that still exists."""
    now = time.time() if now is None else now
    verdict, data = _read("triggerer", path)
    if data is None:
        return verdict
    age = _age(data, now)
    informers = data.get("informers") or []
    verdict.summary = {
        "updated_seconds_ago": age,
        "shared_watches": data.get("shared_watches"),
        "triggers_per_watch": data.get("triggers_per_watch"),
        "informers": informers,
    }
    for informer in informers:
        if not informer.get("healthy", False):
            verdict.problems.append(
                f"the {informer.get('kind')} watch of namespace {informer.get('namespace')} is unhealthy"
            )
    if data.get("shared_watches"):
        limit = max(max_age, 3 * float(data.get("write_interval_seconds") or 10))
        if age is None or age > limit:
            verdict.problems.append(f"not updated for {age} s while watches are open (more than {limit:g} s)")
        if _pid_alive(data.get("pid")) is False:
            verdict.problems.append(f"the process that wrote it (pid {data.get('pid')}) is gone")
    return verdict


def render(verdicts: list[Verdict]) -> str:
    lines = []
    for v in verdicts:
        lines.append(f"{v.component}: {'healthy' if v.healthy else 'UNHEALTHY'} ({v.path})")
        for problem in v.problems:
            lines.append(f"  problem: {problem}")
        for key, value in v.summary.items():
            if key == "informers":
                for i in value:
                    lines.append(
                        f"  watch {i.get('kind')}/{i.get('namespace')}: healthy={i.get('healthy')} "
                        f"last event {i.get('seconds_since_last_event')} s ago, lists={i.get('lists', 0)} "
                        f"relists={i.get('relists', 0)} 410s={i.get('expired', 0)} "
                        f"restarts={i.get('watch_restarts', 0)} stalls={i.get('stalls', 0)}"
                    )
            else:
                lines.append(f"  {key}: {json.dumps(value) if isinstance(value, dict | list) else value}")
    return "\n".join(lines)
