"""A scheduler restart with tasks whose pods a ``pod_override`` put in another namespace: one pod, one try.

Real api-server, dag-processor and scheduler on SQLite, JobWatchExecutor, worker pods run by the sandbox
(``tests/e2e/dags_pod_override``). Both tasks' pods live in ``jobwatch-away``, a namespace that only their
``pod_override`` names (``[kubernetes_executor] namespace`` is ``default``): one pod is held Pending by an
init container (its task instance QUEUED), the other runs its task (RUNNING). The scheduler is SIGKILLed
while both pods exist and a new one is started: it must find both pods, adopt them, and launch nothing.
What is asserted is what a user sees: every pod create the sandbox ever received (none after the kill),
task states and try numbers, no earlier try in ``task_instance_history``, and the adoption in the
scheduler's log.

* With the sandbox's admin credential, the adopter lists the worker pods across all namespaces.
* With the scheduler's Role of the deployment guide in ``default`` and ``jobwatch-away`` only (no list
  across all namespaces), the adopter is refused that list and falls back to the configured and watched
  namespaces plus the one each orphaned task's ``pod_override`` names.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.stack import AirflowStack, wait_until

from airflow_jobwatch_testing.sandbox.kubeconfig import kubeconfig_text

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

DAGS = Path(__file__).parent / "dags_pod_override"
DAG_ID = "pod_override_namespace"
AWAY = "jobwatch-away"  # the namespace of the DAG's pod_override
TASKS = ("pending_away", "running_away")
SCHEDULER_USER = "system:serviceaccount:airflow:airflow-scheduler"
DEPLOYING = Path(__file__).resolve().parents[2] / "docs" / "deploying.md"


@pytest.fixture(scope="module")
def release_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("release")


@pytest.fixture(scope="module")
def scheduler_kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scheduler's kubeconfig: the admin one to begin with, a Role-bound service account's later."""
    return tmp_path_factory.mktemp("scheduler-kube") / "kubeconfig"


@pytest.fixture(scope="module")
def stack(release_dir: Path, scheduler_kubeconfig: Path) -> Iterator[AirflowStack]:
    from kubernetes.client import CoreV1Api

    from airflow_jobwatch.kube.cluster.client import ClusterConfig, sync_api_client

    # The scheduler starts once the pod_override's namespace exists and its kubeconfig is written.
    with AirflowStack(
        processes=("api-server", "dag-processor"),
        dags_folder=DAGS,
        dag_ids=[DAG_ID],
        config={
            ("kubernetes_executor", "config_file"): str(scheduler_kubeconfig),
            # Pods are kept, so the test can show each task's pods afterwards.
            ("kubernetes_executor", "delete_worker_pods"): "False",
            ("kubernetes_executor", "delete_worker_pods_on_failure"): "False",
            ("scheduler", "orphaned_tasks_check_interval"): "2",
        },
        env={"JOBWATCH_E2E_RELEASE_DIR": str(release_dir)},
        keep=bool(os.environ.get("JOBWATCH_E2E_KEEP")),  # keep AIRFLOW_HOME (logs) for debugging
    ) as s:
        with sync_api_client(ClusterConfig(config_file=str(s.kubeconfig))) as admin:
            CoreV1Api(admin).create_namespace({"metadata": {"name": AWAY}})
        scheduler_kubeconfig.write_text(s.kubeconfig.read_text())
        scheduler_kubeconfig.chmod(0o600)
        s.start("scheduler")
        yield s


def _tis(stack: AirflowStack, run_id: str) -> dict[str, dict[str, Any]]:
    rows = stack.query(
        "SELECT task_id, state, try_number, queued_by_job_id FROM task_instance WHERE dag_id = ? AND run_id = ?",
        (DAG_ID, run_id),
    )
    return {t: {"state": s, "try_number": n, "queued_by_job_id": q} for t, s, n, q in rows}


def _history(stack: AirflowStack, run_id: str) -> list[tuple[Any, ...]]:
    """The earlier tries Airflow recorded for the run's task instances (a reset or a retry adds one)."""
    return stack.query(
        "SELECT task_id, try_number, state FROM task_instance_history WHERE dag_id = ? AND run_id = ?",
        (DAG_ID, run_id),
    )


def _pods(stack: AirflowStack, run_id: str) -> list[dict[str, Any]]:
    """The run's worker pods in every namespace: namespace, name, task, try, phase, init container state."""
    out = []
    for p in stack.admin.objects("pods"):
        ann = p["metadata"].get("annotations") or {}
        if ann.get("run_id") != run_id:
            continue
        status = p.get("status") or {}
        out.append(
            {
                "namespace": p["metadata"]["namespace"],
                "name": p["metadata"]["name"],
                "task": ann.get("task_id"),
                "try": ann.get("try_number"),
                "phase": status.get("phase"),
                "init": [
                    list((c.get("state") or {}).keys()) for c in status.get("initContainerStatuses") or []
                ],
            }
        )
    return out


def _creates(stack: AirflowStack) -> int:
    """Every pod create the sandbox received (refused ones too): only this module's DAG runs here."""
    return int(stack.admin.counters().get("create pods", 0))


def _scheduler_job(stack: AirflowStack, after: int = 0) -> int:
    """The job id of the scheduler's latest start once its executor runs."""
    return int(
        wait_until(
            lambda: (job := stack.scheduler_job_id("scheduler")) is not None and job > after and job,
            timeout=120,
            what="the scheduler to start its executor",
        )
    )


def _latest_scheduler_log(stack: AirflowStack) -> str:
    text = (stack.home / "proc-logs" / "scheduler.log").read_text(errors="replace")
    return text.rsplit("===== start scheduler at ", 1)[-1]


