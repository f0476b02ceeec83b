"""JobWatchExecutor under RBAC: the scheduler's Role from docs/deploying.md, and that Role minus one rule.

The sandbox runs in RBAC mode; the executor (scheduler side and watcher child) uses a token of the
scheduler's service account. A refusal must be reported at once and explained (verb, resource,
namespace, the server's message, the rule to grant), never as a raw ``ForbiddenException`` with
headers, and never after ``unhealthy_after_seconds`` (set to 300 s here to prove it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from support.deploy_rbac import deploy_rbac
from support.workloads import make_workload

from airflow_jobwatch_testing.pod_template import pod_template_yaml
from airflow_jobwatch_testing.sandbox import SandboxThread

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not hasattr(SandboxThread, "load_rbac_manifests"),
        reason="sandbox RBAC mode not available",
    ),
]

NAMESPACE = "airflow"
SCHEDULER = "system:serviceaccount:airflow:airflow-scheduler"


def _doc_role(component: str = "scheduler") -> str:
    import re

    doc = (Path(__file__).resolve().parents[3] / "docs" / "deploying.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", doc, flags=re.S)
    (block,) = [b for b in blocks if b.startswith(f"# rbac: {component}\n")]
    return block


def _without(manifests: str, verb: str) -> str:
    docs = list(yaml.safe_load_all(manifests))
    for doc in docs:
        if doc["kind"] == "Role":
            for rule in doc["rules"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != verb]
    return yaml.safe_dump_all(docs)


@pytest.fixture
def rbac_kube() -> Iterator[SandboxThread]:
    with SandboxThread(bookmark_interval=1.0) as sb:
        yield sb


@pytest.fixture
def executor_for(
    rbac_kube: SandboxThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Any]]:
    template = tmp_path / "pod_template.yaml"
    template.write_text(pod_template_yaml())
    created: list[Any] = []

    def make(manifests: str, namespace: str | None = None) -> Any:
        """A started executor with the scheduler's token, ``manifests`` loaded as ``kubectl apply -n
        namespace -f`` (``namespace`` None: as ``kubectl apply -f``, each document's own)."""
        from kubernetes.client import CoreV1Api

        from airflow_jobwatch.kube.cluster.client import ClusterConfig, sync_api_client

        admin_path = tmp_path / "admin-kubeconfig"
        rbac_kube.write_kubeconfig(admin_path)
        with sync_api_client(ClusterConfig(config_file=str(admin_path))) as admin:
            if not any(n.metadata.name == NAMESPACE for n in CoreV1Api(admin).list_namespace().items):
                CoreV1Api(admin).create_namespace({"metadata": {"name": NAMESPACE}})
        rbac_kube.load_rbac_manifests(manifests, namespace=namespace)
        kubeconfig = tmp_path / "scheduler-kubeconfig"
        rbac_kube.write_kubeconfig(kubeconfig, token=rbac_kube.issue_token(SCHEDULER))
        for k, v in {
            "AIRFLOW__KUBERNETES_EXECUTOR__IN_CLUSTER": "False",
            "AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE": str(kubeconfig),
            "AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE": NAMESPACE,
            "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE": str(template),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(tmp_path / "logs"),
            "AIRFLOW__JOBWATCH__BACKOFF_INITIAL_SECONDS": "0.1",
            "AIRFLOW__JOBWATCH__BACKOFF_MAX_SECONDS": "1",
            "AIRFLOW__JOBWATCH__UNHEALTHY_AFTER_SECONDS": "300",
            "AIRFLOW__JOBWATCH__WATCHER_UNRESPONSIVE_AFTER_SECONDS": "10",
            "AIRFLOW__JOBWATCH__EXECUTOR_STATUS_FILE": str(tmp_path / "status.json"),
        }.items():
            monkeypatch.setenv(k, v)
        from airflow_jobwatch.executors.jobwatch_executor import JobWatchExecutor

        ex = JobWatchExecutor(parallelism=4)
        ex.job_id = "9"
        ex.start()
        created.append(ex)
        return ex

    yield make
    for ex in created:
        if ex.supervisor is not None:
            ex.end()


def _submit(ex: Any, task_id: str, command: str = "exit 0") -> None:
    ex.queue_workload(make_workload(task_id=task_id, command=command), session=mock.sentinel.unused_session)


def _until(ex: Any, cond: Callable[[dict[str, Any]], Any], what: str, timeout: float = 60) -> Any:
    events: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    while True:
        ex.heartbeat()
        for key, (state, info) in ex.get_event_buffer().items():
            events[key.task_id] = (str(state), info)
        result = cond(events)
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}; status {ex.status()}"
        time.sleep(0.1)


