"""The RBAC manifests of docs/deploying.md, loaded from the page, against the code that needs them.

* Static: each component's Role grants exactly what that component calls (the table below, kept next
  to the calls it lists), no less and no more.
* Against the sandbox's RBAC mode (service accounts with tokens, Role/RoleBinding enforcement, 403
  bodies as the real server's): each component works with its Role, and without one of its rules fails
  at once with the explained error (verb, resource, namespace, what to grant).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.deploy_rbac import COMPONENTS, deploy_rbac, helm_values

DOC = Path(__file__).resolve().parents[2] / "docs" / "deploying.md"
NAMESPACE = "airflow"

#: What each component calls (verb, resource), from the code:
#: executor: create/read/list/patch/delete pods in jobwatch_executor.py, list+watch in the watcher child;
#: api-server: JobWatchExecutor.get_task_log (list pods, read log);
#: triggerer: JobTrigger's shared informers (list+watch jobs and pods; list+watch the FailedCreate events
#: once a Job shows no pod for a while, triggers/refusals.py), its GET of the Job, on_kill delete
#: (and deletecollection of its pods with delete_pods_on_kill); ending a task itself: the result written
#: onto the Job (patch jobs) before on_finish_action labels and deletes the pods (patch, delete pods),
#: and the pods' logs with get_logs (read logs);
#: worker: KubernetesJobOperator (create/read/list/delete jobs, list/read/patch/delete pods and
#: deletecollection on kill, read logs) and its in-worker JobTrigger wait (list+watch jobs, pods, events).
NEEDS: dict[str, set[tuple[str, str, str]]] = {
    "scheduler": {("", "pods", v) for v in ("create", "get", "list", "watch", "patch", "delete")},
    "api-server": {("", "pods", "list"), ("", "pods/log", "get")},
    "triggerer": {("batch", "jobs", v) for v in ("get", "list", "watch", "patch", "delete")}
    | {("", "pods", v) for v in ("list", "watch", "patch", "delete", "deletecollection")}
    | {("", "pods/log", "get")}
    | {("", "events", v) for v in ("list", "watch")},
    "worker": {("batch", "jobs", v) for v in ("create", "get", "list", "watch", "delete")}
    | {("", "pods", v) for v in ("get", "list", "watch", "patch", "delete", "deletecollection")}
    | {("", "pods/log", "get")}
    | {("", "events", v) for v in ("list", "watch")},
}
SERVICE_ACCOUNTS = {
    "scheduler": "airflow-scheduler",
    "api-server": "airflow-api-server",
    "triggerer": "airflow-triggerer",
    "worker": "airflow-worker",
}


def doc_manifests(component: str) -> str:
    """The YAML block of docs/deploying.md that starts with ``# rbac: <component>``."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    found = [b for b in blocks if b.startswith(f"# rbac: {component}\n")]
    assert len(found) == 1, f"docs/deploying.md must have one ```yaml block starting '# rbac: {component}'"
    return found[0]


@pytest.mark.parametrize("component", sorted(NEEDS))
def test_doc_role_grants_exactly_what_the_component_calls(component: str) -> None:
    docs = list(yaml.safe_load_all(doc_manifests(component)))
    roles = [d for d in docs if d["kind"] == "Role"]
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert len(roles) == 1 and len(bindings) == 1
    role, binding = roles[0], bindings[0]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": SERVICE_ACCOUNTS[component], "namespace": NAMESPACE}
    ]
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == NEEDS[component]


