"""Permission and credential errors: recognised, made permanent, and explained.

A 403 Forbidden (RBAC) or a 401 Unauthorized that persists after the client reloaded its credentials
(see :mod:`airflow_jobwatch.kube.cluster.client`) will not go away by retrying: someone has to grant a
permission or fix a credential. So they are not "the API is unreachable": the trigger ends at once, the
executor fails the task (create) or reports its watcher unhealthy (list/watch), and the message says
which verb on which resource in which namespace was refused, for whom, what the server said, and the
Role rule that would allow it.

Shapes relied on (Kubernetes' RBAC authorizer, ``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/
responsewriters/errors.go`` ``ForbiddenStatusError``)::

    {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
     "message": "pods is forbidden: User \\"system:serviceaccount:airflow:airflow-scheduler\\" cannot list
                 resource \\"pods\\" in API group \\"\\" in the namespace \\"default\\"",
     "details": {"kind": "pods"}}

and a 401 body ``{"kind": "Status", ..., "reason": "Unauthorized", "message": "Unauthorized", "code": 401}``.
Nothing here ever includes a token or the response headers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["AccessDenied", "access_denied_from_exception", "describe_access_denied"]

DEPLOYING_DOC = "docs/deploying.md"

_FORBIDDEN_RE = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>[\w-]+) resource "(?P<resource>[^"]*)"'
    r'(?: in API group "(?P<group>[^"]*)")?(?: in the namespace "(?P<namespace>[^"]*)")?'
)
_SA_RE = re.compile(r"^system:serviceaccount:(?P<ns>[^:]+):(?P<name>[^:]+)$")


@dataclass(frozen=True)
class AccessDenied:
    """A refused request, with everything needed to explain it.

    :param status: 401 or 403.
    :param verb: the Kubernetes verb (list, watch, get, create, delete, patch).
    :param resource: plural resource, with a subresource if any (``pods``, ``pods/log``, ``jobs``).
    :param group: API group ("" for core, "batch" for Jobs).
    :param namespace: the namespace, or None for a cluster-wide request.
    :param server_message: what the API server said (no headers, no credentials).
    :param user: who the server says we are (``system:serviceaccount:ns:name``), when it said so.
    """

    status: int
    verb: str
    resource: str
    group: str
    namespace: str | None
    server_message: str
    user: str | None = None

    @property
    def reason(self) -> str:
        return "Forbidden" if self.status == 403 else "Unauthorized"

    def role_rule(self) -> str:
        """The Role (or ClusterRole, for all namespaces) rule that allows the refused request, as YAML."""
        return f'- apiGroups: ["{self.group}"]\n  resources: ["{self.resource}"]\n  verbs: ["{self.verb}"]'

    def message(self) -> str:
        where = f'in namespace "{self.namespace}"' if self.namespace else "in all namespaces (cluster-wide)"
        what = f"{self.verb} {self.resource}" + (f" (API group {self.group})" if self.group else "")
        if self.status == 401:
            return (
                f"Kubernetes rejected our credentials (401 Unauthorized) to {what} {where}, also after "
                f"reloading them: {self.server_message or 'Unauthorized'}. The token has expired or was "
                "revoked, or the exec credential plugin returns a stale one: check the kubeconfig user / "
                "the service account token (see the troubleshooting table in " + DEPLOYING_DOC + ")."
            )
        who = ""
        binding = "to the identity the executor/triggerer/worker runs as"
        if self.user:
            sa = _SA_RE.match(self.user)
            who = f" for {self.user}"
            if sa:
                binding = f"to service account {sa['name']!r} (namespace {sa['ns']!r})"
            else:
                binding = f"to user {self.user!r}"
        kind = "Role" if self.namespace else "ClusterRole"
        rule = f'apiGroups: ["{self.group}"], resources: ["{self.resource}"], verbs: ["{self.verb}"]'
        return (
            f"Kubernetes refused to {what} {where}{who} (403 Forbidden): {self.server_message}. "
            f"Grant it {binding} with a {kind} rule {{{rule}}} and a "
            f"{'RoleBinding' if self.namespace else 'ClusterRoleBinding'} (manifests in {DEPLOYING_DOC})."
        )

    def __str__(self) -> str:
        return self.message()


def _server_message(body: Any) -> str:
    """The ``message`` of a Status body (bytes/str JSON), or a short text; never headers."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            data = json.loads(body)
        except ValueError:
            return body.strip()[:300]
    else:
        data = body
    if isinstance(data, dict):
        return str(data.get("message") or data.get("reason") or "")[:1000]
    return ""


def describe_access_denied(
    status: int,
    server_message: str,
    *,
    verb: str,
    resource: str,
    group: str = "",
    namespace: str | None,
) -> AccessDenied:
    """Build an :class:`AccessDenied`; the server's own 403 message, when it has the RBAC shape, wins
    over what the caller guessed (it names the user and the exact verb/resource/namespace)."""
    user = None
    match = _FORBIDDEN_RE.search(server_message or "")
    if match:
        user = match["user"]
        verb = match["verb"]
        resource = match["resource"]
        group = match["group"] if match["group"] is not None else group
        namespace = match["namespace"] if match["namespace"] is not None else namespace
    return AccessDenied(
        status=status,
        verb=verb,
        resource=resource,
        group=group,
        namespace=namespace,
        server_message=server_message,
        user=user,
    )


def access_denied_from_exception(
    exc: BaseException, *, verb: str, resource: str, group: str = "", namespace: str | None
) -> AccessDenied | None:
    """An AccessDenied for a ``kubernetes`` / ``kubernetes_asyncio`` ``ApiException`` with status 401 or
    403 (not a quota refusal: "exceeded quota" is a 403 that goes away), else None."""
    status = getattr(exc, "status", None)
    if status not in (401, 403):
        return None
    message = _server_message(getattr(exc, "body", None)) or str(getattr(exc, "reason", "") or "")
    if status == 403 and "exceeded quota" in message:
        return None
    return describe_access_denied(
        status, message, verb=verb, resource=resource, group=group, namespace=namespace
    )