@pytest.mark.parametrize("source", ["docs", "deploy/rbac"])
def test_scheduler_role_runs_tasks(executor_for: Any, source: str) -> None:
    """The scheduler's Role from the guide, or deploy/rbac/scheduler.yaml as ``kubectl apply -n airflow``
    applies it: the executor launches the task's pod, watches it to its end and cleans it up."""
    ex = executor_for(_doc_role() if source == "docs" else deploy_rbac("scheduler"), namespace=NAMESPACE)
    _submit(ex, "ok")
    state = _until(ex, lambda e: e.get("ok", ("", None))[0] in ("success", "failed") and e["ok"], "the task")
    assert state[0] == "success", state
    assert ex.status()["watcher_access_denied"] is None


def test_create_refused_fails_the_task_with_the_rule_to_grant(executor_for: Any) -> None:
    ex = executor_for(_without(_doc_role(), "create"))
    _submit(ex, "nocreate")
    state, info = _until(
        ex, lambda e: e.get("nocreate") if e.get("nocreate", ("",))[0] == "failed" else None, "the failure"
    )
    text = str(info)
    assert "create pods" in text and f'in namespace "{NAMESPACE}"' in text
    assert "airflow-scheduler" in text and 'verbs: ["create"]' in text
    assert "HTTP response headers" not in text


@pytest.mark.parametrize("verb", ["list", "watch"])
def test_list_or_watch_refused_makes_the_watcher_unhealthy_at_once(
    executor_for: Any, tmp_path: Path, verb: str
) -> None:
    ex = executor_for(_without(_doc_role(), verb))
    started = time.monotonic()

    def denied(_: Any) -> Any:
        status = ex.status()
        return status["watcher_access_denied"] if not status["watcher_healthy"] else None

    message = _until(ex, denied, "the watcher to report the refusal")
    assert time.monotonic() - started < 60  # far below unhealthy_after_seconds (300)
    assert f"{verb} pods" in message and 'verbs: ["' + verb + '"]' in message
    status_path = tmp_path / "status.json"

    def in_status_file(_: Any) -> Any:
        status = json.loads(status_path.read_text()) if status_path.exists() else {}
        return status if status.get("watcher_access_denied") else None

    status_file = _until(ex, in_status_file, "the status file to show the refusal", timeout=30)
    assert status_file["watcher_healthy"] is False
    assert f"{verb} pods" in status_file["watcher_access_denied"]


