"""Table-driven tests of kube/meaning/result.py, the one reader of a finished Job's result, on pods recorded
from a real API server (fixtures/README.md) and variants of them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_jobwatch.kube.meaning.result import (
    EMPTY_XCOM_RESULT,
    RESULT_ANNOTATION,
    RESULT_ANNOTATION_LIMIT_BYTES,
    JobResult,
    PodOutcome,
    XComResultError,
    read_stored_result,
    stored_result,
    termination_messages,
    without_result_annotation,
)

FIXTURES = Path(__file__).parent / "fixtures"
BASE = "main"  # the recorded pods' container


def load(kind: str, name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / kind / f"{name}.json").read_text())


def succeeded(name: str, message: str | None, *, created: str = "2026-12-02T12:19:15Z") -> dict[str, Any]:
    pod = copy.deepcopy(load("pods", "succeeded"))
    pod["metadata"]["name"] = name
    pod["metadata"]["creationTimestamp"] = created
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    if message is not None:
        terminated["message"] = message
    return pod


def base_exited_pod_running(name: str, message: str) -> dict[str, Any]:
    """The base container has exited 0 with its result, but the pod is still Running (another
    container runs on, or the kubelet has not written the phase yet)."""
    pod = succeeded(name, message)
    pod["status"]["phase"] = "Running"
    return pod


def failed_exit_3() -> dict[str, Any]:
    return copy.deepcopy(load("pods", "failed-exit-3"))


def read_success(pods: list[Any]) -> JobResult:
    """What a Job that completed reads from `pods` (dicts or the client's models), with its XCom results."""
    return JobResult.read(
        outcome="success",
        reason="Complete",
        message="m",
        uid="u1",
        pods=pods,
        base_container=BASE,
        do_xcom_push=True,
    )


# (pods, expected outcomes as (phase, exit_code), expected termination messages of the base container)
READS = [
    pytest.param([succeeded("a", '{"x": 1}')], [("succeeded", 0)], ['{"x": 1}'], id="succeeded-with-result"),
    pytest.param([succeeded("a", None)], [("succeeded", 0)], [EMPTY_XCOM_RESULT], id="succeeded-no-result"),
    pytest.param(
        [base_exited_pod_running("a", '{"x": 1}')],
        [("running", None)],
        [],
        id="base-exited-but-pod-not-succeeded-carries-none",
    ),
    pytest.param([failed_exit_3()], [("failed", 3)], [], id="failed-exit-3"),
    pytest.param(
        [
            succeeded("b", '"second"', created="2026-12-02T12:20:00Z"),
            succeeded("a", '"first"', created="2026-12-02T12:19:00Z"),
        ],
        [("succeeded", 0), ("succeeded", 0)],
        ['"first"', '"second"'],
        id="oldest-first",
    ),
    pytest.param([load("pods", "evicted-with-condition")], None, [], id="evicted"),
    pytest.param([load("pods", "running")], [("running", None)], [], id="running"),
]


@pytest.mark.parametrize(("pods", "outcomes", "messages"), READS)
def test_reads_pods_outcomes_and_results(
    pods: list[dict[str, Any]], outcomes: list[tuple[str, int | None]] | None, messages: list[str]
) -> None:
    result = read_success(pods)
    if outcomes is not None:
        assert [(p.phase, p.exit_code) for p in result.pods] == outcomes
    assert list(result.xcom_result or ()) == messages
    assert termination_messages(pods, BASE) == tuple(messages)
    # the same pods as the kubernetes client's models read the same
    assert read_success([_model(p) for p in pods]) == result


def test_without_xcom_push_there_is_no_xcom_result() -> None:
    result = JobResult.read(
        outcome="success",
        reason="Complete",
        message="m",
        uid=None,
        pods=[succeeded("a", "1")],
        base_container=BASE,
        do_xcom_push=False,
    )
    assert result.xcom_result is None
    assert result.to_payload()["xcom_result"] is None


def test_payload_keys_and_values() -> None:
    result = JobResult.read(
        outcome="failed",
        reason="BackoffLimitExceeded",
        message="exited with code 3",
        uid="u1",
        pods=[failed_exit_3()],
        base_container=BASE,
        do_xcom_push=True,
        disruptions=[{"pod": "p", "reason": "Evicted"}],
    )
    payload = result.to_payload()
    assert payload["status"] == "error" and payload["outcome"] == "failed"
    assert payload["pods"] == [
        {"name": payload["pod_names"][0], "phase": "failed", "exit_code": 3, "reason": "Error"}
    ]
    assert payload["xcom_result"] == []
    assert payload["disruptions"] == [{"pod": "p", "reason": "Evicted"}]
    assert JobResult.from_payload(payload) == result


@pytest.mark.parametrize(
    ("raw", "unwrap", "value"),
    [
        (['{"a": 1}'], True, {"a": 1}),
        (['{"a": 1}'], False, [{"a": 1}]),
        ([EMPTY_XCOM_RESULT], True, None),
        (["1", "2"], True, [1, 2]),
        ([], True, []),
    ],
)
def test_xcom_value(raw: list[str], unwrap: bool, value: Any) -> None:
    result = JobResult("success", "Complete", "m", xcom_result=tuple(raw))
    assert result.xcom_value(xcom_path="/airflow/xcom/return.json", unwrap_single=unwrap) == value


def test_xcom_value_cut_at_the_kubelets_limit_names_it() -> None:
    result = JobResult(
        "success",
        "Complete",
        "m",
        pods=(PodOutcome("p", "succeeded", 0, None),),
        xcom_result=(('{"a": "' + "x" * 5000)[:4096],),
    )
    with pytest.raises(XComResultError, match="4096 bytes"):
        result.xcom_value(xcom_path="/airflow/xcom/return.json", unwrap_single=True)


def test_fresh_pods_win_unless_they_have_fewer_results() -> None:
    event = JobResult("success", "Complete", "m", uid="u1", xcom_result=('"old"',))
    assert event.with_fresh_pods([succeeded("a", '"new"')], BASE).xcom_result == ('"new"',)
    # pods gone (deleted after the event): the event's copy stays
    assert event.with_fresh_pods([], BASE) == event
    # a pod left without its result (the succeeded one was deleted): the event's results stay
    kept = event.with_fresh_pods([failed_exit_3()], BASE)
    assert kept.xcom_result == ('"old"',) and [p.exit_code for p in kept.pods] == [3]


# -- the result written onto the Job ------------------------------------------------------------------

KEY = b"k" * 32  # what the deployment signs with (derived from [core] fernet_key in Airflow)
OLD_KEY = b"o" * 32  # the key before a rotation


def _job_with(
    annotation: str | None, uid: str = "u1", fixture: str = "failed-backoff-limit"
) -> dict[str, Any]:
    job = copy.deepcopy(load("jobs", fixture))
    job["metadata"]["uid"] = uid
    job["metadata"]["annotations"] = {"mine": "kept"}
    if annotation is not None:
        job["metadata"]["annotations"][RESULT_ANNOTATION] = annotation
    return job


def _result(uid: str = "u1") -> JobResult:
    return JobResult.read(
        outcome="failed",
        reason="BackoffLimitExceeded",
        message="container 'main' exited with code 3",
        uid=uid,
        pods=[failed_exit_3()],
        base_container=BASE,
        do_xcom_push=True,
    )


def _read_again(
    job: dict[str, Any], pods: list[Any], keys: Any = (KEY,), **kw: Any
) -> tuple[JobResult, list[str]]:
    """A second reader's result after the first one's cleanup: (result, the reasons it gave for not using
    the stored result)."""
    rejected: list[str] = []
    args: dict[str, Any] = {
        "outcome": "failed",
        "reason": "BackoffLimitExceeded",
        "message": "no exit code any more",
        "uid": "u1",
        **kw,
    }
    result = JobResult.read(
        **args,
        pods=pods,
        base_container=BASE,
        do_xcom_push=True,
        job=job,
        keys=keys,
        rejected=rejected.append,
    )
    return result, rejected


def test_the_signed_annotation_round_trips_and_gives_what_the_pods_no_longer_show() -> None:
    written = _result()
    text = written.to_annotation(KEY)
    assert text is not None
    job = _job_with(text)
    assert stored_result(job, [KEY]) == written
    # a second reader, after the pods were deleted, reads the first reader's exit codes and message
    again, rejected = _read_again(job, [])
    assert again == written and rejected == []


def test_a_rotated_key_still_verifies_and_a_retired_one_does_not() -> None:
    job = _job_with(_result().to_annotation(OLD_KEY))
    assert stored_result(job, [KEY, OLD_KEY]) == _result()  # fernet_key = "new,old"
    again, rejected = _read_again(job, [], keys=lambda: [KEY])  # the old key removed
    assert again.pods == () and again.message == "no exit code any more"
    assert rejected and "signature does not verify" in rejected[0]


def test_without_a_key_nothing_stored_counts() -> None:
    again, rejected = _read_again(_job_with(_result().to_annotation(KEY)), [], keys=())
    assert again.pods == () and rejected == ["there is no key here to check its signature with"]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        pytest.param(lambda d: d.update(xcom_result=['"mine"']), "signature does not verify", id="altered"),
        pytest.param(lambda d: d.pop("mac"), "carries no signature", id="mac-removed"),
        # what anyone who may patch the Job can write: refused with its reason, never an exception that
        # fails the task (hmac.compare_digest raises TypeError on a str with non-ASCII characters)
        pytest.param(lambda d: d.update(mac="\u00e9" * 43), "signature does not verify", id="mac-not-ascii"),
        pytest.param(lambda d: d.update(mac="\ud800"), "signature does not verify", id="mac-lone-surrogate"),
        pytest.param(lambda d: d.update(format=1), "not in the signed format", id="earlier-unsigned-format"),
    ],
)
def test_a_changed_annotation_is_rejected_with_its_reason(change: Any, why: str) -> None:
    data = json.loads(_result().to_annotation(KEY) or "")
    change(data)
    again, rejected = _read_again(_job_with(json.dumps(data)), [failed_exit_3()])
    assert again.xcom_result == () and [p.exit_code for p in again.pods] == [3]
    assert len(rejected) == 1 and why in rejected[0], rejected


