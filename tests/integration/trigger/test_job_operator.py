"""KubernetesJobOperator.execute()/execute_complete() against the sandbox, with a minimal task context.

The context is a small stand-in for what the task runner passes (ti with xcom_push, run_id, dag); the
Kubernetes side is the real ``kubernetes`` client talking HTTP to the sandbox.
"""

from __future__ import annotations

import asyncio
import datetime
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog.testing
from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred

from airflow_jobwatch.compat import cncf_kubernetes_version
from airflow_jobwatch.operators import inworker
from airflow_jobwatch.operators.job import XCOM_RETURN_PATH, KubernetesJobOperator
from airflow_jobwatch.triggers.job import JobTrigger

from .conftest import NS, wait_until

pytestmark = pytest.mark.timeout(120)

#: A bytes repr (b'...') in a log, not a word that happens to end in "b" before a quote (a pod name).
BYTES_REPR = re.compile(r"(?<!\w)b['\"]")


@dataclass
class FakeTI:
    """The parts of a RuntimeTaskInstance the operator reads."""

    dag_id: str = "dag"
    task_id: str = "task"
    map_index: int = -1
    try_number: int = 1
    start_date: datetime.datetime = field(default_factory=lambda: datetime.datetime.now(datetime.UTC))
    xcoms: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


class FakeDag:
    dag_id = "dag"


def make_context(ti: FakeTI | None = None) -> dict[str, Any]:
    return {"ti": ti or FakeTI(), "run_id": "manual__2026-12-02T00:00:00", "dag": FakeDag()}


def make_operator(kubeconfig, **kwargs: Any) -> KubernetesJobOperator:
    kwargs.setdefault("task_id", "task")
    kwargs.setdefault("image", "busybox:1.36")
    kwargs.setdefault("namespace", NS)
    kwargs.setdefault("backoff_limit", 0)
    kwargs.setdefault("job_poll_interval", 5)
    return KubernetesJobOperator(kubernetes_conn_id=None, config_file=str(kubeconfig), **kwargs)


def _rendered(entries: list[dict[str, Any]]) -> str:
    """structlog's captured entries (the operator logs through structlog) as text."""
    lines = []
    for entry in entries:
        event, args = str(entry.get("event")), entry.get("positional_args")
        lines.append(event % tuple(args) if args else event)
    return "\n".join(lines)


def test_waits_in_worker_logs_keeps_job_deletes_pods(sandbox, kubeconfig):
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", "echo hello-from-the-job"],
        wait_until_job_complete=True,
        deferrable=False,
        get_logs=True,
    )
    context = make_context()
    with structlog.testing.capture_logs() as logs:
        op.execute(context)
    text = _rendered(logs)
    assert text.count("[base] hello-from-the-job") == 1, text  # streamed, and not read again at the end
    assert not BYTES_REPR.search(text), text  # decoded text, not a bytes repr
    xcoms = context["ti"].xcoms
    assert xcoms["job_namespace"] == NS
    name = xcoms["job_name"]
    assert xcoms["job"]["metadata"]["name"] == name
    assert xcoms["job"]["status"]["conditions"], xcoms["job"]["status"]  # the Job as it ended
    # on_finish_action=delete_pod (default): upstream's meaning, the Job's pods go, the Job stays
    wait_until_sync(lambda: not sandbox.objects("pods", NS), "the pods' deletion")
    assert sandbox.get_object("jobs", NS, name) is not None