def test_api_server_role_reads_a_running_tasks_log(
    executor_for: Any, rbac_kube: SandboxThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The api-server builds the executor only to call get_task_log: with the doc's api-server Role
    (pods list, pods/log get) it shows the running task's log."""
    from types import SimpleNamespace

    from airflow_jobwatch.executors.jobwatch_executor import JobWatchExecutor

    ex = executor_for(_doc_role() + "\n---\n" + _doc_role("api-server"))
    w = make_workload(task_id="long", command="echo started-long; sleep 60")
    ex.queue_workload(w, session=mock.sentinel.unused_session)
    _until(ex, lambda e: e.get("long", ("",))[0] == "running" or None, "the task to run")
    viewer_kubeconfig = tmp_path / "api-server-kubeconfig"
    rbac_kube.write_kubeconfig(
        viewer_kubeconfig, token=rbac_kube.issue_token("system:serviceaccount:airflow:airflow-api-server")
    )
    monkeypatch.setenv("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE", str(viewer_kubeconfig))
    viewer = JobWatchExecutor(parallelism=1)  # never started, as in the api-server
    ti = SimpleNamespace(
        dag_id=w.ti.dag_id,
        task_id=w.ti.task_id,
        map_index=w.ti.map_index,
        run_id=w.ti.run_id,
        queued_by_job_id="9",
        key=w.ti.key,
    )
    deadline = time.monotonic() + 60
    while True:
        messages, logs = viewer.get_task_log(ti, w.ti.try_number)
        if logs and "started-long" in logs[0]:
            break
        assert "forbidden" not in " ".join(messages).lower(), messages
        assert time.monotonic() < deadline, (messages, logs)
        time.sleep(0.2)


def _doc_role_in(namespace: str) -> str:
    """The doc's scheduler Role and RoleBinding, granted in ``namespace`` (a pod_override's namespace)."""
    docs = list(yaml.safe_load_all(_doc_role()))
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    return yaml.safe_dump_all(docs)


@pytest.mark.parametrize("rights", ["cluster-list", "role-in-each-namespace", "not-in-that-namespace"])
def test_adoption_finds_a_pod_in_a_pod_override_namespace_or_leaves_the_task_unresolved(
    executor_for: Any, rbac_kube: SandboxThread, tmp_path: Path, rights: str
) -> None:
    """A gone scheduler (job 8) left a running pod in the namespace its pod_override named. With the doc's
    cluster-wide list, or the doc's Role in that namespace too, the adopter finds and adopts it. With no
    right to list there, it cannot know: the task instance is kept unresolved, neither reset nor launched."""
    from types import SimpleNamespace

    from kubernetes.client import CoreV1Api

    from airflow_jobwatch.kube.cluster.client import ClusterConfig, sync_api_client

    manifests = _doc_role()
    if rights == "cluster-list":
        manifests += "\n---\n" + _doc_role("scheduler-cluster-list") + "\n---\n" + _doc_role_in("elsewhere")
    elif rights == "role-in-each-namespace":
        manifests += "\n---\n" + _doc_role_in("elsewhere")
    admin_path = tmp_path / "admin-kubeconfig-2"
    rbac_kube.write_kubeconfig(admin_path)
    with sync_api_client(ClusterConfig(config_file=str(admin_path))) as admin:
        CoreV1Api(admin).create_namespace({"metadata": {"name": "elsewhere"}})
    ex = executor_for(manifests)
    w = make_workload(task_id="away", command="sleep 60", namespace="elsewhere")
    w.ti.external_executor_id = "launch-away"
    assert ex._pod_builder is not None
    body = ex._pod_builder.body(w, pod_name="left-by-job-8", launch_id="launch-away")
    body["metadata"]["labels"][ex.labels.worker] = "8"
    with sync_api_client(ClusterConfig(config_file=str(admin_path))) as admin:
        CoreV1Api(admin).create_namespaced_pod("elsewhere", body)
    orphan = SimpleNamespace(
        key=w.ti.key,
        queued_by_job_id=8,
        external_executor_id="launch-away",
        state="running",
        executor_config=w.ti.executor_config if hasattr(w.ti, "executor_config") else None,
    )
    assert ex.try_adopt_task_instances([orphan]) == [], "the task instance was handed back to be reset"
    if rights == "not-in-that-namespace":
        assert w.ti.key not in ex.running and ex.status()["unresolved_adoptions"] == 1
    else:
        assert w.ti.key in ex.running and ex.status()["adopted"] == 1
    assert ex.status()["pods_launched"] == 0
