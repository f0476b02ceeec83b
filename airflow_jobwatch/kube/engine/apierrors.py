"""What the API server said went wrong, and how two resourceVersions compare.

:class:`KubeApiError` keeps the server's status code, reason and message. The three private exceptions are
signals inside the watch engine (:mod:`airflow_jobwatch.kube.engine.informer`): each one names a Kubernetes
behaviour that the engine's loop answers in its own way (relist, back off, reopen the watch).
"""

from __future__ import annotations

from typing import Any


class KubeApiError(Exception):
    """The API server answered with an error status (HTTP status, or an ERROR event in a watch stream).

    Keeps the server's code, reason and message; ``retry_after`` is the ``Retry-After`` header in seconds
    when the server sent one (429 Too Many Requests, 503).
    """

    def __init__(self, status: int, reason: str, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

        self.causes: tuple[str, ...] = ()

    @classmethod
    def from_status(cls, status: dict[str, Any], *, http_status: int | None = None) -> KubeApiError:
        """From a ``kind: Status`` object (an error body or an ERROR event's object)."""
        code = status.get("code", http_status)
        raw_details = status.get("details")
        details: dict[str, Any] = raw_details if isinstance(raw_details, dict) else {}
        retry = details.get("retryAfterSeconds")
        error = cls(
            int(code) if isinstance(code, int) else (http_status or 0),
            str(status.get("reason") or "Unknown"),
            str(status.get("message") or ""),
            retry_after=float(retry)
            if isinstance(retry, int | float) and not isinstance(retry, bool)
            else None,
        )
        error.causes = tuple(
            str(c.get("reason"))
            for c in details.get("causes") or []
            if isinstance(c, dict) and c.get("reason")
        )
        return error

    @property
    def too_large_resource_version(self) -> bool:
        """The server has not caught up with the resourceVersion we asked for (an HA apiserver whose watch
        cache lags the one we talked to before). The real server answers 504 Timeout with the cause
        ``ResourceVersionTooLarge`` after waiting ~3 s (older servers: only the message "Too large resource
        version"; tests/fixtures and /work/shared/reference/real-apiserver/watch-expired-410.json). Not a
        failure of ours: wait and ask again, as client-go's reflector does."""
        return (
            "ResourceVersionTooLarge" in self.causes or "too large resource version" in self.message.lower()
        )


class Expired(Exception):
    """410 Gone / Expired: the requested resourceVersion (or continue token) is no longer in the server's
    history. The only way forward is a fresh LIST."""


class ShortWatch(Exception):
    """The server closed a watch within MIN_HEALTHY_WATCH_SECONDS without sending anything."""


class Stalled(Exception):
    """No byte arrived on a watch stream for stall_timeout_seconds."""


def compare_resource_versions(a: str | None, b: str | None) -> int | None:
    """-1, 0 or 1 as ``a`` is older than, the same as or newer than ``b``; None when they cannot be compared.

    resourceVersions are opaque strings by contract, but KEP-5504 ("comparable resource versions", Kubernetes
    1.35) makes it official that kube-apiserver's are decimal integers without leading zeros (etcd
    revisions) and may be compared as such: by length, then digit by digit. Anything else (an aggregated
    API's own scheme, an empty string) is not compared, and the caller confirms with a consistent read
    instead of guessing.
    """
    if not a or not b or not a.isdigit() or not b.isdigit() or a[0] == "0" or b[0] == "0":
        return None
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)
