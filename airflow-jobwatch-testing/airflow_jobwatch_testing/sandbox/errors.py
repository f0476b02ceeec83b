"""Kubernetes ``Status`` error objects, shaped exactly like a real kube-apiserver's.

Clients branch on ``code`` and ``reason`` (``kubernetes.client.ApiException.status``, client-go's
``apierrors.IsConflict`` ...), and users read ``message``; the shapes here follow the recordings in
``real-apiserver/errors.json`` field by field, including which errors carry ``details``.
"""

from __future__ import annotations

from typing import Any

# Group and kind spelled the way the real server names a resource in NotFound/Conflict messages
# (``pods "x" not found`` but ``jobs.batch "x" not found``).
RESOURCE_GROUPS: dict[str, str] = {"pods": "", "namespaces": "", "jobs": "batch", "events": ""}
RESOURCE_KINDS: dict[str, str] = {"pods": "Pod", "namespaces": "Namespace", "jobs": "Job", "events": "Event"}

_REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An API request that ends in a ``Status`` failure; the handler turns it into the HTTP answer."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "Unknown")
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        return status_object(self.code, self.message, reason=self.reason, details=self.details)


def status_object(
    code: int, message: str, *, reason: str | None = None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``Status`` failure with the key order of the real server (``details`` before ``code``)."""
    out: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or _REASONS.get(code, "Unknown"),
    }
    if details is not None:
        out["details"] = details
    out["code"] = code
    return out


def qualified(resource: str) -> str:
    """``pods`` -> ``pods``, ``jobs`` -> ``jobs.batch``: how the real server names a resource in messages."""
    group = RESOURCE_GROUPS.get(resource.split("/")[0], "")
    return f"{resource}.{group}" if group else resource


def _details(resource: str, name: str, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    group = RESOURCE_GROUPS.get(resource, "")
    if group:
        details["group"] = group
    details["kind"] = resource
    details.update(extra)
    return details


def not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, f'{qualified(resource)} "{name}" not found', details=_details(resource, name))


def already_exists(resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'{qualified(resource)} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(resource, name),
    )


def conflict(resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified(resource)} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        details=_details(resource, name),
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def invalid(resource: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid. ``causes`` are ``(reason, field, detail)``, e.g.
    ``("FieldValueRequired", "spec.template.spec.containers", "Required value")``."""
    kind = RESOURCE_KINDS.get(resource, resource)
    group = RESOURCE_GROUPS.get(resource, "")
    qualified_kind = f"{kind}.{group}" if group else kind
    # The message de-duplicates like field.ErrorList.ToAggregate(); the causes keep every error.
    parts = list(dict.fromkeys(f"{field}: {detail}" for _reason, field, detail in causes))
    if len(parts) == 1:
        message = f'{qualified_kind} "{name}" is invalid: {parts[0]}'
    else:
        message = f'{qualified_kind} "{name}" is invalid: [{", ".join(parts)}]'
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [
        {"reason": reason, "message": detail, "field": field} for reason, field, detail in causes
    ]
    return ApiError(422, message, details=details)


def expired(message: str) -> ApiError:
    return ApiError(410, message, reason="Expired")


def too_large_resource_version(requested: int, current: int) -> ApiError:
    """504 for a list at a resourceVersion the server (or its watch cache) has not reached
    (recorded in tests/fixtures/real-apiserver/status-504-too-large-resource-version.json)."""
    return ApiError(
        504,
        f"Timeout: Too large resource version: {requested}, current: {current}",
        reason="Timeout",
        details={
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
    )


def too_old_resource_version(requested: int | str, current: int) -> dict[str, Any]:
    """The Status inside the ``ERROR`` watch event for a compacted resourceVersion (watch-expired-410.json)."""
    return status_object(410, f"too old resource version: {requested} ({current})", reason="Expired")
