"""A deferred get_logs=True KubernetesJobOperator ends from the triggerer with its pods' logs: the same
lines, in the same order, as a worker writes on resume, the same XComs and failure message; at most
``[jobwatch] trigger_log_max_bytes`` of pod log lines, the tail, with a note of what was left out."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import pytest
import structlog.testing
from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred
from airflow.triggers.base import TaskFailedEvent, TaskSuccessEvent

from airflow_jobwatch.ending import pod_logs
from airflow_jobwatch.ending.end import end_from_triggerer
from airflow_jobwatch.operators.job import KubernetesJobOperator

from .test_job_operator import FakeTI, _rendered, make_context, make_operator

pytestmark = pytest.mark.timeout(120)

_LINE = re.compile(r"^\[(?P<pod>[^\]]+)\] \[(?P<container>[^\]]+)\] (?P<text>.*)$")


def _deferred(op: KubernetesJobOperator) -> Any:
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(make_context())
    return deferred.value.trigger


def _task_lines(entries: list[dict[str, Any]]) -> list[str]:
    """What the task log shows of the ending: info, warning and error lines (not debug)."""
    return _rendered([e for e in entries if e.get("log_level") in ("info", "warning", "error")]).splitlines()


def _by_container(lines: list[str]) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for line in lines:
        m = _LINE.match(line)
        if m:
            out[(m["pod"], m["container"])].append(m["text"])
    return out


def _two_pods_with_init(*, fails: bool) -> dict[str, Any]:
    """Two pods, each with an init container: side by side, or (failing) one after the other, the
    second a retry of the first (``backoff_limit=1``)."""
    from kubernetes.client import models as k8s

    return dict(
        init_containers=[
            k8s.V1Container(
                name="prepare",
                image="busybox:1.36",
                command=["sh", "-c", "for i in $(seq 1 50); do echo init-$i; done"],
            )
        ],
        init_container_logs=True,
        parallelism=1 if fails else 2,
        completions=1 if fails else 2,
        backoff_limit=1 if fails else 0,
        deferrable=True,
        wait_until_job_complete=True,
        get_logs=True,
        on_finish_action="keep_pod",  # the worker reads the same pods after the trigger
        retries=0,
    )


@pytest.mark.parametrize("fails", [False, True], ids=["success", "failure"])
async def test_two_pods_init_and_main_logs_end_from_the_triggerer(
    sandbox, kubeconfig, tmp_path, fails
) -> None:
    path = tmp_path / "return.json"
    main = "for i in $(seq 1 200); do echo main-$i; done; " + (
        "exit 3" if fails else f"echo '{{\"answer\": 42}}' > {path}"
    )
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", main],
        do_xcom_push=True,
        xcom_path=str(path),
        **_two_pods_with_init(fails=fails),
    )
    trigger = _deferred(op)
    assert trigger.end_task is not None and trigger.end_task["logs"] is not None  # it resumed before
    payload = await trigger.wait()

    with structlog.testing.capture_logs() as trigger_entries:
        event = await end_from_triggerer(trigger, payload)
    resumed = FakeTI()
    with structlog.testing.capture_logs() as worker_entries:
        if fails:
            with pytest.raises(AirflowException) as raised:
                op.execute_complete(make_context(resumed), payload)
        else:
            returned = op.execute_complete(make_context(resumed), payload)

    trigger_lines, worker_lines = _task_lines(trigger_entries), _task_lines(worker_entries)
    by_container = _by_container(trigger_lines)
    pods = sorted({pod for pod, _ in by_container})
    assert len(pods) == 2, sorted(by_container)
    for pod in pods:  # each container's lines once, in order
        assert by_container[(pod, "prepare")] == [f"init-{i}" for i in range(1, 51)]
        assert by_container[(pod, "base")] == [f"main-{i}" for i in range(1, 201)]
    # pods oldest first, init container before the main one: the worker's order, line for line
    pod_lines = [line for line in trigger_lines if _LINE.match(line)]
    assert pod_lines == [line for line in worker_lines if _LINE.match(line)]
    assert [line for line in trigger_lines if line.startswith(("Job ", "  pod "))] == [
        line for line in worker_lines if line.startswith(("Job ", "  pod "))
    ]
    assert trigger_lines.index(pod_lines[0]) > max(
        i for i, x in enumerate(trigger_lines) if x.startswith("Job ")
    )
    if fails:
        assert isinstance(event, TaskFailedEvent), event
        assert trigger_lines[-1] == f"Task failed with exception: {raised.value}"
        assert "exited with code 3" in str(raised.value) and "BackoffLimitExceeded" in str(raised.value)
    else:
        assert isinstance(event, TaskSuccessEvent), event
        assert event.xcoms["return_value"] == returned
        assert event.xcoms["job"]["metadata"]["name"] == resumed.xcoms["job"]["metadata"]["name"]


async def _ended_by_the_triggerer(
    kubeconfig: Any, monkeypatch: pytest.MonkeyPatch, *, max_bytes: str, script: str, **options: Any
) -> tuple[dict[str, Any], list[str]]:
    """Runs ``sh -c script`` in a deferred get_logs=True operator under ``[jobwatch] trigger_log_max_bytes
    = max_bytes`` and ends it from the triggerer, which must succeed: the event's payload and the task
    log's lines of the ending."""
    monkeypatch.setenv("AIRFLOW__JOBWATCH__TRIGGER_LOG_MAX_BYTES", max_bytes)
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", script],
        deferrable=True,
        wait_until_job_complete=True,
        get_logs=True,
        **options,
    )
    trigger = _deferred(op)
    payload = await trigger.wait()
    with structlog.testing.capture_logs() as entries:
        event = await end_from_triggerer(trigger, payload)
    assert isinstance(event, TaskSuccessEvent), event
    return payload, _task_lines(entries)


