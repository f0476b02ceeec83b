"""kube/meaning/objects.py: model objects of both client libraries become the API JSON they were read from.

The models are real ones, built the way each library builds them from an HTTP response body
(``ApiClient.deserialize``), never mocks.
"""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes_asyncio.client
import pytest

from airflow_jobwatch.kube.meaning.objects import format_rfc3339, is_model, to_dict
from airflow_jobwatch.kube.meaning.states import classify_job, classify_pod

FIXTURES = Path(__file__).parent / "fixtures"
POD_FIXTURES = sorted(p.stem for p in (FIXTURES / "pods").glob("*.json"))
JOB_FIXTURES = sorted(p.stem for p in (FIXTURES / "jobs").glob("*.json"))


class _Body:
    """The one attribute ``ApiClient.deserialize`` reads from a REST response."""

    def __init__(self, data: str) -> None:
        self.data = data


def _text(kind: str, name: str) -> str:
    return (FIXTURES / kind / f"{name}.json").read_text()


def _without_nulls(value: Any) -> Any:
    """API JSON as the clients see it: both drop ``null`` fields when they build a model."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


@pytest.fixture(scope="module")
def sync_api() -> Any:
    api = kubernetes.client.ApiClient()
    yield api
    api.close()


@pytest.mark.parametrize(
    ("kind", "name"), [("pods", n) for n in POD_FIXTURES] + [("jobs", n) for n in JOB_FIXTURES]
)
def test_kubernetes_model_round_trips_to_api_json(sync_api: Any, kind: str, name: str) -> None:
    klass = "V1Pod" if kind == "pods" else "V1Job"
    model = sync_api.deserialize(_Body(_text(kind, name)), klass)
    assert type(model).__module__.startswith("kubernetes.client.models")
    assert to_dict(model) == _without_nulls(json.loads(_text(kind, name)))


async def test_kubernetes_asyncio_model_round_trips_to_api_json() -> None:
    async with kubernetes_asyncio.client.ApiClient() as api:
        for kind, klass, names in (("pods", "V1Pod", POD_FIXTURES), ("jobs", "V1Job", JOB_FIXTURES)):
            for name in names:
                model = api.deserialize(_Body(_text(kind, name)), klass)
                assert type(model).__module__.startswith("kubernetes_asyncio.client.models")
                assert to_dict(model) == _without_nulls(json.loads(_text(kind, name))), name


async def test_models_of_both_libraries_classify_like_the_json(sync_api: Any) -> None:
    async with kubernetes_asyncio.client.ApiClient() as async_api:
        for name in POD_FIXTURES:
            raw = json.loads(_text("pods", name))
            for api in (sync_api, async_api):
                for deleted in (False, True):
                    model = api.deserialize(_Body(_text("pods", name)), "V1Pod")
                    assert classify_pod(model, deleted=deleted) == classify_pod(raw, deleted=deleted), name
        job_model = sync_api.deserialize(_Body(_text("jobs", "failed-backoff-limit")), "V1Job")
        pod_models = [
            async_api.deserialize(_Body(_text("pods", n)), "V1Pod")
            for n in ("failed-exit-3", "failed-exit-3-second-attempt")
        ]
        state = classify_job(job_model, pod_models)
        assert (state.reason, state.exit_code) == ("BackoffLimitExceeded", 3)


def test_models_built_by_constructors() -> None:
    started = datetime.datetime(2026, 12, 2, 12, 19, 46, tzinfo=datetime.UTC)
    for client in (kubernetes.client, kubernetes_asyncio.client):
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name="etl-1", namespace="prod", labels={"job-name": "etl"}),
            status=client.V1PodStatus(
                phase="Failed",
                container_statuses=[
                    client.V1ContainerStatus(
                        name="base",
                        image="busybox:1.36",
                        image_id="",
                        ready=False,
                        restart_count=0,
                        state=client.V1ContainerState(
                            terminated=client.V1ContainerStateTerminated(
                                exit_code=3, reason="Error", message="boom", started_at=started
                            )
                        ),
                    )
                ],
            ),
        )
        assert to_dict(pod) == {
            "metadata": {"name": "etl-1", "namespace": "prod", "labels": {"job-name": "etl"}},
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": "base",
                        "image": "busybox:1.36",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": 3,
                                "reason": "Error",
                                "message": "boom",
                                "startedAt": "2026-12-02T12:19:46Z",
                            }
                        },
                    }
                ],
            },
        }
        assert classify_pod(pod).message.startswith(
            "Pod 'prod/etl-1' failed; container 'base' exited with code 3: boom"
        )


def test_dict_is_returned_as_is() -> None:
    obj = {"metadata": {"name": "x"}}
    assert to_dict(obj) is obj


def test_other_mappings_and_nested_models_are_converted() -> None:
    from types import MappingProxyType

    meta = kubernetes.client.V1ObjectMeta(name="x", creation_timestamp=datetime.datetime(2026, 1, 2, 3, 4, 5))
    result = to_dict(MappingProxyType({"metadata": meta, "items": (1, 2)}))
    assert result == {"metadata": {"name": "x", "creationTimestamp": "2026-01-02T03:04:05Z"}, "items": [1, 2]}


def test_rfc3339() -> None:
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    assert format_rfc3339(datetime.datetime(2026, 12, 2, 14, 0, 0, tzinfo=plus_two)) == "2026-12-02T12:00:00Z"
    assert format_rfc3339(datetime.datetime(2026, 12, 2, 12, 0, 0, 1500, tzinfo=datetime.UTC)) == (
        "2026-12-02T12:00:00.001500Z"
    )


@pytest.mark.parametrize("value", [None, "pod", 3, ["a"], object()])
def test_unsupported_types_raise_a_type_error_naming_the_type(value: object) -> None:
    assert not is_model(value)
    with pytest.raises(TypeError, match=type(value).__qualname__):
        to_dict(value)


# ------------------------------------------------- API JSON -> Model.to_dict() without building models

# Every Job and Pod a real kube-apiserver v1.36.2 returned in the reference recordings (see its `source`)
REAL_OBJECTS = (
    Path(__file__).resolve().parents[1] / "fixtures" / "real-apiserver" / "job-and-pod-objects.json"
)


def _recorded_objects(kind: str) -> list[dict[str, Any]]:
    """Every ``kind`` object in the unit fixtures and in the real kube-apiserver's answers."""
    folder = "jobs" if kind == "Job" else "pods"
    found = [json.loads(path.read_text()) for path in sorted((FIXTURES / folder).glob("*.json"))]
    real = [item["object"] for item in json.loads(REAL_OBJECTS.read_text())["body"]]
    assert any(obj["kind"] == kind for obj in real)
    return found + [obj for obj in real if obj["kind"] == kind]