def _role_and_subjects(manifests: str) -> tuple[str, list[Any], list[str]]:
    docs = {d["kind"]: d for d in yaml.safe_load_all(manifests)}
    role, binding = docs["Role"], docs["RoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    return role["metadata"]["name"], role["rules"], [s["name"] for s in binding["subjects"]]


@pytest.mark.parametrize("component", COMPONENTS)
def test_deploy_files_grant_what_the_guide_lists(component: str) -> None:
    """deploy/rbac/<component>.yaml is the guide's Role, without namespaces so that ``kubectl apply -n``
    places it (a RoleBinding's ServiceAccount subject without a namespace is the binding's own)."""
    deployed = deploy_rbac(component)
    assert _role_and_subjects(deployed) == _role_and_subjects(doc_manifests(component))
    assert "namespace" not in deployed.replace("# ", "#").split("\napiVersion", 1)[1]


def test_helm_values_bind_the_service_accounts_the_roles_name() -> None:
    """The chart's values (helm cannot be run here, so their shape is checked): the executor, the chart's own
    pod and job launcher Roles off (they would bind the triggerer to more than it needs), and each
    component's service account pinned to the name its Role's binding names."""
    values = yaml.safe_load(helm_values())
    assert values["executor"] == "airflow_jobwatch.executors.JobWatchExecutor"
    assert values["rbac"]["create"] is True
    assert values["allowPodLaunching"] is False and values["allowJobLaunching"] is False
    assert values["multiNamespaceMode"] is False
    assert values["triggerer"]["enabled"] is True
    keys = {
        "scheduler": "scheduler",
        "api-server": "apiServer",
        "triggerer": "triggerer",
        "worker": "workers",
    }
    for component, key in keys.items():
        account = values[key]["serviceAccount"]
        assert account["create"] is True
        assert (
            [account["name"]]
            == _role_and_subjects(deploy_rbac(component))[2]
            == [SERVICE_ACCOUNTS[component]]
        )
    assert values["config"]["kubernetes_executor"]["namespace"] == NAMESPACE


# --------------------------------------------------------------------------------------------------
# Against the sandbox's RBAC mode


def _rbac_sandbox_available() -> bool:
    from airflow_jobwatch_testing.sandbox import SandboxThread

    return hasattr(SandboxThread, "load_rbac_manifests") and hasattr(SandboxThread, "issue_token")


needs_rbac = pytest.mark.skipif(not _rbac_sandbox_available(), reason="sandbox RBAC mode not available")


def user(component: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNTS[component]}"


def without(manifests: str, group: str, resource: str, verb: str) -> str:
    """The manifests with one (group, resource, verb) removed from the Role."""
    docs = list(yaml.safe_load_all(manifests))
    for doc in docs:
        if doc["kind"] != "Role":
            continue
        rules = []
        for rule in doc["rules"]:
            if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
                rule = {**rule, "verbs": [v for v in rule["verbs"] if v != verb]}
            if rule["verbs"]:
                rules.append(rule)
        doc["rules"] = rules
    return yaml.safe_dump_all(docs)


def kubeconfig_for(sb: Any, component: str, tmp_path: Path) -> str:
    path = tmp_path / f"kubeconfig-{component}"
    sb.write_kubeconfig(path, token=sb.issue_token(user(component)))
    return str(path)


async def admin_client(sb: Any, tmp_path: Path) -> Any:
    """A client with the sandbox's admin token (never refused), and the namespace the Roles are for."""
    from kubernetes_asyncio.client import CoreV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    from airflow_jobwatch.kube.cluster.client import ClusterConfig, async_api_client

    path = tmp_path / "admin"
    sb.write_kubeconfig(path)
    admin = await async_api_client(ClusterConfig(config_file=str(path)))
    try:
        await CoreV1Api(admin).create_namespace({"metadata": {"name": NAMESPACE}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    return admin


def _job(name: str, command: str = "exit 0") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", command]}],
                }
            },
        },
    }


@contextlib.asynccontextmanager
async def roles_loaded(sb: Any, tmp_path: Path, manifests: str) -> AsyncIterator[Any]:
    """The sandbox's RBAC with ``manifests`` loaded as ``kubectl apply -n airflow -f`` loads them; yields a
    client with the admin token (closed after)."""
    sb.load_rbac_manifests(manifests, namespace=NAMESPACE)
    admin = await admin_client(sb, tmp_path)
    try:
        yield admin
    finally:
        await admin.close()


async def triggerer_on_a_new_job(
    sb: Any, tmp_path: Path, admin: Any, name: str, command: str = "exit 0", **options: Any
) -> Any:
    """A Job ``name`` running ``command``, created as admin, and a JobTrigger for it (``options``) with the
    triggerer's service account's token."""
    from kubernetes_asyncio.client import BatchV1Api

    from airflow_jobwatch.triggers.job import JobTrigger

    job = await BatchV1Api(admin).create_namespaced_job(NAMESPACE, _job(name, command))
    return JobTrigger(
        name,
        NAMESPACE,
        config_file=kubeconfig_for(sb, "triggerer", tmp_path),
        job_uid=job.metadata.uid,
        **options,
    )


@needs_rbac
async def test_triggerer_role_from_the_doc(sandbox: Any, tmp_path: Path) -> None:
    async with roles_loaded(sandbox, tmp_path, doc_manifests("triggerer")) as admin:
        trigger = await triggerer_on_a_new_job(
            sandbox, tmp_path, admin, "granted", poll_interval=1.0, delete_on_kill=True
        )
        assert (await trigger.wait())["status"] == "success"
        await trigger.on_kill()  # delete is granted too