@pytest.mark.parametrize(
    ("fixture", "outcome", "why"),
    [
        pytest.param("complete", "failed", "the Job's own status says 'success'", id="job-succeeded"),
        pytest.param("started-active", "failed", "shows no end", id="job-still-running"),
        pytest.param("failed-backoff-limit", "timeout", "the wait ended 'timeout'", id="wait-timed-out"),
    ],
)
def test_a_signed_result_that_the_jobs_own_status_contradicts_does_not_count(
    fixture: str, outcome: str, why: str
) -> None:
    job = _job_with(_result().to_annotation(KEY), fixture=fixture)
    again, rejected = _read_again(job, [], outcome=outcome)
    assert again.outcome == outcome and again.pods == () and again.message == "no exit code any more"
    assert len(rejected) == 1 and why in rejected[0], rejected


def test_a_stored_success_decides_nothing_but_fills_in_the_xcom_of_deleted_pods() -> None:
    """Indexed Job, two pods: one deleted after the first run. The second reader keeps the pod it still
    sees, takes the deleted one's outcome and both XCom results from the stored copy, and the wait's
    own words (outcome, reason) stay the cluster's."""
    first = read_success(
        [
            succeeded("a", '"A"', created="2026-12-02T12:00:00Z"),
            succeeded("b", '"B"', created="2026-12-02T12:00:01Z"),
        ]
    )
    job = _job_with(first.to_annotation(KEY), fixture="complete")
    again = JobResult.read(
        outcome="success",
        reason="CompletionsReached",
        message="read now",
        uid="u1",
        pods=[succeeded("b", '"B"', created="2026-12-02T12:00:01Z")],
        base_container=BASE,
        do_xcom_push=True,
        job=job,
        keys=(KEY,),
    )
    assert [p.name for p in again.pods] == ["a", "b"]
    assert again.xcom_result == ('"A"', '"B"')
    assert (again.outcome, again.reason, again.message) == ("success", "CompletionsReached", "read now")


