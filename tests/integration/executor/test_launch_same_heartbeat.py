"""A task whose pod shape is already made has its create sent by the heartbeat that starts it.

Only a full build (the first tasks of a shape) runs in the API threads and has its create sent from a
later heartbeat; a launch that waited a heartbeat for every build would halve the launch rate of a burst.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from exec_helpers import heartbeat_until, pods_of, submit, terminal
from support.workloads import make_workload

pytestmark = pytest.mark.timeout(180)


def test_a_known_shape_is_created_without_another_heartbeat(executor_factory: Any, kube_sandbox: Any) -> None:
    sandbox, _ = kube_sandbox
    ex = executor_factory()
    # The first task of a shape is built in full, the second makes the shape (both in the API threads).
    events: dict[Any, Any] = {}
    for task_id in ("first", "second"):
        submit(ex, make_workload(task_id=task_id, command="exit 0"))
        heartbeat_until(ex, lambda e, t=task_id: t in terminal(e), timeout=90, events=events)
    submit(ex, make_workload(task_id="third", command="exit 0"))
    ex.heartbeat()
    deadline = time.monotonic() + 20
    while not pods_of(sandbox, "third"):
        assert time.monotonic() < deadline, "the third task's create waited for another heartbeat"
        time.sleep(0.05)
    heartbeat_until(ex, lambda e: "third" in terminal(e), timeout=90, events=events)
    assert terminal(events)["third"][0] == "success"
