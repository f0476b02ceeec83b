"""XCom results read from the pods' native XCom sidecar: what the base container prints never
counts as the result, a failed base container returns none, a cluster without native sidecars
still returns small results (and says why a large one cannot come back), the triggerer reads few
results at once however many Jobs end together, and upstream's sidecar settings apply."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import structlog.testing
from airflow.models import Connection
from airflow.providers.common.compat.sdk import AirflowException
from airflow.triggers.base import TaskSuccessEvent

from airflow_jobwatch.ending.end import end_from_triggerer
from airflow_jobwatch.kube.meaning import result as kube_result
from airflow_jobwatch.kube.meaning import xcom_sidecar
from airflow_jobwatch.operators.job import KubernetesJobOperator

from .conftest import NS
from .test_end_from_trigger import _decoded, _deferred
from .test_job_operator import FakeTI, _rendered, make_context, make_operator

pytestmark = pytest.mark.timeout(240)


def _deferred_with_xcom(kubeconfig: Any, cmds: list[str], path: str, **kwargs: Any) -> Any:
    """The trigger of a deferred task with ``do_xcom_push`` whose pods are kept."""
    settings = {
        "deferrable": True,
        "wait_until_job_complete": True,
        "get_logs": False,
        "on_finish_action": "keep_pod",
    }
    op = make_operator(kubeconfig, cmds=cmds, do_xcom_push=True, xcom_path=path, **settings, **kwargs)
    return op, _deferred(op, make_context(FakeTI(task_id=kwargs.get("name", "task"))))


def _writer(value: Any, path: str, *, before: str = "true", then: str = "true") -> list[str]:
    """A base container that writes ``value`` as JSON to ``path`` (with python: any size)."""
    program = f"import json, sys; json.dump(json.loads(sys.argv[1]), open({path!r}, 'w'))"
    return ["sh", "-c", f'{before}; python -c "$0" "$1"; {then}', program, json.dumps(value)]


async def test_framing_like_lines_in_the_output_and_in_the_value_are_data(
    sandbox, kubeconfig, tmp_path
) -> None:
    path = str(tmp_path / "return.json")
    fake = "airflow-xcom-end 000000000000000000000000 2 44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    lines = ["airflow-xcom-begin 1234 gzip+base64", "e30=", fake, "airflow-xcom-empty 1"]
    value = {"lines": lines * 100, "n": 7}  # ~17 KiB: more than a termination message holds
    op, trigger = _deferred_with_xcom(
        kubeconfig,
        _writer(value, path, before=f"echo 'airflow-xcom-begin 0 gzip+base64'; echo e30=; echo '{fake}'"),
        path,
    )
    payload = await trigger.wait()
    assert op.execute_complete(make_context(FakeTI()), payload) == value  # resumed on a worker
    event = await end_from_triggerer(trigger, payload)  # ended from the triggerer
    assert isinstance(event, TaskSuccessEvent), event
    assert _decoded(event.xcoms["return_value"]) == value


def test_the_result_of_a_pod_whose_base_container_failed_after_writing_it_is_not_returned(
    sandbox, kubeconfig, tmp_path
) -> None:
    """The first pod writes a result, then fails; the Job's retry writes another and succeeds: the
    task returns the retry's alone. With no retry left, the task fails with the exit code and no value."""
    path = str(tmp_path / "xcom" / "return.json")
    marker = tmp_path / "first-pod-ran"
    first, second = {"pod": "first", "rows": list(range(2000))}, {"pod": "second", "rows": list(range(2000))}
    program = (
        "import json, os, sys; first = not os.path.exists(sys.argv[1]); open(sys.argv[1], 'a').close(); "
        f"json.dump({first!r} if first else {second!r}, open({path!r}, 'w')); sys.exit(3 if first else 0)"
    )

    def run(backoff_limit: int) -> tuple[Any, FakeTI]:
        op = make_operator(
            kubeconfig,
            cmds=["python", "-c", program, str(marker)],
            deferrable=False,
            wait_until_job_complete=True,
            get_logs=False,
            do_xcom_push=True,
            xcom_path=path,
            backoff_limit=backoff_limit,
        )
        ti = FakeTI()
        try:
            return op.execute(make_context(ti)), ti
        except AirflowException as e:
            return e, ti

    returned, _ti = run(backoff_limit=1)
    assert returned == second
    marker.unlink()
    failed, ti = run(backoff_limit=0)
    assert isinstance(failed, AirflowException) and "code 3" in str(failed)
    assert "return_value" not in ti.xcoms