@pytest.mark.parametrize(
    "annotation",
    [
        pytest.param("not json", id="not-json"),
        pytest.param(json.dumps({"format": 99, "outcome": "success"}), id="unknown-format"),
        pytest.param(json.dumps(["a list"]), id="not-an-object"),
    ],
)
def test_an_unreadable_annotation_is_ignored(annotation: str) -> None:
    assert stored_result(_job_with(annotation), [KEY]) is None


def test_a_reason_quotes_at_most_a_short_piece_of_what_the_annotation_says() -> None:
    """The reason goes into the task log; the annotation is written by anyone who may patch the Job."""
    for data in ({"format": 2, "uid": "x" * 200_000}, {"format": "y" * 200_000}):
        result, why = read_stored_result(_job_with(json.dumps(data)), [KEY])
        assert result is None and why is not None and len(why) < 200, why[:300]


def test_another_jobs_result_is_ignored() -> None:
    text = _result(uid="other").to_annotation(KEY)
    assert text is not None
    assert stored_result(_job_with(text, uid="u1"), [KEY]) is None


def test_a_result_over_the_limit_is_not_written() -> None:
    big = "x" * 4000
    pods = [succeeded(f"p{i}", big, created=f"2026-12-02T12:{i // 60:02d}:{i % 60:02d}Z") for i in range(40)]
    result = read_success(pods)
    assert len(json.dumps(list(result.xcom_result or ()))) > RESULT_ANNOTATION_LIMIT_BYTES
    assert result.to_annotation(KEY) is None


def test_the_events_job_leaves_the_result_out_and_the_cache_untouched() -> None:
    job = _job_with("{}")
    stripped = without_result_annotation(job)
    assert stripped is not None
    assert stripped["metadata"]["annotations"] == {"mine": "kept"}
    assert RESULT_ANNOTATION in job["metadata"]["annotations"]  # the cached copy is not changed
    alone = _job_with("{}")
    del alone["metadata"]["annotations"]["mine"]
    assert "annotations" not in without_result_annotation(alone)["metadata"]  # type: ignore[index]
    assert without_result_annotation(None) is None


def _model(pod: dict[str, Any]) -> Any:
    """The pod as the kubernetes client's LIST returns it (a V1Pod model)."""
    from kubernetes.client import ApiClient

    class Response:
        data = json.dumps(pod)

    return ApiClient().deserialize(Response(), "V1Pod")


def test_a_result_that_is_not_json_names_its_own_pod() -> None:
    pods = [failed_exit_3(), succeeded("b", "not json", created="2026-12-03T00:00:00Z")]
    result = read_success(pods)
    with pytest.raises(XComResultError, match="Pod b wrote /x but it is not JSON"):
        result.xcom_value(xcom_path="/x", unwrap_single=True)
