"""``worker_pod_pending_fatal_container_state_reasons`` means what it means upstream.

* unset: the cncf.kubernetes provider's default list (its ``get_provider_info`` config default, read by
  its ``KubeConfig``), not a list of our own;
* set to an empty value: fail-fast is off; a pod whose image cannot be pulled stays Pending and its task
  stays queued (until ``[scheduler] task_queued_timeout``), as upstream.

Driven as the scheduler loop drives the executor, against the sandbox's image-pull fault.
"""

from __future__ import annotations

from typing import Any

import pytest
from exec_helpers import heartbeat_until, submit, terminal
from support.workloads import make_workload

from airflow_jobwatch.compat import PARITY_PROVIDER_VERSION, cncf_kubernetes_version

pytestmark = pytest.mark.timeout(180)

OPTION = "AIRFLOW__KUBERNETES_EXECUTOR__WORKER_POD_PENDING_FATAL_CONTAINER_STATE_REASONS"


def _waiting_reason(sandbox: Any, task_id: str) -> str | None:
    for pod in sandbox.objects("pods", "default"):
        if pod["metadata"]["annotations"].get("task_id") == task_id:
            for cs in pod.get("status", {}).get("containerStatuses") or []:
                return (cs.get("state", {}).get("waiting") or {}).get("reason")
    return None


@pytest.mark.skipif(
    cncf_kubernetes_version() < PARITY_PROVIDER_VERSION,
    reason="upstream's default list is 10.25's (Airflow 3.3's)",
)
def test_unset_option_is_upstreams_default_list(
    executor_factory: Any, kube_sandbox: Any, monkeypatch
) -> None:
    from airflow.providers.cncf.kubernetes.kube_config import KubeConfig

    monkeypatch.delenv(OPTION, raising=False)
    sandbox, _ = kube_sandbox
    ex = executor_factory()
    upstream = set(KubeConfig().worker_pod_pending_fatal_container_state_reasons)
    assert upstream == {
        "CreateContainerConfigError",
        "ErrImagePull",
        "CreateContainerError",
        "ImageInspectError",
        "InvalidImageName",
    }
    assert ex.fatal_waiting_reasons == upstream
    assert ex.supervisor._fatal_waiting_reasons == upstream  # what the watcher child classifies with
    # ErrImagePull is in upstream's list: the task fails while its pod is still Pending. (ImagePullBackOff is
    # not: a real kubelet shows ErrImagePull again at each pull retry; the sandbox's shows it once, for 1 s,
    # so the watch must be running before the pod is created.)
    heartbeat_until(ex, lambda _: ex.supervisor.all_synced(), timeout=60)
    sandbox.set_image_pull_failure(r"^no-such-registry\.example/")
    submit(ex, make_workload(task_id="unpullable", command="exit 0", image="no-such-registry.example/x:1"))
    events = heartbeat_until(ex, lambda e: "unpullable" in terminal(e), timeout=60)
    state, info = terminal(events)["unpullable"]
    assert state == "failed" and "ErrImagePull" in info


def test_empty_option_turns_fail_fast_off(executor_factory: Any, kube_sandbox: Any) -> None:
    sandbox, _ = kube_sandbox
    ex = executor_factory(**{OPTION: ""})
    assert ex.fatal_waiting_reasons == frozenset()
    sandbox.set_image_pull_failure(r"^no-such-registry\.example/")
    submit(ex, make_workload(task_id="unpullable", command="exit 0", image="no-such-registry.example/x:1"))
    events: dict[Any, Any] = {}
    # The pod goes through ErrImagePull to ImagePullBackOff ...
    heartbeat_until(
        ex, lambda e: _waiting_reason(sandbox, "unpullable") == "ImagePullBackOff", timeout=60, events=events
    )
    # ... and a task launched after that ends: the watcher has delivered every earlier change of the stuck
    # pod by then (one watch, in resourceVersion order), so anything it would have reported is in.
    submit(ex, make_workload(task_id="marker", command="exit 0"))
    heartbeat_until(ex, lambda e: "marker" in terminal(e), timeout=60, events=events)
    assert "unpullable" not in terminal(events), "fail-fast is off: the pod stays Pending, the task queued"
    assert _waiting_reason(sandbox, "unpullable") == "ImagePullBackOff"
    assert len(ex.running) == 1  # its slot is held, as upstream holds it