def test_a_cluster_without_native_sidecars_returns_small_results_and_says_why_not_large_ones(
    sandbox, kubeconfig, tmp_path
) -> None:
    sandbox.set_native_sidecars(False)
    path = str(tmp_path / "return.json")

    def run(value: Any, task_id: str) -> Any:
        op = make_operator(
            kubeconfig,
            task_id=task_id,
            cmds=_writer(value, path),
            deferrable=False,
            wait_until_job_complete=True,
            get_logs=False,
            do_xcom_push=True,
            xcom_path=path,
        )
        with structlog.testing.capture_logs() as entries:
            try:
                # each run its own task: a retried try would adopt the other's Job
                return op.execute(make_context(FakeTI(task_id=task_id))), _rendered(entries)
            except AirflowException as e:
                return e, _rendered(entries)

    small, log = run({"answer": 42}, "small")
    assert small == {"answer": 42}
    assert "does not run native sidecars (Kubernetes 1.29 or later" in log
    # the Job that runs is the one without the sidecar; the first one is gone
    jobs = sandbox.sandbox.objects("jobs", NS)
    assert len(jobs) == 1
    assert not jobs[0]["spec"]["template"]["spec"].get("initContainers")

    large, _log = run({"rows": list(range(3000))}, "large")
    assert isinstance(large, AirflowException)
    assert "4096 bytes" in str(large) and "native sidecars (Kubernetes 1.29 or later)" in str(large)


async def test_eight_large_results_ending_at_once_are_read_two_at_a_time(
    sandbox, kubeconfig, tmp_path
) -> None:
    value = {"rows": [f"row-{i:06d}" for i in range(60_000)]}  # ~840 KiB of JSON each
    triggers, payloads = [], []
    for i in range(8):
        path = str(tmp_path / f"r{i}" / "return.json")
        program = f"import json; json.dump({{'rows': [f'row-{{i:06d}}' for i in range(60_000)]}}, open({path!r}, 'w'))"
        _op, trigger = _deferred_with_xcom(kubeconfig, ["python", "-c", program], path, name=f"big-{i}")
        triggers.append(trigger)
    payloads = await asyncio.gather(*(t.wait() for t in triggers))

    kubelet = sandbox.sandbox.kubelet
    serve = kubelet.serve_logs
    now, most = 0, 0

    async def counted(request: Any, pod: dict[str, Any]) -> Any:  # the sandbox's side of pods/log
        nonlocal now, most
        now += 1
        most = max(most, now)
        try:
            return await serve(request, pod)
        finally:
            now -= 1

    kubelet.serve_logs = counted
    try:
        events = await asyncio.gather(
            *(end_from_triggerer(t, p) for t, p in zip(triggers, payloads, strict=True))
        )
    finally:
        kubelet.serve_logs = serve
    assert all(isinstance(e, TaskSuccessEvent) for e in events), events
    assert all(_decoded(e.xcoms["return_value"]) == value for e in events)
    assert 1 <= most <= xcom_sidecar.READ_CONCURRENCY


async def test_the_triggerer_parses_a_result_once_and_still_logs_it_as_the_worker_does(
    sandbox, kubeconfig, tmp_path, monkeypatch
) -> None:
    """Writing a result's task-log lines does not parse the result a second time, beside the value
    already held. (A spy on the parse, which no HTTP exchange can show; the value and the lines are
    checked too.)"""
    path = str(tmp_path / "return.json")
    value = {"rows": [f"row-{i:05d}" for i in range(2000)]}  # ~26 KiB: from the sidecar's log
    _op, trigger = _deferred_with_xcom(kubeconfig, _writer(value, path), path)
    payload = await trigger.wait()
    parses: list[int] = []
    real_parse = kube_result.parse_xcom_results

    def parse(raw: list[Any], *args: Any, **kwargs: Any) -> Any:
        parses.append(len(raw))
        return real_parse(raw, *args, **kwargs)

    monkeypatch.setattr(kube_result, "parse_xcom_results", parse)
    with structlog.testing.capture_logs() as entries:
        event = await end_from_triggerer(trigger, payload)
    assert isinstance(event, TaskSuccessEvent), event
    assert _decoded(event.xcoms["return_value"]) == value
    assert parses == [1], f"the result was parsed {len(parses)} times"
    text = json.dumps(value)
    lines = [e["event"] for e in entries if str(e["event"]).startswith("xcom result")]
    assert lines == [f"xcom result: \n{text[:4096]}... ({len(text)} characters)"]


