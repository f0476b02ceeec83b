"""How a refused stop of a replaced pod is read (executors/stopping.py).

The sandbox answers the common cases over HTTP (tests/integration/executor/test_disruption_relaunch.py);
these rows force the answers it cannot produce on demand (a 422 for a lower deadline already set: no pod
can be created with a deadline below the one a stop sets), with a stub client that answers one PATCH.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from airflow_jobwatch.executors.stopping import BOUNDED, GONE, STOPPED, StopRefused, stop_pod


def _status(code: int, message: str, causes: list[dict[str, str]] | None = None) -> str:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message}
    if causes is not None:
        body["details"] = {"name": "p", "kind": "pods", "causes": causes}
    body["code"] = code
    return json.dumps(body)


class _Answers:
    """A CoreV1Api stand-in whose one PATCH answers ``error`` (or succeeds), recording what was sent."""

    def __init__(self, error: ApiException | None) -> None:
        self.error = error
        self.sent: list[tuple[str, str, Any]] = []

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any, **_: Any) -> dict[str, Any]:
        self.sent.append((namespace, name, body))
        if self.error is not None:
            raise self.error
        return {}


def _error(code: int, body: str | None = None) -> ApiException:
    err = ApiException(status=code, reason={403: "Forbidden", 404: "Not Found"}.get(code, "Error"))
    err.body = body
    return err


LOWER = _status(
    422,
    'Pod "p" is invalid: spec.activeDeadlineSeconds: Invalid value: 1: must be less than or equal to previous '
    "value",
    [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 1: must be less than or equal to previous value",
            "field": "spec.activeDeadlineSeconds",
        }
    ],
)
OTHER_422 = _status(
    422,
    'Pod "p" is invalid: spec: Forbidden: pod updates may not change fields other than ...',
    [{"reason": "FieldValueForbidden", "message": "Forbidden: pod updates may not change", "field": "spec"}],
)
FORBIDDEN = _status(403, 'pods "p" is forbidden: User "system:serviceaccount:a:s" cannot patch resource')


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (None, STOPPED),
        (_error(404, _status(404, 'pods "p" not found')), GONE),
        (_error(422, LOWER), BOUNDED),
        (_error(422, OTHER_422), StopRefused),
        (_error(403, FORBIDDEN), StopRefused),
        (_error(500, _status(500, "etcdserver: request timed out")), ApiException),
        (_error(429, _status(429, "too many requests")), ApiException),
    ],
    ids=["stopped", "gone", "lower-deadline-set", "other-422", "forbidden", "server-error", "throttled"],
)
def test_a_stop_is_read_per_answer(error: ApiException | None, outcome: Any) -> None:
    client = _Answers(error)
    if isinstance(outcome, str):
        assert stop_pod(client, "default", "p", request_timeout=None) == outcome
    else:
        with pytest.raises(outcome) as raised:
            stop_pod(client, "default", "p", request_timeout=None)
        if outcome is StopRefused:
            # The status code and the server's message, for the one WARNING that says why the pod is deleted.
            assert str(error.status) in str(raised.value)  # type: ignore[union-attr]
            assert json.loads(error.body)["message"] in str(raised.value)  # type: ignore[union-attr]
    assert client.sent == [("default", "p", {"spec": {"activeDeadlineSeconds": 1}})]