def _library_to_dict(obj: Any, type_name: str) -> Any:
    """What the ``kubernetes`` client itself makes of ``obj``: the reference for the fast path."""
    configuration = kubernetes.client.Configuration()
    configuration.client_side_validation = False
    api = kubernetes.client.ApiClient(configuration)
    return api.deserialize(_Body(json.dumps(obj)), type_name).to_dict()


def _assert_same(fast: Any, slow: Any, where: str = "") -> None:
    """Equal, and equal in type all the way down (an aware datetime for an aware datetime, with the
    same offset), so that nothing reading the event's ``job`` can tell the two apart."""
    assert type(fast) is type(slow), f"{where}: {type(fast).__name__} != {type(slow).__name__}"
    if isinstance(slow, dict):
        assert list(fast) == list(slow), where  # same keys, same order (as the XCom renders them)
        for key in slow:
            _assert_same(fast[key], slow[key], f"{where}.{key}")
    elif isinstance(slow, list):
        assert len(fast) == len(slow), where
        for i, (a, b) in enumerate(zip(fast, slow, strict=True)):
            _assert_same(a, b, f"{where}[{i}]")
    elif isinstance(slow, datetime.datetime):
        assert fast == slow and fast.utcoffset() == slow.utcoffset(), where
    elif isinstance(slow, float) and math.isnan(slow):  # NaN is the same value, though not equal to itself
        assert math.isnan(fast), where
    else:
        assert fast == slow, where


@pytest.mark.parametrize(("kind", "type_name"), [("Job", "V1Job"), ("Pod", "V1Pod")])
def test_model_dict_from_json_equals_the_clients_to_dict_on_recorded_objects(
    kind: str, type_name: str
) -> None:
    from airflow_jobwatch.kube.meaning.objects import model_dict_from_json

    objects = _recorded_objects(kind)
    assert len(objects) >= 10 if kind == "Job" else objects
    for obj in objects:
        before = json.dumps(obj, sort_keys=True)
        fast = model_dict_from_json(obj, type_name, kubernetes.client.models)
        _assert_same(fast, _library_to_dict(obj, type_name), f"{kind} {obj['metadata'].get('name')}")
        assert json.dumps(obj, sort_keys=True) == before  # the input is not modified