@pytest.mark.parametrize("missed", ["every pod", "the second pod"])
def test_logs_of_pods_the_followers_missed_are_read_after_the_end(sandbox, kubeconfig, monkeypatch, missed):
    """The followers start on the pods the shared watch has cached. A pod whose events reach the watch
    after the Job's end was decided (its hold for the pods is 1 s; a loaded machine can lag more) is
    never followed; its log is read once the Job has ended, so the task log still has every line, once."""
    start_ready = inworker.LogFollower.start_ready
    followed: list[str] = []

    def blind(self, pods):
        if missed == "the second pod":  # follow the first pod cached, never another
            if not followed and pods:
                followed.append(pods[0]["metadata"]["name"])
            start_ready(self, [p for p in pods if p["metadata"]["name"] in followed])

    monkeypatch.setattr(inworker.LogFollower, "start_ready", blind)
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", "echo line-of-$HOSTNAME"],
        wait_until_job_complete=True,
        deferrable=False,
        get_logs=True,
        parallelism=2,
        completions=2,
    )
    context = make_context()
    with structlog.testing.capture_logs() as logs:
        op.execute(context)
    text = _rendered(logs)
    lines = re.findall(r"\[base\] line-of-(\S+)", text)
    assert len(lines) == 2 and len(set(lines)) == 2, text  # each pod's line, once


def test_failed_job_raises_with_reason(sandbox, kubeconfig):
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", "exit 4"],
        wait_until_job_complete=True,
        deferrable=False,
        get_logs=False,
    )
    with pytest.raises(AirflowException, match="BackoffLimitExceeded") as info:
        op.execute(make_context())
    assert "failed" in str(info.value)
    assert op.job is not None


def test_get_logs_is_best_effort(sandbox, kubeconfig):
    """The Job is TTL-deleted (with its pods) the moment it completes: its logs are gone by the time
    they are read, yet the task succeeds (the watch was open before the Job was created, so even a Job
    that is gone within milliseconds is seen completing)."""
    op = make_operator(
        kubeconfig,
        cmds=["true"],
        wait_until_job_complete=True,
        deferrable=False,
        get_logs=True,
        ttl_seconds_after_finished=0,
        on_finish_action="keep_pod",
    )
    op.execute(make_context())


def test_create_only_returns_at_once(sandbox, kubeconfig):
    op = make_operator(
        kubeconfig,
        cmds=["sleep", "30"],
        wait_until_job_complete=False,
        deferrable=False,
        labels={"team": "a", "task_id": "users-own-value"},
    )
    context = make_context()
    assert op.execute(context) is None
    job = sandbox.get_object("jobs", NS, context["ti"].xcoms["job_name"])
    assert job is not None
    # the Job's labels are exactly the user's (upstream's); this try's labels are on its pod template,
    # where upstream puts them too, so a retried worker can still find it
    # (plus what the API server itself adds: job-name, controller-uid)
    labels = job["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if "job-name" not in k and "controller-uid" not in k} == {
        "team": "a",
        "task_id": "users-own-value",
    }
    template_labels = job["spec"]["template"]["metadata"]["labels"]
    assert template_labels["try_number"] == "1"
    assert template_labels["task_id"] == "task"
    assert context["ti"].xcoms["job"]["metadata"]["uid"] == job["metadata"]["uid"]


@pytest.mark.sandbox(job_controller=False, kubelet=False)
def test_parallelism_zero_with_waiting_fails_before_creating(sandbox, kubeconfig):
    op = make_operator(kubeconfig, cmds=["true"], wait_until_job_complete=True, parallelism=0)
    with pytest.raises(AirflowException, match="parallelism cannot be less than 1"):
        op.execute(make_context())
    assert not sandbox.objects("jobs", NS)


@pytest.mark.sandbox(job_controller=False, kubelet=False)
def test_deferrable_without_waiting_warns_and_returns(sandbox, kubeconfig):
    op = make_operator(kubeconfig, cmds=["true"], deferrable=True, wait_until_job_complete=False)
    context = make_context()
    with structlog.testing.capture_logs() as logs:
        assert op.execute(context) is None  # no TaskDeferred
    assert "wait_until_job_complete=True" in _rendered(logs)
    assert sandbox.get_object("jobs", NS, context["ti"].xcoms["job_name"]) is not None