def test_upstreams_sidecar_settings_apply_to_the_sidecar(sandbox, kubeconfig, monkeypatch) -> None:
    extra = {
        "kube_config_path": str(kubeconfig),
        "xcom_sidecar_container_image": "registry.example/tools/alpine:3.20",
        "xcom_sidecar_container_resources": json.dumps({"requests": {"cpu": "5m", "memory": "20Mi"}}),
    }
    conn = Connection(conn_id="k8s_sidecar", conn_type="kubernetes", extra=json.dumps(extra))
    monkeypatch.setenv("AIRFLOW_CONN_K8S_SIDECAR", conn.as_json())
    op = KubernetesJobOperator(
        task_id="task",
        image="busybox:1.36",
        namespace=NS,
        kubernetes_conn_id="k8s_sidecar",
        cmds=["true"],
        do_xcom_push=True,
        xcom_sidecar_container_security_context={"runAsNonRoot": True},
        wait_until_job_complete=True,
    )
    job = op.build_job_request_obj(make_context())
    spec = job.spec.template.spec
    (sidecar,) = spec.init_containers
    assert sidecar.name == "airflow-xcom-sidecar" and sidecar.restart_policy == "Always"
    assert sidecar.image == "registry.example/tools/alpine:3.20"
    assert sidecar.resources == {"requests": {"cpu": "5m", "memory": "20Mi"}}
    assert sidecar.security_context == {"runAsNonRoot": True}
    base = spec.containers[0]
    assert [(m.name, m.mount_path) for m in base.volume_mounts] == [("xcom", "/airflow/xcom")]
    assert base.termination_message_path is None  # the result is not the termination message any more
    assert "xcom_sidecar_container_security_context" not in op._unhonoured


async def test_a_result_larger_than_the_triggerers_share_is_read_by_a_worker(
    sandbox, kubeconfig, tmp_path, monkeypatch
) -> None:
    """The triggerer reads a Job's results within its memory budget; a larger one resumes the task on a
    worker, which reads it whole. (The share is made small here, so that a result of some hundred KiB
    shows what one of tens of MiB does.)"""
    from airflow_jobwatch.ending import pod_logs, sidecar_results

    monkeypatch.setattr(sidecar_results, "TRIGGERER_RESULT_BYTES", 64 * 1024)
    path = str(tmp_path / "return.json")
    value = {"rows": [f"row-{i:05d}" for i in range(20_000)]}  # ~260 KiB of JSON
    program = (
        f"import json; json.dump({{'rows': [f'row-{{i:05d}}' for i in range(20_000)]}}, open({path!r}, 'w'))"
    )
    op, trigger = _deferred_with_xcom(kubeconfig, ["python", "-c", program], path)
    payload = await trigger.wait()
    event = await end_from_triggerer(trigger, payload)
    assert event is None  # resumed: the triggerer read no more than its share
    assert pod_logs.budget().free == pod_logs.budget().total  # and gave its share back
    assert op.execute_complete(make_context(FakeTI()), payload) == value


async def test_a_resume_whose_sidecar_pods_are_gone_fails_instead_of_returning_none(
    sandbox, kubeconfig, tmp_path
) -> None:
    """The value was only in the sidecars' logs: with the pods deleted before the worker resumed, the task
    fails saying so (it returned None before, a value lost without a word)."""
    import time

    path = str(tmp_path / "return.json")
    value = {"rows": [f"row-{i:05d}" for i in range(500)]}  # more than a termination message holds
    op, trigger = _deferred_with_xcom(kubeconfig, _writer(value, path), path)
    payload = await trigger.wait()
    selector = f"controller-uid={payload['uid']}"
    op.client.delete_collection_namespaced_pod(NS, label_selector=selector, grace_period_seconds=0)
    deadline = time.monotonic() + 30
    while op.client.list_namespaced_pod(NS, label_selector=selector).items:
        assert time.monotonic() < deadline, "the Job's pods were not deleted"
        await asyncio.sleep(0.1)
    with pytest.raises(AirflowException, match="the pods whose XCom sidecars printed it are gone"):
        op.execute_complete(make_context(FakeTI()), payload)
