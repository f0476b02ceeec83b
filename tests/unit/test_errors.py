"""kube/cluster/errors.py: 401/403 bodies shaped like the real server's become an explanation with what to grant.

Each row: a Status body (tests/unit/fixtures/errors/, shapes from the Kubernetes source), what the
caller was doing, and what the explanation must say. The exception is a real ``ApiException`` of the
``kubernetes`` client built from an HTTP response, as the client raises it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from airflow_jobwatch.kube.cluster.errors import access_denied_from_exception

STATUSES = json.loads((Path(__file__).parent / "fixtures" / "errors" / "statuses.json").read_text())


class _Response:
    """The three attributes ApiException(http_resp=...) reads."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.status = body["code"]
        self.reason = body["reason"]
        self.data = json.dumps(body).encode()

    def getheaders(self) -> dict[str, str]:
        return {"Content-Type": "application/json", "Audit-Id": "SECRET-HEADER-VALUE"}


@pytest.mark.parametrize(
    ("case", "called", "expected"),
    [
        (
            "list pods forbidden",
            ("list", "pods", "", "default"),
            [
                "list pods",
                'in namespace "default"',
                "service account 'airflow-scheduler' (namespace 'airflow')",
                "Role rule",
                "RoleBinding",
            ],
        ),
        (
            "watch pods cluster-wide forbidden",
            ("watch", "pods", "", None),
            ["watch pods", "all namespaces", "ClusterRole rule", "ClusterRoleBinding"],
        ),
        (
            "get job forbidden",
            ("get", "jobs", "batch", "jobs"),
            [
                "get jobs (API group batch)",
                'in namespace "jobs"',
                "airflow-triggerer",
                'apiGroups: ["batch"]',
            ],
        ),
        (
            "pods/log forbidden for a user",
            ("get", "pods", "", "default"),  # the server's message is more precise: pods/log
            ["get pods/log", "to user 'alice@example.com'", 'resources: ["pods/log"]'],
        ),
        ("unauthorized", ("list", "pods", "", "default"), ["401 Unauthorized", "after reloading", "expired"]),
    ],
)
def test_explained(case: str, called: tuple[str, str, str, str | None], expected: list[str]) -> None:
    verb, resource, group, namespace = called
    exc = ApiException(http_resp=_Response(STATUSES[case]))
    denied = access_denied_from_exception(exc, verb=verb, resource=resource, group=group, namespace=namespace)
    assert denied is not None
    message = denied.message()
    for part in expected:
        assert part in message, (part, message)
    assert STATUSES[case]["message"] in message  # the server's own words
    assert "SECRET-HEADER-VALUE" not in message and "HTTP response headers" not in message


def test_role_rule_is_valid_yaml_granting_exactly_the_refused_request() -> None:
    exc = ApiException(http_resp=_Response(STATUSES["get job forbidden"]))
    denied = access_denied_from_exception(exc, verb="get", resource="jobs", namespace="jobs")
    assert denied is not None
    assert yaml.safe_load(denied.role_rule()) == [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}
    ]


@pytest.mark.parametrize("case", ["quota"])
def test_quota_403_is_not_a_permission_error(case: str) -> None:
    exc = ApiException(http_resp=_Response(STATUSES[case]))
    assert access_denied_from_exception(exc, verb="create", resource="pods", namespace="default") is None


@pytest.mark.parametrize("status", [404, 409, 500, 0])
def test_other_statuses_are_not_permission_errors(status: int) -> None:
    assert (
        access_denied_from_exception(ApiException(status=status), verb="get", resource="pods", namespace="x")
        is None
    )