@needs_rbac
@pytest.mark.parametrize("events_granted", [True, False], ids=["doc-role", "without-events"])
async def test_triggerer_role_reads_why_pods_cannot_be_created(
    sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events_granted: bool
) -> None:
    """With the doc's Role the quota's refusal reaches the task log; without ``list`` and ``watch`` on events the
    wait still succeeds, and the triggerer's log says what to grant (once)."""
    import asyncio
    import logging

    import structlog.testing

    from airflow_jobwatch.triggers import notes

    monkeypatch.setattr(notes, "MISSING_PODS_FIRST_CHECK_SECONDS", 0.3)
    manifests = doc_manifests("triggerer")
    if not events_granted:
        manifests = without(without(manifests, "", "events", "watch"), "", "events", "list")
    advice: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: advice.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("airflow_jobwatch.triggers.refusals").addHandler(handler)
    try:
        async with roles_loaded(sandbox, tmp_path, manifests) as admin:
            sandbox.set_pod_quota(NAMESPACE, 0, "team-quota")
            trigger = await triggerer_on_a_new_job(sandbox, tmp_path, admin, "capped", poll_interval=0.5)
            with structlog.testing.capture_logs() as logs:
                task = asyncio.create_task(trigger.wait())
                deadline = asyncio.get_running_loop().time() + 30
                while (
                    not any("cannot create its pods yet" in str(e.get("event")) for e in logs) and not advice
                ):
                    assert asyncio.get_running_loop().time() < deadline, "neither the reason nor the advice"
                    await asyncio.sleep(0.1)
                if (
                    not events_granted
                ):  # refused once, then no more asking: no refusal logged at every backoff
                    asked = sandbox.counters().get("list events", 0)
                    await asyncio.sleep(3.0)  # several backoffs (0.8 s doubling) of an informer that retried
                    assert sandbox.counters().get("list events", 0) == asked >= 1
                    assert not task.done()
                sandbox.set_pod_quota(NAMESPACE, None)
                payload = await asyncio.wait_for(task, 30)
        assert payload["status"] == "success", payload
        said = [str(e.get("event")) % tuple(e.get("positional_args") or ()) for e in logs]
        if events_granted:
            assert any("exceeded quota: team-quota" in line for line in said), said
        else:
            assert "Grant list and watch on events" in " ".join(advice), advice
            assert not any("cannot create its pods yet" in line for line in said)
    finally:
        logging.getLogger("airflow_jobwatch.triggers.refusals").removeHandler(handler)


@needs_rbac
@pytest.mark.parametrize(("group", "resource", "verb"), [("batch", "jobs", "watch"), ("", "pods", "list")])
async def test_triggerer_missing_one_rule_ends_at_once_with_the_advice(
    sandbox: Any, tmp_path: Path, group: str, resource: str, verb: str
) -> None:
    from airflow_jobwatch.triggers.job import JobTrigger

    sandbox.load_rbac_manifests(without(doc_manifests("triggerer"), group, resource, verb))
    trigger = JobTrigger(
        "anything",
        NAMESPACE,
        config_file=kubeconfig_for(sandbox, "triggerer", tmp_path),
        poll_interval=1.0,
        api_failure_tolerance=300,  # far away: the 403 must not wait for it
    )
    import asyncio

    payload = await asyncio.wait_for(trigger.wait(), 30)
    assert payload["status"] == "error" and payload["reason"] == "Forbidden", payload
    message = payload["message"]
    assert f"{verb} {resource}" in message
    assert f'in namespace "{NAMESPACE}"' in message
    assert "airflow-triggerer" in message
    assert f'verbs: ["{verb}"]' in message
    assert "HTTP response headers" not in message


@needs_rbac
async def test_on_kill_without_delete_is_explained(sandbox: Any, tmp_path: Path) -> None:
    manifests = without(doc_manifests("triggerer"), "batch", "jobs", "delete")
    async with roles_loaded(sandbox, tmp_path, manifests) as admin:
        trigger = await triggerer_on_a_new_job(
            sandbox, tmp_path, admin, "undeletable", "sleep 60", delete_on_kill=True
        )
        with pytest.raises(
            PermissionError, match=r'delete jobs \(API group batch\) in namespace "airflow"'
        ) as info:
            await trigger.on_kill()
        assert 'verbs: ["delete"]' in str(info.value) and "HTTP response headers" not in str(info.value)


async def _end_from_the_triggerer(
    sandbox: Any, tmp_path: Path, manifests: str, name: str
) -> tuple[Any, Any, list[Any]]:
    """With ``manifests`` loaded, run a Job to its end and end its task from the triggerer (on_finish_action
    delete_pod) with the triggerer's credentials; return the Job, the log entries and the pods left
    afterwards, read as admin."""
    import structlog.testing
    from kubernetes_asyncio.client import BatchV1Api, CoreV1Api

    from airflow_jobwatch.ending.end import end_from_triggerer

    async with roles_loaded(sandbox, tmp_path, manifests) as admin:
        trigger = await triggerer_on_a_new_job(
            sandbox,
            tmp_path,
            admin,
            name,
            "echo from the job",
            base_container_name="c",
            end_task={
                "on_finish_action": "delete_pod",
                "push_return": False,
                "fail": True,
                "logs": {"container_logs": True, "init_container_logs": None},  # get_logs=True
            },
            mask_secrets=[],  # the task's secrets are known (none): it may end here
        )
        with structlog.testing.capture_logs() as entries:
            event = await end_from_triggerer(trigger, await trigger.wait())
        assert type(event).__name__ == "TaskSuccessEvent"
        pods = (
            await CoreV1Api(admin).list_namespaced_pod(
                NAMESPACE, label_selector=f"controller-uid={trigger.job_uid}"
            )
        ).items
        left = [p for p in pods if not p.metadata.deletion_timestamp]
        return await BatchV1Api(admin).read_namespaced_job(name, NAMESPACE), entries, left


