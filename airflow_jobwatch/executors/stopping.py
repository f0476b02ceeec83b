"""Stopping a replaced pod that could still start, without freeing its name.

A pod of a launch that failed while still Pending on a fatal waiting reason (``ErrImagePull``...) could yet
start and run the try. Deleting it would free its name, and the launch's names are the fence that keeps an
adopter from creating a second pod of the launch (docs/executor.md, "One pod per launch"). So it is stopped
instead: ``spec.activeDeadlineSeconds`` is set to 1, which the API server lets a client set where it is
unset or lower it where it is set (``ValidatePodUpdate``), and the kubelet, which reads it at every sync
counted from ``status.startTime``, fails the pod (``DeadlineExceeded``) and kills its containers. The
object, and with it the name, stays until it is released with the other replaced pods of its launch.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

# The lowest deadline the API server accepts on a pod (ValidatePodSpec: 1 or more): the pod has been
# Pending for longer than this already, so the kubelet fails it at its next sync.
STOP_DEADLINE_SECONDS = 1

# A stop that gets no decision from the server (connection refused, timeout, 429, 5xx) is retried with this
# backoff (equal jitter, doubling); after this many attempts the pod is deleted instead, as it was before
# stops existed: a pod that could still start is never left to run for want of a patch that goes through.
STOP_BACKOFF_INITIAL_SECONDS = 1.0
STOP_BACKOFF_MAX_SECONDS = 30.0
STOP_ATTEMPTS = 5

STOPPED = "stopped"
GONE = "gone"  # 404: nothing left to stop
BOUNDED = "bounded"  # 422: a lower deadline is already set, so the pod is already bounded


class StopRefused(Exception):
    """The API server refused the stop for a reason that a retry will not change (403, an unexpected 422):
    the caller deletes the pod instead. The message keeps the status code and the server's message."""


def stop_pod(core_v1: Any, namespace: str, name: str, *, request_timeout: Any) -> str:
    """Stop pod ``namespace/name`` (see the module docstring): :data:`STOPPED`, :data:`GONE` or
    :data:`BOUNDED`. Raises :class:`StopRefused` for a refusal; errors without an answer propagate."""
    from kubernetes.client.exceptions import ApiException

    try:
        core_v1.patch_namespaced_pod(
            name,
            namespace,
            {"spec": {"activeDeadlineSeconds": STOP_DEADLINE_SECONDS}},
            _request_timeout=request_timeout,
        )
    except ApiException as err:
        if err.status == HTTPStatus.NOT_FOUND:
            return GONE
        if err.status == HTTPStatus.UNPROCESSABLE_ENTITY and _lower_deadline_set(err.body):
            return BOUNDED
        if err.status is None or err.status >= HTTPStatus.INTERNAL_SERVER_ERROR or err.status == 429:
            raise  # no decision from the server: retried with backoff
        raise StopRefused(f"{err.status} {err.reason}: {_message(err.body)}") from None
    return STOPPED


def _lower_deadline_set(body: Any) -> bool:
    """Whether a 422's causes say that ``spec.activeDeadlineSeconds`` is already set lower than asked."""
    try:
        status = json.loads(body)
    except (TypeError, ValueError):
        return False
    if not isinstance(status, dict):
        return False
    causes = (status.get("details") or {}).get("causes") or []
    return any(
        isinstance(c, dict)
        and c.get("field") == "spec.activeDeadlineSeconds"
        and "less than or equal to previous value" in str(c.get("message", ""))
        for c in causes
    )


def _message(body: Any) -> str:
    try:
        status = json.loads(body)
    except (TypeError, ValueError):
        return str(body or "")[:500]
    return str(status.get("message", "")) if isinstance(status, dict) else str(status)[:500]