def test_model_dict_from_json_copies_untyped_values() -> None:
    """An ``object``-typed field (a port as int-or-string, say) is copied, not shared: the event's Job
    must not alias the informer's cached one."""
    from airflow_jobwatch.kube.meaning.objects import model_dict_from_json

    job = json.loads(_text("jobs", "complete"))
    probe = {"httpGet": {"port": {"weird": ["shape"]}, "path": "/"}}
    job["spec"]["template"]["spec"]["containers"][0]["livenessProbe"] = probe
    fast = model_dict_from_json(job, "V1Job", kubernetes.client.models)
    port = fast["spec"]["template"]["spec"]["containers"][0]["liveness_probe"]["http_get"]["port"]
    assert port == {"weird": ["shape"]}
    port["weird"].append("changed")
    assert probe["httpGet"]["port"] == {"weird": ["shape"]}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("startTime", "2026-12-02T12:19:46"),  # no zone: dateutil's reading depends on the machine
        ("startTime", "2026-12-02T12:19:46.1234567Z"),  # more than microseconds
        ("startTime", 1764677986),  # not a string
        ("succeeded", "1"),  # a string where an int is declared: the client converts it
        ("succeeded", True),  # a bool is an int to Python, not to the client's type check
    ],
)
def test_model_dict_from_json_refuses_what_the_client_converts_its_own_way(field: str, value: Any) -> None:
    from airflow_jobwatch.kube.meaning.objects import ModelShapeUnsupported, model_dict_from_json
    from airflow_jobwatch.triggers.job import client_job_dict

    job = json.loads(_text("jobs", "complete"))
    job["status"][field] = value
    with pytest.raises(ModelShapeUnsupported):
        model_dict_from_json(job, "V1Job", kubernetes.client.models)
    # client_job_dict falls back to the client for these, so the event's Job is still the client's
    # (and where the client fails, as it does on a timestamp that is a number, it fails the same way)
    try:
        slow = _library_to_dict(job, "V1Job")
    except Exception as e:
        with pytest.raises(type(e)):
            client_job_dict(job)
    else:
        _assert_same(client_job_dict(job), slow)


def test_model_dict_from_json_reads_offsets_and_fractions_as_the_client_does() -> None:
    from airflow_jobwatch.kube.meaning.objects import model_dict_from_json

    job = json.loads(_text("jobs", "complete"))
    for stamp in ("2026-12-02T12:19:46Z", "2026-12-02T12:19:46.5Z", "2026-12-02T14:19:46.123456+02:00"):
        job["status"]["startTime"] = stamp
        fast = model_dict_from_json(job, "V1Job", kubernetes.client.models)
        _assert_same(fast, _library_to_dict(job, "V1Job"), stamp)


def test_client_job_dict_equals_the_clients_to_dict_on_generated_jobs() -> None:
    """Jobs with realistic and garbage values anywhere (the state-machine property tests' strategy):
    the fast path gives the client's result exactly, or declines and the client is asked."""
    from hypothesis import example, given
    from test_states_properties import SETTINGS, jobs

    from airflow_jobwatch.compat import kubernetes_models_use_client_configuration
    from airflow_jobwatch.kube.meaning.objects import ModelShapeUnsupported, model_dict_from_json
    from airflow_jobwatch.triggers.job import client_job_dict

    declined = [0]

    @SETTINGS
    @given(jobs)
    @example({"spec": {"suspend": False, "parallelism": [math.nan]}})  # found by CI: NaN != NaN
    def check(job: dict[str, Any]) -> None:
        try:
            slow = _library_to_dict(job, "V1Job")
        except Exception as e:  # the client itself fails on some garbage: so must we, the same way
            if isinstance(e, ValueError) and not kubernetes_models_use_client_configuration():
                # kubernetes 35 (Airflow 3.1/3.2's provider pins) validates required fields even with
                # client_side_validation off (airflow_jobwatch.compat): it has no answer to compare with.
                return
            with pytest.raises(type(e)):
                client_job_dict(job)
            return
        try:
            _assert_same(model_dict_from_json(job, "V1Job", kubernetes.client.models), slow)
        except ModelShapeUnsupported:
            declined[0] += 1
        _assert_same(client_job_dict(job), slow)

    check()
