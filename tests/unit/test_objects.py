"""kube/objects.py: model objects of both client libraries become the API JSON they were read from.

The models are real ones, built the way each library builds them from an HTTP response body
(``ApiClient.deserialize``), never mocks.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes_asyncio.client
import pytest

from airflow_jobwatch.kube.objects import format_rfc3339, is_model, to_dict
from airflow_jobwatch.kube.states import classify_job, classify_pod

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
