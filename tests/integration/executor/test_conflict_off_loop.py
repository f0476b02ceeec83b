"""A 409 on a pod create is looked into off the scheduler loop.

A 409 AlreadyExists makes the executor read the existing pod (is it ours, from an attempt whose answer
was lost, or someone else's?) and perhaps relabel it. Those calls used to run inside ``sync()``: an API
server slow to answer that GET held the whole scheduler loop for up to the request timeout. Here a
proxy holds every GET of a single pod; the loop must go on (another task is launched and reported)
while the 409's GET waits, and the task resolves once the GET is answered (here: failed, as the pod
under its name belongs to no launch of it).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from exec_helpers import heartbeat_until, submit, terminal
from faultproxy import FaultProxy, write_proxy_kubeconfig
from support.workloads import make_workload

pytestmark = pytest.mark.timeout(240)

POD_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$")


@pytest.fixture
def proxy(kube_sandbox: Any, tmp_path: Path) -> Any:
    sandbox, _ = kube_sandbox
    with FaultProxy(sandbox.url) as p:
        p.kubeconfig = write_proxy_kubeconfig(str(tmp_path / "proxy-kubeconfig"), p, sandbox.token)
        yield p


def test_409_get_does_not_hold_the_scheduler_loop(
    proxy: Any, executor_factory: Any, kube_sandbox: Any, core_v1: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_jobwatch.executors import base, launching

    sandbox, _ = kube_sandbox
    # A long read timeout: a GET on the scheduler loop would hold it for 120 s, past this test's deadline.
    monkeypatch.setattr(base, "API_REQUEST_TIMEOUT", (10.0, 120.0))
    taken = "squatted-name-1234"
    core_v1.create_namespaced_pod(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": taken, "labels": {"app": "unrelated"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 120"]}],
            },
        },
    )
    real_pod_name = launching.launch_pod_name
    names: list[str] = []

    def first_name_taken(key: Any, launch_id: str, pod_index: int = 0) -> str:
        name = taken if not names else real_pod_name(key, launch_id, pod_index)
        names.append(name)
        return name

    monkeypatch.setattr(launching, "launch_pod_name", first_name_taken)
    ex = executor_factory(kubeconfig=proxy.kubeconfig)
    held: list[str] = []

    def rule(method: str, path: str, query: str) -> str:
        if method == "GET" and POD_PATH.match(path):
            held.append(path)
            return "hold"
        return "pass"

    proxy.rule = rule
    submit(ex, make_workload(task_id="unlucky", command="exit 0"))
    events: dict[Any, Any] = {}
    heartbeat_until(ex, lambda _: bool(held), timeout=60, events=events)  # the 409's GET is out, and held
    submit(ex, make_workload(task_id="meanwhile", command="exit 0"))
    heartbeat_until(ex, lambda e: "meanwhile" in terminal(e), timeout=60, events=events)
    assert terminal(events)["meanwhile"][0] == "success"
    assert "unlucky" not in terminal(events), "resolved before the GET was answered"
    proxy.release()
    heartbeat_until(ex, lambda e: "unlucky" in terminal(e), timeout=60, events=events)
    state, info = terminal(events)["unlucky"]
    assert state == "failed" and taken in info, info  # not this launch's pod: a clear error
    assert [n for n in names if "unlucky" in n or n == taken] == [taken], names  # fixed by its launch
    squatter = sandbox.get_object("pods", "default", taken)
    assert squatter is not None and squatter["metadata"]["labels"] == {"app": "unrelated"}
