"""Table-driven tests of kube/meaning/states.py on objects recorded from a real API server (see fixtures/README.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_jobwatch.kube.meaning.states import (
    DEFAULT_FATAL_WAITING_REASONS,
    Disruption,
    ObjectState,
    classify_job,
    classify_pod,
    pod_disruption,
    pod_summary,
)

FIXTURES = Path(__file__).parent / "fixtures"


def load(kind: str, name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / kind / f"{name}.json").read_text())


def pod(name: str) -> dict[str, Any]:
    return load("pods", name)


def job(name: str) -> dict[str, Any]:
    return load("jobs", name)


# --------------------------------------------------------------------------------------------------
# Pods: (fixture, deleted, phase, reason, exit_code, substrings the message must contain)

POD_CASES = [
    ("pending-new", False, "pending", None, None, ["bad-fac2-dxbmm", "pending"]),
    ("unschedulable", False, "pending", "Unschedulable", None, ["0/3 nodes are available"]),
    ("container-creating", False, "pending", "ContainerCreating", None, ["'main' is waiting"]),
    ("running", False, "running", None, None, ["ok-fac2-4glwp", "running"]),
    ("running-being-deleted", False, "running", None, None, ["deletion in progress"]),
    ("unknown-node-lost", False, "running", "NodeLost", None, ["Unknown"]),
    # restartPolicy OnFailure: crash looping is not (by default) fatal; the Job's backoffLimit decides
    (
        "crash-loop-backoff",
        False,
        "running",
        "CrashLoopBackOff",
        None,
        ["running, but container 'main' is waiting: CrashLoopBackOff", "exited with code 4: config key"],
    ),
    ("succeeded", False, "succeeded", "Completed", 0, ["succeeded"]),
    ("failed-exit-3", False, "failed", "Error", 3, ["container 'main' exited with code 3"]),
    ("failed-exit-3-raw", False, "failed", "Error", 3, ["container 'main' exited with code 3"]),
    (
        "failed-with-termination-message",
        False,
        "failed",
        "Error",
        3,
        ["container 'base' exited with code 3: cannot connect to warehouse: connection refused"],
    ),
    ("oom-killed", False, "failed", "OOMKilled", 137, ["exited with code 137 (OOMKilled)", "memory limit"]),
    ("evicted", False, "failed", "Evicted", 137, ["The node was low on resource: memory", "evicted"]),
    ("deadline-exceeded", False, "failed", "DeadlineExceeded", 143, ["longer than the specified deadline"]),
    (
        "init-container-failed",
        False,
        "failed",
        "Error",
        2,
        ["init container 'migrate' exited with code 2: migration 0042 failed"],
    ),
    # the sidecar's 143 is a consequence of the main container ending, never the cause
    ("failed-with-sidecar", False, "failed", "Error", 1, ["container 'main' exited with code 1: Traceback"]),
    (
        "preempted",
        False,
        "failed",
        "PreemptionByScheduler",
        137,
        [
            "(PreemptionByScheduler): preempted by the scheduler on node spot-pool-b7",
            "default-scheduler: preempting to accommodate a higher priority pod",
            "exited with code 137",
            "priorityClassName",
        ],
    ),
    (
        "start-error",
        False,
        "failed",
        "StartError",
        128,
        ["exited with code 128 (StartError)", 'exec: "pyhton": executable file not found', "check command"],
    ),
    # fail-fast on fatal waiting reasons
    ("err-image-pull", False, "failed", "ErrImagePull", None, ["busybox:does-not-exist: not found", "image"]),
    ("image-pull-backoff", False, "failed", "ImagePullBackOff", None, ["Back-off pulling image"]),
    ("invalid-image-name", False, "failed", "InvalidImageName", None, ["invalid reference format"]),
    (
        "create-container-config-error",
        False,
        "failed",
        "CreateContainerConfigError",
        None,
        ['secret "db-credentials" not found'],
    ),
    # the kubelet's own registry throttling heals by itself
    ("err-image-pull-qps", False, "pending", "ErrImagePull", None, ["pull QPS exceeded"]),
    # deleted=True: the last state we will ever see
    ("pending-new", True, "failed", "Deleted", None, ["was deleted while pending"]),
    ("running", True, "failed", "Deleted", None, ["was deleted while running"]),
    ("running-being-deleted", True, "failed", "Deleted", None, ["deleted"]),
    # deleted after its node stopped reporting: the node loss is named, not a bare deletion
    ("unknown-node-lost", True, "failed", "NodeLost", None, ["deleted while running: lost: node fake-node"]),
    ("crash-loop-backoff", True, "failed", "Deleted", 4, ["exited with code 4: config key 'sink' missing"]),
    ("succeeded", True, "succeeded", "Completed", 0, ["succeeded"]),
    ("failed-exit-3", True, "failed", "Error", 3, ["exited with code 3"]),
    ("evicted", True, "failed", "Evicted", 137, ["Evicted"]),
    ("err-image-pull", True, "failed", "ErrImagePull", None, ["not found"]),
    # disruptions: the failure names what the cluster did, in the user's words
    (
        "evicted-with-condition",
        False,
        "failed",
        "Evicted",
        137,
        ["evicted on node spot-pool-b7: the node was low on memory"],
    ),
    ("node-shutdown", False, "failed", "NodeShutdown", 137, ["stopped because node spot-pool-b7 shut down"]),
    ("node-shutdown-rejected", False, "failed", "NodeShutdown", None, ["shut down", "rejected"]),
    ("kubelet-preempting", False, "failed", "Preempting", 137, ["preempted by the kubelet", "critical pod"]),
    ("podgc-orphan", False, "failed", "DeletionByPodGC", None, ["pod garbage collector", "no longer exists"]),
    ("preempted-pending", False, "failed", "PreemptionByScheduler", 137, ["preempted by the scheduler"]),
    # the condition comes before the stop: the pod is still live until the DELETED event
    ("eviction-api-running", False, "running", None, None, ["deletion in progress"]),
    (
        "eviction-api-running",
        True,
        "failed",
        "EvictionByEvictionAPI",
        None,
        ["was deleted while running: evicted through the Eviction API", "on node fake-node"],
    ),
    ("eviction-api-pending", True, "failed", "EvictionByEvictionAPI", None, ["deleted while pending"]),
    (
        "taint-manager-deleting",
        True,
        "failed",
        "DeletionByTaintManager",
        None,
        ["NoExecute taint", "on node spot-pool-b7"],
    ),
]


@pytest.mark.parametrize(
    ("fixture", "deleted", "phase", "reason", "exit_code", "in_message"),
    POD_CASES,
    ids=[f"{case[0]}{'-deleted' if case[1] else ''}" for case in POD_CASES],
)
def test_classify_pod(
    fixture: str, deleted: bool, phase: str, reason: str | None, exit_code: int | None, in_message: list[str]
) -> None:
    state = classify_pod(pod(fixture), deleted=deleted)
    assert (state.phase, state.reason, state.exit_code) == (phase, reason, exit_code), state.message
    assert state.terminal is (phase in ("succeeded", "failed"))
    for text in in_message:
        assert text in state.message


def test_fatal_waiting_reasons_are_configurable() -> None:
    creating = pod("container-creating")
    assert not classify_pod(creating).terminal
    state = classify_pod(creating, fatal_waiting_reasons={"ContainerCreating"})
    assert (state.phase, state.reason) == ("failed", "ContainerCreating")
    # and an empty set turns fail-fast off
    assert classify_pod(pod("err-image-pull"), fatal_waiting_reasons=()).phase == "pending"


def test_only_a_pending_pod_fails_fast() -> None:
    """As upstream's executor, fatal waiting reasons are read on Pending pods only.

    A Running pod's task has started; a restarting sidecar (restartable init container) in
    ImagePullBackOff, or a main container in CrashLoopBackOff, does not end it.
    """
    sidecar = pod("running-sidecar-image-pull-backoff")
    state = classify_pod(sidecar)
    assert (state.phase, state.terminal, state.reason) == ("running", False, "ImagePullBackOff"), (
        state.message
    )
    assert "sidecar container 'proxy' is waiting: ImagePullBackOff" in state.message
    crash = pod("crash-loop-backoff")
    assert classify_pod(crash, fatal_waiting_reasons={"CrashLoopBackOff"}).phase == "running"
    # The same sidecar in a pod that is still Pending does fail fast.
    pending = copy.deepcopy(sidecar)
    pending["status"]["phase"] = "Pending"
    assert (classify_pod(pending).phase, classify_pod(pending).reason) == ("failed", "ImagePullBackOff")
    # A Job whose pod runs with that sidecar keeps running too (the trigger reads the same rule).
    assert classify_job(job("started-active"), [sidecar]).phase == "running"


def test_fatal_waiting_reasons_as_a_string_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="split a comma-separated setting"):
        classify_pod(pod("err-image-pull"), fatal_waiting_reasons="ErrImagePull,ImagePullBackOff")
    with pytest.raises(TypeError, match="collection of reason names"):
        classify_job(job("started-active"), fatal_waiting_reasons="ErrImagePull")


def test_default_fatal_waiting_reasons() -> None:
    assert DEFAULT_FATAL_WAITING_REASONS == {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "ImageInspectError",
    }


def test_fatal_waiting_init_container() -> None:
    obj = pod("init-container-failed")
    obj["status"]["phase"] = "Pending"
    obj["status"]["initContainerStatuses"][0]["state"] = {
        "waiting": {"reason": "ErrImagePull", "message": 'pull access denied for "private/migrate"'}
    }
    state = classify_pod(obj)
    assert (state.phase, state.reason) == ("failed", "ErrImagePull")
    assert "init container 'migrate' cannot start" in state.message


def test_pod_with_no_status_is_pending() -> None:
    obj = pod("pending-new")
    del obj["status"]
    state = classify_pod(obj)
    assert (state.phase, state.terminal) == ("pending", False)


def test_long_termination_message_keeps_its_tail() -> None:
    obj = pod("failed-with-termination-message")
    obj["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = "x" * 5000 + "THE REAL ERROR"
    state = classify_pod(obj)
    assert "THE REAL ERROR" in state.message
    assert len(state.message) < 1500


def test_pod_summary() -> None:
    assert pod_summary(pod("failed-with-termination-message")) == {
        "name": "etl-base-6g7hd",
        "phase": "failed",
        "exit_code": 3,
        "reason": "Error",
    }
    assert pod_summary(pod("succeeded")) == {
        "name": "ok-fac2-4glwp",
        "phase": "succeeded",
        "exit_code": 0,
        "reason": "Completed",
    }
    assert pod_summary(pod("running"), deleted=True)["reason"] == "Deleted"
    json.dumps(pod_summary(pod("err-image-pull")))


# --------------------------------------------------------------------------------------------------
# Jobs: (fixture, pod fixtures, deleted, phase, reason, exit_code, substrings the message must contain)

JOB_CASES = [
    ("new-no-status", None, False, "pending", None, None, ["has not started"]),
    ("new-empty-status", None, False, "pending", None, None, ["has not started"]),
    ("started-active", None, False, "running", None, None, ["active 1"]),
    ("started-active", ["running"], False, "running", None, None, ["running"]),
    # a pod Succeeded while the Job still counts it active is not success (yet)
    ("active-while-pod-succeeded", ["succeeded"], False, "running", None, None, ["running"]),
    (
        "success-criteria-met",
        None,
        False,
        "succeeded",
        "CompletionsReached",
        None,
        ["Reached expected number"],
    ),
    ("complete", None, False, "succeeded", "CompletionsReached", None, ["succeeded"]),
    ("complete", ["succeeded"], False, "succeeded", "CompletionsReached", None, ["succeeded"]),
    (
        "parallelism-gt-completions-success",
        ["succeeded", "running"],
        False,
        "succeeded",
        "CompletionsReached",
        None,
        ["succeeded"],
    ),
    # status.failed > 0 is not a failed Job while backoffLimit allows a retry
    ("one-pod-failed-counted", ["failed-exit-3"], False, "running", None, None, ["failed 1"]),
    ("retrying-after-failure", ["failed-exit-3", "pending-new"], False, "pending", None, None, ["pending"]),
    ("failure-target", None, False, "failed", "BackoffLimitExceeded", None, ["backoff limit"]),
    ("failed-backoff-limit", None, False, "failed", "BackoffLimitExceeded", None, ["backoff limit"]),
    (
        "failed-backoff-limit",
        ["failed-exit-3", "failed-exit-3-second-attempt"],
        False,
        "failed",
        "BackoffLimitExceeded",
        3,
        ["pod 'default/bad-fac2-vnw8h': container 'main' exited with code 3"],
    ),
    ("deadline-exceeded", None, False, "failed", "DeadlineExceeded", None, ["activeDeadlineSeconds"]),
    # a failure with no reason is still a failure
    ("failed-without-reason", None, False, "failed", "Failed", None, ["failed"]),
    # "False" and "Unknown" conditions decide nothing
    ("conditions-not-true", None, False, "running", None, None, ["running"]),
    ("suspended", None, False, "suspended", "JobSuspended", None, ["spec.suspend"]),
    ("suspend-requested", None, False, "suspended", "Suspended", None, ["suspended"]),
    ("resumed", None, False, "running", None, None, ["running"]),
    ("foreground-deleting", None, False, "running", None, None, ["deletion in progress"]),
    ("complete-being-deleted", None, False, "succeeded", "CompletionsReached", None, ["succeeded"]),
    # fail-fast: a pod stuck on a fatal waiting reason fails a Job that is not terminal
    (
        "retrying-after-failure",
        ["failed-exit-3", "err-image-pull"],
        False,
        "failed",
        "ErrImagePull",
        None,
        ["pod 'default/bad-image-x7k2p'", "cannot start: ErrImagePull"],
    ),
    ("retrying-after-failure", ["err-image-pull-qps"], False, "pending", "ErrImagePull", None, ["pull QPS"]),
    # deleted=True
    ("foreground-deleting", None, True, "failed", "Deleted", None, ["was deleted while running"]),
    ("new-no-status", None, True, "failed", "Deleted", None, ["was deleted while pending"]),
    ("suspended", None, True, "failed", "Deleted", None, ["was deleted while suspended"]),
    ("complete", None, True, "succeeded", "CompletionsReached", None, ["succeeded"]),
    ("failed-backoff-limit", None, True, "failed", "BackoffLimitExceeded", None, ["backoff limit"]),
]


@pytest.mark.parametrize(
    ("fixture", "pods", "deleted", "phase", "reason", "exit_code", "in_message"),
    JOB_CASES,
    ids=[f"{c[0]}{'+' + '+'.join(c[1]) if c[1] else ''}{'-deleted' if c[2] else ''}" for c in JOB_CASES],
)
def test_classify_job(
    fixture: str,
    pods: list[str] | None,
    deleted: bool,
    phase: str,
    reason: str | None,
    exit_code: int | None,
    in_message: list[str],
) -> None:
    job_pods = None if pods is None else [pod(name) for name in pods]
    state = classify_job(job(fixture), job_pods, deleted=deleted)
    assert (state.phase, state.reason, state.exit_code) == (phase, reason, exit_code), state.message
    assert state.terminal is (phase in ("succeeded", "failed"))
    for text in in_message:
        assert text in state.message


def test_job_ignores_pods_of_another_job() -> None:
    # err-image-pull is owned by Job bad-fac2; ok-fac2 (started-active) must not inherit its failure
    other = pod("err-image-pull")
    assert other["metadata"]["ownerReferences"][0]["uid"] != job("started-active")["metadata"]["uid"]
    state = classify_job(job("started-active"), [other])
    assert (state.phase, state.terminal) == ("running", False)


def test_fail_fast_is_configurable_for_jobs() -> None:
    state = classify_job(job("retrying-after-failure"), [pod("err-image-pull")], fatal_waiting_reasons=())
    assert (state.phase, state.terminal) == ("pending", False)


def test_terminal_conditions_win_over_suspension() -> None:
    obj = job("failed-backoff-limit")
    obj["spec"]["suspend"] = True
    assert classify_job(obj).phase == "failed"


def test_failed_condition_wins_over_success_condition() -> None:
    # Not produced by a healthy controller (the API rejects it); never call such a Job a success.
    obj = job("complete")
    obj["status"]["conditions"].append(copy.deepcopy(job("failed-backoff-limit")["status"]["conditions"][1]))
    assert classify_job(obj).phase == "failed"


@pytest.mark.parametrize("value", [True, "true", 1, None])
def test_condition_status_must_be_the_string_true(value: object) -> None:
    obj = job("failed-backoff-limit")
    for condition in obj["status"]["conditions"]:
        condition["status"] = value
    obj["status"]["active"] = 1
    assert classify_job(obj).phase == "running"


# --------------------------------------------------------------------------------------------------
# ObjectState


def test_object_state_round_trips_and_is_immutable() -> None:
    state = classify_job(job("failed-backoff-limit"), [pod("failed-exit-3")])
    data = state.as_dict()
    assert json.loads(json.dumps(data)) == data
    assert ObjectState.from_dict(data) == state
    with pytest.raises(AttributeError):
        state.phase = "running"  # type: ignore[misc]


def test_object_state_rejects_inconsistent_values() -> None:
    with pytest.raises(ValueError, match="terminal"):
        ObjectState("running", True, None, "")
    with pytest.raises(ValueError, match="phase"):
        ObjectState("done", True, None, "")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="phase"):
        ObjectState.from_dict({"phase": "Complete"})


def test_non_object_input_is_a_clear_type_error() -> None:
    with pytest.raises(TypeError, match="expected a Kubernetes object"):
        classify_pod("my-pod")
    with pytest.raises(TypeError, match="int"):
        classify_job(job("complete"), [42])


# --------------------------------------------------------------------------------------------------
# Disruptions: (fixture, deleted, reason or None, started, substrings of the message)

DISRUPTION_CASES = [
    ("preempted", False, "PreemptionByScheduler", True, ["preempted by the scheduler on node spot-pool-b7"]),
    ("preempted-pending", False, "PreemptionByScheduler", False, ["preempted by the scheduler"]),
    ("eviction-api-running", False, "EvictionByEvictionAPI", True, ["Eviction API", "node fake-node"]),
    ("eviction-api-pending", True, "EvictionByEvictionAPI", False, ["Eviction API"]),
    ("taint-manager-deleting", False, "DeletionByTaintManager", True, ["NoExecute"]),
    ("podgc-orphan", False, "DeletionByPodGC", True, ["no longer exists"]),
    ("evicted", False, "Evicted", True, ["evicted on node spot-pool-b7: the node was low on memory"]),
    ("evicted-with-condition", False, "Evicted", True, ["the node was low on memory"]),
    ("kubelet-preempting", False, "Preempting", True, ["preempted by the kubelet on node spot-pool-b7"]),
    ("node-shutdown", False, "NodeShutdown", True, ["node spot-pool-b7 shut down"]),
    ("node-shutdown-rejected", False, "NodeShutdown", False, ["shut down"]),
    ("unknown-node-lost", False, "NodeLost", True, ["node fake-node stopped reporting"]),
    # deleted by someone else, with no disruption recorded: the existing Deleted reason
    ("running", True, "Deleted", True, ["deleted before it finished"]),
    ("pending-new", True, "Deleted", False, ["deleted before it finished"]),
    # not disruptions
    ("running", False, None, True, []),
    ("failed-exit-3", False, None, True, []),
    ("failed-exit-3", True, None, True, []),
    ("oom-killed", False, None, True, []),
    ("deadline-exceeded", False, None, True, []),
    ("succeeded", True, None, True, []),
    ("err-image-pull", False, None, False, []),
]


@pytest.mark.parametrize(
    ("fixture", "deleted", "reason", "started", "in_message"),
    DISRUPTION_CASES,
    ids=[f"{case[0]}{'-deleted' if case[1] else ''}" for case in DISRUPTION_CASES],
)
def test_pod_disruption(
    fixture: str, deleted: bool, reason: str | None, started: bool, in_message: list[str]
) -> None:
    disruption = pod_disruption(pod(fixture), deleted=deleted)
    if reason is None:
        assert disruption is None
        return
    assert disruption is not None
    assert (disruption.reason, disruption.started) == (reason, started), disruption
    for text in in_message:
        assert text in disruption.message


def test_disruption_keeps_the_server_message_and_round_trips() -> None:
    disruption = pod_disruption(pod("preempted"))
    assert disruption is not None
    assert disruption.detail == "default-scheduler: preempting to accommodate a higher priority pod"
    assert disruption.node == "spot-pool-b7"
    data = disruption.as_dict()
    assert json.loads(json.dumps(data)) == data
    assert Disruption.from_dict(data) == disruption
    with pytest.raises(ValueError, match="reason"):
        Disruption.from_dict({"message": "x"})


def test_a_false_disruption_condition_is_no_disruption() -> None:
    obj = pod("preempted")
    obj["status"]["conditions"][0]["status"] = "False"
    assert pod_disruption(obj) is None
    assert classify_pod(obj).reason == "Error"


def _vanished_job(**spec: object) -> dict[str, object]:
    return {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
        "spec": {"backoffLimit": 0, **spec},
        "status": {"active": 1, "startTime": "2026-12-06T20:00:00Z"},
    }


def _vanished_pod(phase: str, exit_code: int | None = None) -> dict[str, object]:
    state: dict[str, object] = {"running": {}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed"}}
    return {
        "metadata": {
            "name": "j-pod",
            "uid": "p",
            "ownerReferences": [{"kind": "Job", "uid": "u", "controller": True}],
        },
        "status": {"phase": phase, "containerStatuses": [{"name": "base", "state": state}]},
    }


@pytest.mark.parametrize(
    ("spec", "pods", "phase", "terminal", "reason"),
    [
        ({}, [], "running", False, "FinalStateUnknown"),
        ({}, [_vanished_pod("Running")], "running", False, "FinalStateUnknown"),
        ({}, [_vanished_pod("Succeeded", 0)], "succeeded", True, "Complete"),
        ({}, [_vanished_pod("Failed", 3)], "failed", True, "BackoffLimitExceeded"),
        # one failure is within backoffLimit 1: the Job may have run another pod, unseen
        ({"backoffLimit": 1}, [_vanished_pod("Failed", 3)], "running", False, "FinalStateUnknown"),
        # what its pods prove holds only for a Job of one completion without policies
        ({"completions": 2}, [_vanished_pod("Succeeded", 0)], "running", False, "FinalStateUnknown"),
        (
            {"podFailurePolicy": {"rules": []}},
            [_vanished_pod("Failed", 3)],
            "running",
            False,
            "FinalStateUnknown",
        ),
    ],
)
def test_vanished_job_reports_only_what_was_seen(
    spec: dict[str, object], pods: list[dict[str, object]], phase: str, terminal: bool, reason: str
) -> None:
    from airflow_jobwatch.kube.meaning.states import vanished_job_state

    state = vanished_job_state(_vanished_job(**spec), pods)
    assert (state.phase, state.terminal, state.reason) == (phase, terminal, reason)
    assert "retry" not in state.message
    if not terminal:
        assert "vanished while the watch was reconnecting; its final state is unknown" in state.message
    if reason == "BackoffLimitExceeded":
        assert state.exit_code == 3 and "exit" in state.message


def test_vanished_job_keeps_a_terminal_state_it_was_last_seen_in() -> None:
    from airflow_jobwatch.kube.meaning.states import vanished_job_state

    job = _vanished_job()
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
    assert vanished_job_state(job).phase == "succeeded"


def test_a_projected_job_keeps_what_says_whether_its_pods_prove_its_outcome() -> None:
    """The cache stores most Jobs projected: a vanished one must still show its pod failure policy, or a
    disrupted pod that the policy ignores would be taken for the failure that ended it."""
    from airflow_jobwatch.kube.engine.projection import project_job
    from airflow_jobwatch.kube.meaning.states import vanished_job_state

    job = _vanished_job(podFailurePolicy={"rules": [{"action": "Ignore", "onPodConditions": []}]})
    state = vanished_job_state(project_job(job), [_vanished_pod("Failed", 3)])
    assert (state.terminal, state.reason) == (False, "FinalStateUnknown")