@pytest.mark.sandbox(job_controller=False, kubelet=False)
def test_invalid_spec_fails_with_the_servers_422_message(sandbox, kubeconfig):
    op = make_operator(kubeconfig, name="x-", random_name_suffix=False, cmds=["true"], deferrable=False)
    with pytest.raises(AirflowException, match="422") as info:
        op.execute(make_context())
    assert "job-x-" in str(info.value)
    assert "RFC 1123" in str(info.value) or "DNS" in str(info.value) or "Invalid" in str(info.value)


@pytest.mark.sandbox(job_controller=False, kubelet=False)
def test_deferrable_defers_with_deadline_and_uid(sandbox, kubeconfig):
    op = make_operator(
        kubeconfig,
        cmds=["true"],
        deferrable=True,
        wait_until_job_complete=True,
        execution_timeout=datetime.timedelta(minutes=10),
        fatal_waiting_reasons=["ErrImagePull"],
    )
    ti = FakeTI()
    with pytest.raises(TaskDeferred) as info:
        op.execute(make_context(ti))
    trigger = info.value.trigger
    assert isinstance(trigger, JobTrigger)
    assert info.value.method_name == "execute_complete"
    job = sandbox.get_object("jobs", NS, ti.xcoms["job_name"])
    assert trigger.job_uid == job["metadata"]["uid"]
    assert trigger.deadline == ti.start_date + datetime.timedelta(minutes=10)
    assert trigger.delete_on_kill is True
    assert trigger.fatal_waiting_reasons == ["ErrImagePull"]


def test_deferred_end_to_end_through_the_trigger(sandbox, kubeconfig):
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", "echo deferred-log"],
        deferrable=True,
        wait_until_job_complete=True,
        on_finish_action="keep_pod",
        get_logs=True,
    )
    context = make_context()
    with pytest.raises(TaskDeferred) as info:
        op.execute(context)
    classpath, kwargs = info.value.trigger.serialize()
    trigger = JobTrigger(**kwargs)  # what the triggerer does
    event = asyncio.run(trigger.wait())
    assert event["status"] == "success"
    with structlog.testing.capture_logs() as logs:
        assert op.execute_complete(context, event) is None
    assert "] [base] deferred-log" in _rendered(logs)
    assert sandbox.get_object("jobs", NS, context["ti"].xcoms["job_name"]) is not None  # kept
    [pod] = sandbox.objects("pods", NS)  # kept, and marked as upstream marks the pods it keeps
    assert pod["metadata"]["labels"]["already_checked"] == "True"


@pytest.mark.sandbox(kubelet=False)
def test_adopts_job_of_the_same_try_instead_of_409(sandbox, kubeconfig):
    first = make_operator(kubeconfig, name="fixed", random_name_suffix=False, cmds=["true"])
    first.execute(make_context())
    uid = sandbox.get_object("jobs", NS, "job-fixed")["metadata"]["uid"]
    # a retried worker of the same try, with the label search off: 409 -> same try -> adopt
    again = make_operator(
        kubeconfig, name="fixed", random_name_suffix=False, cmds=["true"], reattach_on_restart=False
    )
    again.execute(make_context())
    assert again.job.metadata.uid == uid
    # the label search (through the pods, which carry the try's labels) finds it too
    wait_until_sync(lambda: bool(sandbox.objects("pods", NS)), "the Job's pod")
    third = make_operator(kubeconfig, name="other-name", cmds=["true"])
    third.execute(make_context())
    assert third.job.metadata.uid == uid
    assert len(sandbox.objects("jobs", NS)) == 1


@pytest.mark.sandbox(job_controller=False, kubelet=False)
def test_name_taken_by_another_try_fails_clearly(sandbox, kubeconfig):
    make_operator(kubeconfig, name="taken", random_name_suffix=False, cmds=["true"]).execute(make_context())
    op = make_operator(kubeconfig, name="taken", random_name_suffix=False, cmds=["true"])
    with pytest.raises(AirflowException, match="already exists"):
        op.execute(make_context(FakeTI(try_number=2)))