@pytest.mark.parametrize("action", ["keep_pod", "delete_pod"])
async def test_a_log_past_the_bound_leaves_its_tail_and_a_note(
    sandbox, kubeconfig, monkeypatch, action: str
) -> None:
    payload, lines = await _ended_by_the_triggerer(
        kubeconfig,
        monkeypatch,
        max_bytes="4096",
        # 3,000 lines of 11 bytes (newline included): 33,000 bytes, past the 4,096 kept
        script="for i in $(seq 1 3000); do printf 'line-%05d\\n' $i; done",
        on_finish_action=action,
    )
    kept = [m["text"] for line in lines if (m := _LINE.match(line)) and m["text"].startswith("line-")]
    assert kept == [f"line-{i:05d}" for i in range(3001 - len(kept), 3001)]  # the tail, whole lines
    pod = payload["pods"][0]["name"]
    # each line costs its 11 bytes and its log record's: the envelope, and "[pod] [base] "
    cost = 11 + pod_logs.RECORD_BYTES + len(f"[{pod}] [base] ")
    assert cost * len(kept) <= 4096 - pod_logs.SEGMENT_BYTES < cost * (len(kept) + 1)
    left_out = 3000 - len(kept)
    notes = [line for line in lines if "left out" in line]
    assert len(notes) == 1, notes
    assert f"[{pod}] [base] ... {11 * left_out} bytes ({left_out} lines) of this log left out" in notes[0]
    assert f"each line counted with its {pod_logs.RECORD_BYTES}-byte log record" in notes[0]
    assert "[jobwatch] trigger_log_max_bytes" in notes[0]
    if action == "keep_pod":
        assert f"the full log is in pod {pod}, which is kept" in notes[0]
    else:
        assert "on_finish_action='keep_pod' keeps it with its full log" in notes[0]
    assert lines.index(notes[0]) < min(i for i, x in enumerate(lines) if x.endswith("line-02999"))


async def test_a_bad_bound_is_a_warning_and_the_default_applies(sandbox, kubeconfig, monkeypatch) -> None:
    _, lines = await _ended_by_the_triggerer(
        kubeconfig, monkeypatch, max_bytes="12", script="echo one; echo two"
    )
    assert (
        "[jobwatch] trigger_log_max_bytes = '12' must be a whole number of bytes from 1024 to 16777216; "
        "using the default 1048576"
    ) in lines
    assert [m["text"] for line in lines if (m := _LINE.match(line))] == ["one", "two"]
