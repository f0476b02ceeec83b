"""An embedded Kubernetes API server for tests, demos and benchmarks (aiohttp, cryptography, stdlib).

It speaks the real REST API for namespaces, pods (+ ``status``, ``log``) and batch/v1 jobs
(+ ``status``) with the semantics watch-based clients depend on: one global resourceVersion,
list/watch with label and field selectors, watch replay from a bounded history and the 410 Expired
ERROR event once a resourceVersion fell out of it, bookmarks, paging with continue tokens,
optimistic concurrency, graceful deletion, finalizers and owner-reference garbage collection.
A kubelet runs each container's command as a local process and a Job controller behaves like
Kubernetes 1.31+ (SuccessCriteriaMet/FailureTarget before Complete/Failed).

Faults, switched at run time (methods on :class:`Sandbox` and :class:`SandboxThread`, or
``POST /_sandbox/fault`` with ``{"action": name, "args": {...}}`` on a sandbox subprocess):

* ``drop_watches()``: cut every open watch connection.
* ``stall_watches(on)``: watches go silent (half-open connection); turning it off only affects new ones.
* ``set_watch_expired(on)``: every watch from a resourceVersion other than unset/"0" gets 410.
* ``set_history_window(n)``: shrink/grow the replay history (a small one makes 410 easy to reach).
* ``set_error_rate(share, status=503, retry_after=None, verbs=None)``: fail a share of API requests.
* ``start_outage()`` / ``end_outage()`` / ``outage(seconds)``: refuse TCP connections, same port after.
* ``set_image_pull_failure(pattern)``: matching images never start (ErrImagePull / ImagePullBackOff).
* ``evict_pod(ns, name)``: Failed / Evicted with the DisruptionTarget condition.
* ``lose_node()`` / ``force_delete_pod(ns, name)``: pods vanish without a terminal status.
* ``counters()`` / ``reset_counters()``: requests per ``"<verb> <resource>"``.
* ``objects(kind, namespace=None)`` / ``get_object(kind, namespace, name)``: the server's truth.

Real-deployment modes (docs/sandbox.md): in-cluster service-account volumes (``enable_in_cluster``),
signed tokens that expire and rotate (``issue_token``, ``expire_token``,
``rotate_service_account_token``), an exec-plugin credential command (``write_exec_kubeconfig``,
``python -m airflow_jobwatch_testing.sandbox.credential``), RBAC (``grant``, ``load_rbac_manifests``,
:func:`.rbac.check_manifests`), a stale watch cache (``set_watch_cache_lag``,
``freeze_watch_cache``), real 422 validation and kubelet termination-message limits.

To run it in another process, :class:`SandboxProcess` starts ``python -m airflow_jobwatch_testing.sandbox``
and waits for its ``ready <url>`` line.

The sandbox never imports the code it is used to test.

Imports nothing of the provider (docs/internals.md, "The map"): the sandbox stands in for a cluster and must
not share code with what it is used to test.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .admin import AdminClient
    from .process import SandboxProcess, SandboxStartError
    from .sandbox import Sandbox
    from .thread import SandboxThread

# Loaded on first use, so that small entry points (the exec-plugin command ``.credential``, which a
# client may run before every request) do not pay for importing aiohttp.
_LAZY = {
    "AdminClient": ".admin",
    "Sandbox": ".sandbox",
    "SandboxProcess": ".process",
    "SandboxStartError": ".process",
    "SandboxThread": ".thread",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = ["AdminClient", "Sandbox", "SandboxProcess", "SandboxStartError", "SandboxThread"]