def test_on_kill_deletes_job_foreground_by_default(sandbox, kubeconfig):
    op = make_operator(kubeconfig, cmds=["sleep", "30"], deferrable=False)
    context = make_context()
    op.execute(context)
    name = context["ti"].xcoms["job_name"]
    wait_until_sync(lambda: bool(sandbox.objects("pods", NS)), "the Job's pod")
    op.on_kill()
    job = sandbox.get_object("jobs", NS, name)
    assert job is None or job["metadata"].get("deletionTimestamp"), job
    # Foreground: the Job stays (with a deletionTimestamp) until its pods are gone, then goes itself.
    wait_until_sync(
        lambda: sandbox.get_object("jobs", NS, name) is None,
        "Job deletion",
        limit=45,
        state=lambda: (sandbox.get_object("jobs", NS, name), sandbox.objects("pods", NS)),
    )
    assert not sandbox.objects("pods", NS)


@pytest.mark.skipif(cncf_kubernetes_version() < (10, 15), reason="on_kill_action: cncf.kubernetes 10.15+")
def test_on_kill_orphan_keep_pod_deletes_job_keeps_pods(sandbox, kubeconfig):
    """Upstream always deletes the Job on kill; on_kill_action only says what happens to the pods."""
    op = make_operator(
        kubeconfig,
        cmds=["sleep", "30"],
        deferrable=False,
        on_kill_action="keep_pod",
        on_kill_propagation_policy="Orphan",
    )
    context = make_context()
    op.execute(context)
    wait_until_sync(lambda: bool(sandbox.objects("pods", NS)), "the Job's pod")
    op.on_kill()
    wait_until_sync(
        lambda: sandbox.get_object("jobs", NS, context["ti"].xcoms["job_name"]) is None, "deletion"
    )
    assert len(sandbox.objects("pods", NS)) == 1  # orphaned, kept


def test_on_kill_orphan_delete_pod_deletes_both(sandbox, kubeconfig):
    op = make_operator(
        kubeconfig, cmds=["sleep", "30"], on_kill_propagation_policy="Orphan", termination_grace_period=0
    )
    context = make_context()
    op.execute(context)
    wait_until_sync(lambda: bool(sandbox.objects("pods", NS)), "the Job's pod")
    op.on_kill()
    # The pods are being deleted. (They keep the Job controller's tracking finalizer here: the real
    # controller removes it from orphaned pods, the sandbox's does not yet, so "gone" is not awaited.)
    wait_until_sync(
        lambda: (
            sandbox.get_object("jobs", NS, context["ti"].xcoms["job_name"]) is None
            and all(p["metadata"].get("deletionTimestamp") for p in sandbox.objects("pods", NS))
        ),
        "the Job's and its pods' deletion",
        state=lambda: sandbox.objects("pods", NS),
    )


async def test_trigger_cancel_keeps_job_but_on_kill_deletes_it(sandbox, kubeconfig):
    """Triggerer restart / hand-over cancels run(): the Job must survive. A user's kill deletes it."""
    op = make_operator(kubeconfig, cmds=["sleep", "30"], deferrable=True, wait_until_job_complete=True)
    context = make_context()
    with pytest.raises(TaskDeferred) as info:
        await asyncio.to_thread(op.execute, context)
    name = context["ti"].xcoms["job_name"]
    trigger = JobTrigger(**info.value.trigger.serialize()[1])
    task = asyncio.create_task(trigger.wait())
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await trigger.cleanup()
    assert sandbox.get_object("jobs", NS, name) is not None
    await trigger.on_kill()
    await wait_until(lambda: sandbox.get_object("jobs", NS, name) is None, what="Job deletion")