def _held_in_away(stack: AirflowStack, run_id: str) -> dict[str, dict[str, Any]] | None:
    """Both pods in the pod_override's namespace, ``pending_away``'s Pending in its init container with its
    task instance QUEUED, ``running_away``'s task RUNNING; fails at once if a pod ended."""
    pods = _pods(stack, run_id)
    assert not [p for p in pods if p["phase"] in ("Succeeded", "Failed")], f"a pod ended early: {pods}"
    by_task = {p["task"]: p for p in pods}
    tis = _tis(stack, run_id)
    ready = (
        len(pods) == 2
        and all(p["namespace"] == AWAY for p in pods)
        and by_task.get("pending_away", {}).get("phase") == "Pending"
        and by_task["pending_away"]["init"] == [["running"]]
        and tis.get("pending_away", {}).get("state") == "queued"
        and by_task.get("running_away", {}).get("phase") == "Running"
        and tis.get("running_away", {}).get("state") == "running"
    )
    return by_task if ready else None


def _restart_adopts_the_away_pods(
    stack: AirflowStack, release_dir: Path, *, before_restart: Any = None
) -> tuple[str, str]:
    """Trigger the DAG, SIGKILL the scheduler while both pods are held, start a new one, release the pods;
    assert one pod per task ever created, success on try 1, and the adoption in the new scheduler's log.
    Returns the run id and the new scheduler's log since its start."""
    for task_id in TASKS:
        (release_dir / task_id).unlink(missing_ok=True)
    old = _scheduler_job(stack)
    run_id = stack.trigger_dag(DAG_ID)
    held = wait_until(
        lambda: _held_in_away(stack, run_id),
        timeout=120,
        what=f"both pods held in {AWAY} (one Pending, one Running)",
    )
    creates = _creates(stack)
    try:
        stack.kill("scheduler")  # SIGKILL to its process group: the scheduler and its watcher
        if before_restart is not None:
            before_restart()
        stack.start("scheduler")
        new = _scheduler_job(stack, after=old)
        # Adopted (held by the new scheduler, try 1) or, wrongly, reset for a new try.
        wait_until(
            lambda: (
                (tis := _tis(stack, run_id)).keys() == set(TASKS)
                and all(t["queued_by_job_id"] == new or t["try_number"] != 1 for t in tis.values())
            ),
            timeout=120,
            what=f"the new scheduler (job {new}) to take over the tasks of job {old}",
        )
    finally:
        for task_id in TASKS:  # the pods end now, after the new scheduler took them over (or failed to)
            (release_dir / task_id).touch()
    state = stack.wait_for_run(DAG_ID, run_id, timeout=120)
    tis, pods = _tis(stack, run_id), _pods(stack, run_id)
    seen = (
        f"run {state}; task instances {tis}; pods "
        f"{sorted((p['task'], p['try'], p['phase'], p['namespace'], p['name']) for p in pods)}"
    )
    assert _creates(stack) == creates, f"{_creates(stack) - creates} pod(s) created after the restart: {seen}"
    assert state == "success", seen
    assert all(t["state"] == "success" and t["try_number"] == 1 for t in tis.values()), seen
    assert all(t["queued_by_job_id"] == new for t in tis.values()), (new, tis)
    assert _history(stack, run_id) == [], "a task was reset or retried"
    assert sorted((p["task"], p["namespace"], p["name"]) for p in pods) == sorted(
        (t, AWAY, held[t]["name"]) for t in TASKS
    ), pods
    log = _latest_scheduler_log(stack)
    for task_id in TASKS:
        assert re.search(
            rf"Adopted pod {AWAY}/{re.escape(held[task_id]['name'])} of .*task_id='{task_id}'.* from scheduler "
            rf"job {old}",
            log,
        ), f"no adoption of {task_id}'s pod in the new scheduler's log\n{stack.log_tail('scheduler')}"
    assert "launching it here on the same try" not in log, stack.log_tail("scheduler")
    assert "pending_away runs on try 1" in stack.task_log(DAG_ID, run_id, "pending_away", 1)
    return run_id, log


def test_a_restart_adopts_pods_in_a_pod_override_namespace_listed_across_namespaces(
    stack: AirflowStack, release_dir: Path
) -> None:
    _, log = _restart_adopts_the_away_pods(stack, release_dir)
    assert "Listing worker pods across all namespaces is not allowed" not in log


def test_a_restart_adopts_pods_in_a_pod_override_namespace_with_namespaced_roles_only(
    stack: AirflowStack, release_dir: Path, scheduler_kubeconfig: Path
) -> None:
    """The new scheduler runs with the deployment guide's scheduler Role in ``default`` and ``jobwatch-away``
    (nothing cluster-wide): its list across all namespaces is refused, and it lists the namespaces it can
    know of instead, the pod_override's among them."""
    (block,) = [
        b
        for b in re.findall(r"```yaml\n(.*?)```", DEPLOYING.read_text(), flags=re.S)
        if b.startswith("# rbac: scheduler\n")
    ]
    manifests = []
    for namespace in ("default", AWAY):
        for doc in yaml.safe_load_all(block):
            doc["metadata"]["namespace"] = namespace  # the Role and its binding; the subject stays airflow's
            manifests.append(doc)

    def namespaced_credentials() -> None:
        stack.admin.fault("load_rbac_manifests", manifests=yaml.safe_dump_all(manifests))
        token = stack.admin.fault("issue_token", user=SCHEDULER_USER)
        scheduler_kubeconfig.write_text(kubeconfig_text(stack.sandbox_url, token))

    _, log = _restart_adopts_the_away_pods(stack, release_dir, before_restart=namespaced_credentials)
    assert "Listing worker pods across all namespaces is not allowed (403" in log, stack.log_tail("scheduler")