#: Where a component's Role is read from: the guide's YAML block, or the file users apply.
SOURCES = {"docs": doc_manifests, "deploy/rbac": deploy_rbac}


@needs_rbac
@pytest.mark.parametrize("source", sorted(SOURCES))
async def test_triggerer_role_ends_a_task_and_cleans_up(sandbox: Any, tmp_path: Path, source: str) -> None:
    from airflow_jobwatch.ending.result_keys import result_keys
    from airflow_jobwatch.kube.meaning.result import stored_result

    job, entries, left = await _end_from_the_triggerer(
        sandbox, tmp_path, SOURCES[source]("triggerer"), "ended-here"
    )
    assert stored_result(job, result_keys()) is not None
    assert left == []
    assert not [e for e in entries if e.get("log_level") == "warning"], entries  # the log read too
    assert any(str(e.get("event")).endswith("] [c] from the job") for e in entries), entries


@needs_rbac
async def test_without_patch_on_jobs_the_pods_that_hold_the_result_are_kept(
    sandbox: Any, tmp_path: Path
) -> None:
    from airflow_jobwatch.ending.result_keys import result_keys
    from airflow_jobwatch.kube.meaning.result import stored_result

    manifests = without(doc_manifests("triggerer"), "batch", "jobs", "patch")
    job, entries, left = await _end_from_the_triggerer(sandbox, tmp_path, manifests, "kept-pods")
    assert stored_result(job, result_keys()) is None
    assert len(left) == 1  # the result is still on its pod: nothing was deleted
    warnings = [
        str(e.get("event")) % tuple(e.get("positional_args") or ())
        for e in entries
        if e.get("log_level") == "warning"
    ]
    assert any("Keeping the pods" in w and 'verbs: ["patch"]' in w for w in warnings), warnings


@needs_rbac
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_worker_role_runs_the_operator(sandbox: Any, tmp_path: Path, source: str) -> None:
    """KubernetesJobOperator in a worker with the worker Role (the guide's, or deploy/rbac/worker.yaml applied
    with ``kubectl apply -n airflow``): creates the Job, waits for it in the worker (JobTrigger), reads its
    log, deletes its pods (on_finish_action)."""
    import asyncio

    import structlog.testing

    from airflow_jobwatch.operators.job import KubernetesJobOperator

    asyncio.run(_create_namespace(sandbox, tmp_path))
    sandbox.load_rbac_manifests(SOURCES[source]("worker"), namespace=NAMESPACE)
    op = KubernetesJobOperator(
        task_id="task",
        namespace=NAMESPACE,
        image="busybox:1.36",
        cmds=["sh", "-c", "echo hello-with-rbac"],
        backoff_limit=0,
        wait_until_job_complete=True,
        deferrable=False,
        get_logs=True,
        kubernetes_conn_id=None,
        config_file=kubeconfig_for(sandbox, "worker", tmp_path),
    )
    context = _operator_context()
    with structlog.testing.capture_logs() as logs:
        op.execute(context)
    text = "\n".join(
        str(e.get("event")) % tuple(e["positional_args"]) if e.get("positional_args") else str(e.get("event"))
        for e in logs
    )
    assert "ended: success" in text, text
    assert "forbidden" not in text.lower() and "403" not in text, text
    assert context["ti"].xcoms["job_name"]


async def _create_namespace(sb: Any, tmp_path: Path) -> None:
    admin = await admin_client(sb, tmp_path)
    await admin.close()


def _operator_context() -> dict[str, Any]:
    import datetime

    class TI:
        dag_id, task_id, map_index, try_number = "dag", "task", -1, 1
        start_date = datetime.datetime.now(datetime.UTC)

        def __init__(self) -> None:
            self.xcoms: dict[str, Any] = {}

        def xcom_push(self, key: str, value: Any) -> None:
            self.xcoms[key] = value

    class Dag:
        dag_id = "dag"

    return {"ti": TI(), "run_id": "manual__2026-12-03T00:00:00", "dag": Dag()}
