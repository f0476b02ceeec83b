"""Property tests of kube/meaning/states.py: rules that must hold for every object, including malformed ones.

A watch can deliver half-written objects and users hand us whatever their code built, so the
generators below mix realistic values with garbage (None, wrong types, missing keys) at every level.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_jobwatch.kube.meaning.states import TERMINAL_PHASES, classify_job, classify_pod, pod_disruption

# Enough examples to hit every branch combination the generators can make, while the whole module
# stays around a few seconds on a shared 2-core machine.
# (A decorator, not a loaded profile: a profile would change every other module's hypothesis settings.)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

garbage = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A realistic value most of the time, garbage sometimes."""
    return st.one_of(strategy, strategy, strategy, garbage)


def obj(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A dict in which each field may be missing."""
    return st.fixed_dictionaries({}, optional=fields)


words = st.sampled_from(
    [
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CrashLoopBackOff",
        "ContainerCreating",
        "PodInitializing",
        "OOMKilled",
        "Error",
        "Completed",
        "Evicted",
        "DeadlineExceeded",
        "BackoffLimitExceeded",
        "",
    ]
)
messages = st.sampled_from(["", "pull QPS exceeded", "not found", "boom\nline 2", "x" * 3000])
container_state = obj(
    waiting=maybe(obj(reason=maybe(words), message=maybe(messages))),
    running=maybe(obj(startedAt=maybe(st.just("2026-12-02T12:19:46Z")))),
    terminated=maybe(obj(exitCode=maybe(st.integers(-1, 255)), reason=maybe(words), message=maybe(messages))),
)
container_status = obj(
    name=maybe(st.sampled_from(["main", "base", "proxy", "migrate"])),
    state=maybe(container_state),
    lastState=maybe(container_state),
)
statuses = maybe(st.lists(maybe(container_status), max_size=3))
condition_types = st.sampled_from(
    ["Complete", "Failed", "FailureTarget", "SuccessCriteriaMet", "Suspended", "PodScheduled", "Ready"]
)
condition_status = st.sampled_from(["True", "False", "Unknown"])
conditions = maybe(
    st.lists(
        maybe(
            obj(
                type=maybe(condition_types),
                status=maybe(condition_status),
                reason=maybe(words),
                message=maybe(messages),
            )
        ),
        max_size=4,
    )
)
metadata = obj(
    name=maybe(st.text(min_size=1, max_size=10)),
    namespace=maybe(st.sampled_from(["default", "prod"])),
    uid=maybe(st.sampled_from(["uid-a", "uid-b"])),
    deletionTimestamp=maybe(st.just("2026-12-02T12:20:00Z")),
    creationTimestamp=maybe(st.sampled_from(["2026-12-02T12:19:46Z", "2026-12-02T12:19:56.5Z", "yesterday"])),
    ownerReferences=maybe(
        st.lists(
            obj(uid=maybe(st.sampled_from(["uid-a", "uid-b"])), controller=maybe(st.booleans())), max_size=2
        )
    ),
)
pods = obj(
    metadata=maybe(metadata),
    spec=maybe(
        obj(
            initContainers=maybe(
                st.lists(
                    obj(
                        name=maybe(st.sampled_from(["proxy", "migrate"])),
                        restartPolicy=maybe(st.just("Always")),
                    )
                )
            )
        )
    ),
    status=maybe(
        obj(
            phase=maybe(st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"])),
            reason=maybe(words),
            message=maybe(messages),
            conditions=conditions,
            containerStatuses=statuses,
            initContainerStatuses=statuses,
        )
    ),
)
jobs = obj(
    metadata=maybe(metadata),
    spec=maybe(obj(suspend=maybe(st.booleans()), parallelism=maybe(st.integers(0, 5)))),
    status=maybe(
        obj(
            conditions=conditions,
            active=maybe(st.integers(0, 3)),
            failed=maybe(st.integers(0, 3)),
            succeeded=maybe(st.integers(0, 3)),
            startTime=maybe(st.just("2026-12-02T12:19:46Z")),
        )
    ),
)
pod_lists = st.none() | st.lists(pods, max_size=3)


def _check(state: Any) -> None:
    assert state.terminal is (state.phase in TERMINAL_PHASES)
    assert isinstance(state.message, str) and state.message
    json.dumps(state.as_dict())


@SETTINGS
@given(pods, st.booleans())
def test_any_pod_classifies_without_raising(pod: dict[str, Any], deleted: bool) -> None:
    _check(classify_pod(pod, deleted=deleted))


@SETTINGS
@given(jobs, pod_lists, st.booleans())
def test_any_job_classifies_without_raising(
    job: dict[str, Any], job_pods: list[Any] | None, deleted: bool
) -> None:
    _check(classify_job(job, job_pods, deleted=deleted))


@SETTINGS
@given(garbage, st.booleans())
def test_garbage_at_the_top_level_fields_never_raises(value: Any, deleted: bool) -> None:
    for field in ("metadata", "spec", "status"):
        _check(classify_pod({field: value}, deleted=deleted))
        _check(classify_job({field: value}, [{field: value}], deleted=deleted))


@SETTINGS
@given(pods, jobs, pod_lists)
def test_deleted_is_always_terminal_and_keeps_a_terminal_outcome(
    pod: dict[str, Any], job: dict[str, Any], job_pods: list[Any] | None
) -> None:
    disruption = pod_disruption(pod, deleted=True)
    for live, gone, vanished in (
        # A pod the cluster disrupted before deleting it is named by its disruption (Evicted,
        # PreemptionByScheduler, ...); one that merely vanished is Deleted.
        (classify_pod(pod), classify_pod(pod, deleted=True), disruption.reason if disruption else "Deleted"),
        (classify_job(job, job_pods), classify_job(job, job_pods, deleted=True), "Deleted"),
    ):
        assert gone.terminal
        if live.terminal:
            assert gone == live
        else:
            assert gone.reason == vanished


not_true = st.sampled_from(["False", "Unknown", "true", "TRUE", True, 1, None, ""])


@SETTINGS
@given(
    jobs,
    pod_lists,
    st.lists(st.tuples(condition_types, not_true, st.integers(0, 10)), min_size=1, max_size=4),
)
def test_a_condition_that_is_not_true_never_changes_a_job(
    job: dict[str, Any], job_pods: list[Any] | None, extra: list[tuple[str, Any, int]]
) -> None:
    before = classify_job(job, job_pods)
    status = job.get("status")
    if not isinstance(status, dict):
        status = job["status"] = {}
    current = status.get("conditions")
    merged = list(current) if isinstance(current, list) else []
    for kind, value, position in extra:
        merged.insert(position % (len(merged) + 1), {"type": kind, "status": value, "reason": "Noise"})
    status["conditions"] = merged
    assert classify_job(job, job_pods) == before


@SETTINGS
@given(pods, st.lists(st.tuples(condition_types, not_true), min_size=1, max_size=4))
def test_a_condition_that_is_not_true_never_changes_a_pod_outcome(
    pod: dict[str, Any], extra: list[Any]
) -> None:
    before = classify_pod(pod)
    status = pod.get("status")
    if not isinstance(status, dict):
        status = pod["status"] = {}
    current = status.get("conditions")
    status["conditions"] = (list(current) if isinstance(current, list) else []) + [
        {"type": kind, "status": value} for kind, value in extra
    ]
    after = classify_pod(pod)
    assert (after.phase, after.terminal, after.exit_code) == (before.phase, before.terminal, before.exit_code)


@SETTINGS
@given(jobs, pod_lists)
def test_pods_never_overturn_a_terminal_job_condition(
    job: dict[str, Any], job_pods: list[Any] | None
) -> None:
    alone = classify_job(job)
    if alone.terminal:
        assert classify_job(job, job_pods).phase == alone.phase


@SETTINGS
@given(pods)
def test_succeeded_and_failed_phases_are_terminal(pod: dict[str, Any]) -> None:
    status = pod.get("status")
    phase = status.get("phase") if isinstance(status, dict) else None
    state = classify_pod(pod)
    if phase == "Succeeded":
        assert state.phase == "succeeded"
    elif phase == "Failed":
        assert state.phase == "failed"
