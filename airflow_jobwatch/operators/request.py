"""The Job request and its Kubernetes calls: the Job built from upstream's arguments, created or adopted
(a retried worker finds the Job of its own try), and the trigger that waits for it."""

from __future__ import annotations

import json

from kubernetes.client.rest import ApiException

__all__ = ["api_error_message"]


def api_error_message(e: ApiException) -> str:
    """The API server's own message from a Status body, or the HTTP reason."""
    try:
        body = json.loads(e.body or "{}")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except (TypeError, ValueError):
        pass
    return f"{e.status} {e.reason}"