def test_xcom_default_path_and_a_native_sidecar(sandbox, kubeconfig):
    op = make_operator(kubeconfig, cmds=["true"], do_xcom_push=True)
    job = op.build_job_request_obj(make_context())
    spec = job.spec.template.spec
    assert [c.name for c in spec.containers] == ["base"]  # no regular sidecar container to kill
    (sidecar,) = spec.init_containers
    assert (sidecar.name, sidecar.restart_policy) == ("airflow-xcom-sidecar", "Always")
    assert sidecar.command[-1] == XCOM_RETURN_PATH
    assert [m.mount_path for m in spec.containers[0].volume_mounts] == ["/airflow/xcom"]
    assert spec.containers[0].termination_message_path is None


def test_xcom_result_travels_as_termination_message(sandbox, kubeconfig, tmp_path):
    """The sandbox's kubelet runs containers on the host, so the path is a host path here."""
    path = tmp_path / "return.json"
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", f"echo '{{\"answer\": 42}}' > {path}"],
        wait_until_job_complete=True,
        deferrable=False,
        do_xcom_push=True,
        xcom_path=str(path),
    )
    assert op.execute(make_context()) == {"answer": 42}


def test_xcom_with_parallelism_above_completions(sandbox, kubeconfig, tmp_path):
    """Upstream hangs here (apache/airflow#64867): it waits for pods that never come."""
    path = tmp_path / "return.json"
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", f"echo '[1, 2]' > {path}"],
        wait_until_job_complete=True,
        deferrable=False,
        do_xcom_push=True,
        xcom_path=str(path),
        parallelism=3,
        completions=1,
    )
    value = op.execute(make_context())
    # The first pod to succeed completes the Job, and the controller deletes the others; one whose base
    # container had already exited 0 ends Succeeded too (its sidecar prints before it stops), and then
    # returns its result as well: one value, or one per succeeded pod.
    assert value == [1, 2] or (isinstance(value, list) and value and all(v == [1, 2] for v in value)), value


def wait_until_sync(predicate, what: str, limit: float = 20.0, state=None) -> None:
    import time

    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {limit} s waiting for {what}" + (f"; state: {state()}" if state else "")
            )
        time.sleep(0.05)


def test_xcom_of_4000_bytes_works(sandbox, kubeconfig, tmp_path):
    path = tmp_path / "return.json"
    value = "x" * 3990  # with its quotes and newline, just under the 4096-byte termination message
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", f"echo '\"{value}\"' > {path}"],
        wait_until_job_complete=True,
        do_xcom_push=True,
        xcom_path=str(path),
    )
    assert op.execute(make_context()) == value


def test_xcom_over_4096_bytes_fails_naming_the_limit_without_native_sidecars(sandbox, kubeconfig, tmp_path):
    sandbox.set_native_sidecars(False)  # the result is then the termination message
    path = tmp_path / "return.json"
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", f"echo '\"{'y' * 10240}\"' > {path}"],
        wait_until_job_complete=True,
        do_xcom_push=True,
        xcom_path=str(path),
    )
    with pytest.raises(AirflowException, match="4096 bytes") as info:
        op.execute(make_context())
    assert "object storage" in str(info.value)


@pytest.mark.sandbox(job_controller=False, kubelet=False)
def test_user_termination_message_path_with_xcom_is_refused_without_native_sidecars(sandbox, kubeconfig):
    """With native sidecars the base container's own terminationMessagePath is left alone; without,
    the result needs it, and the Job created first (with the sidecar) is deleted."""
    from kubernetes.client import models as k8s

    sandbox.set_native_sidecars(False)
    op = make_operator(
        kubeconfig,
        cmds=["true"],
        do_xcom_push=True,
        wait_until_job_complete=True,
        full_pod_spec=k8s.V1Pod(
            spec=k8s.V1PodSpec(
                containers=[k8s.V1Container(name="base", termination_message_path="/tmp/mine")]
            )
        ),
    )
    with pytest.raises(AirflowException, match="terminationMessagePath='/tmp/mine'") as info:
        op.execute(make_context())
    assert "4096" in str(info.value)
    assert not sandbox.objects("jobs", NS)  # the Job with the sidecar is gone, no other was created
