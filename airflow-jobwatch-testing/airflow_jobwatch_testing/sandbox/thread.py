"""``SandboxThread``: a :class:`~.sandbox.Sandbox` running in its own event loop in a daemon thread."""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .sandbox import Sandbox

# How long a synchronous call waits for the sandbox loop before giving up; generous because the
# loop may be busy fanning out thousands of events in a benchmark, short enough to fail a hung test.
CALL_TIMEOUT_SECONDS = 60.0


class SandboxThread:
    """Same options and methods as :class:`Sandbox`, synchronous and thread-safe.

    Used by sync tests, by async tests that run their client in their own loop (so the client and
    the server never share a loop), and by benchmarks.
    """

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._sandbox: Sandbox | None = None

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self) -> SandboxThread:
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                self._sandbox = Sandbox(**self._options)
                loop.run_until_complete(self._sandbox.start())
            except BaseException as exc:  # reported to the starting thread
                errors.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name="k8s-sandbox", daemon=True)
        self._thread.start()
        ready.wait()
        if errors:
            raise errors[0]
        return self

    def stop(self) -> None:
        if self._loop is None or self._sandbox is None or self._thread is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._sandbox.stop(), self._loop)
        try:
            fut.result(CALL_TIMEOUT_SECONDS)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CALL_TIMEOUT_SECONDS)
            self._sandbox = None

    def __enter__(self) -> SandboxThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- plumbing --------------------------------------------------------------------------------
    def _call(self, fn: Callable[[Sandbox], Any]) -> Any:
        if self._loop is None or self._sandbox is None:
            raise RuntimeError(
                "the sandbox is not running: use `with SandboxThread(...) as sb:` or call start()"
            )
        sandbox = self._sandbox

        async def run() -> Any:
            result = fn(sandbox)
            if inspect.isawaitable(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(CALL_TIMEOUT_SECONDS)

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            raise RuntimeError("the sandbox is not running")
        return self._sandbox

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the sandbox is not running")
        return self._loop

    @property
    def url(self) -> str:
        return self.sandbox.url

    @property
    def token(self) -> str:
        return self.sandbox.token

    @property
    def port(self) -> int:
        return self.sandbox.port

    @property
    def ca_pem(self) -> bytes | None:
        return self.sandbox.ca_pem

    def write_kubeconfig(
        self, path: str | os.PathLike[str], *, token: str | None = None, namespace: str = "default"
    ) -> str:
        return self.sandbox.write_kubeconfig(path, token=token, namespace=namespace)

    def write_exec_kubeconfig(self, path: str | os.PathLike[str], **options: Any) -> str:
        """See :meth:`Sandbox.write_exec_kubeconfig`."""
        return self.sandbox.write_exec_kubeconfig(path, **options)

    # ---- credentials and in-cluster mode ---------------------------------------------------------
    def issue_token(self, user: str, *, groups: Iterable[str] | None = None, ttl: float | None = None) -> str:
        return str(self._call(lambda sb: sb.issue_token(user, groups=groups, ttl=ttl)))

    def expire_token(self, token: str) -> None:
        self._call(lambda sb: sb.expire_token(token))

    def tokens_seen(self, user: str) -> int:
        return int(self._call(lambda sb: sb.tokens_seen(user)))

    def enable_in_cluster(self, directory: str | os.PathLike[str], **options: Any) -> dict[str, str]:
        """See :meth:`Sandbox.enable_in_cluster`."""
        return dict(self._call(lambda sb: sb.enable_in_cluster(directory, **options)))

    def in_cluster_env(self) -> dict[str, str]:
        return self.sandbox.in_cluster_env()

    def set_watch_cache(self, on: bool) -> None:
        self._call(lambda sb: sb.set_watch_cache(on))

    def set_watch_cache_lag(self, revisions: int) -> None:
        self._call(lambda sb: sb.set_watch_cache_lag(revisions))

    def freeze_watch_cache(self) -> int:
        return int(self._call(lambda sb: sb.freeze_watch_cache()))

    def thaw_watch_cache(self) -> None:
        self._call(lambda sb: sb.thaw_watch_cache())

    def watch_cache_resource_version(self, kind: str = "pods") -> int:
        return int(self._call(lambda sb: sb.watch_cache_resource_version(kind)))

    def set_rbac(self, on: bool) -> None:
        self._call(lambda sb: sb.set_rbac(on))

    def grant(
        self,
        subject: str,
        *,
        verbs: list[str],
        resources: list[str],
        namespace: str | None = None,
        resource_names: list[str] | None = None,
    ) -> None:
        """See :meth:`Sandbox.grant`."""
        self._call(
            lambda sb: sb.grant(
                subject, verbs=verbs, resources=resources, namespace=namespace, resource_names=resource_names
            )
        )

    def load_rbac_manifests(
        self, manifests: str | list[dict[str, Any]], *, namespace: str | None = None
    ) -> list[str]:
        return list(self._call(lambda sb: sb.load_rbac_manifests(manifests, namespace=namespace)))

    def clear_rbac(self) -> None:
        self._call(lambda sb: sb.clear_rbac())

    def rotate_service_account_token(self, *, expire_old: bool = False) -> str:
        return str(self._call(lambda sb: sb.rotate_service_account_token(expire_old=expire_old)))

    # ---- the Sandbox API, synchronously ----------------------------------------------------------
    def set_history_window(self, n: int) -> None:
        self._call(lambda sb: sb.set_history_window(n))

    def current_resource_version(self) -> int:
        return int(self._call(lambda sb: sb.current_resource_version()))

    def drop_watches(self) -> int:
        return int(self._call(lambda sb: sb.drop_watches()))

    def stall_watches(self, on: bool) -> None:
        self._call(lambda sb: sb.stall_watches(on))

    def set_watch_expired(self, on: bool) -> None:
        self._call(lambda sb: sb.set_watch_expired(on))

    def set_error_rate(
        self,
        share: float,
        *,
        status: int = 503,
        retry_after: float | None = None,
        verbs: Iterable[str] | None = None,
    ) -> None:
        self._call(lambda sb: sb.set_error_rate(share, status=status, retry_after=retry_after, verbs=verbs))

    def start_outage(self) -> None:
        self._call(lambda sb: sb.start_outage())

    def end_outage(self) -> None:
        self._call(lambda sb: sb.end_outage())

    def outage(self, seconds: float) -> None:
        self._call(lambda sb: sb.outage(seconds))

    def set_image_pull_failure(self, pattern: str | None) -> None:
        self._call(lambda sb: sb.set_image_pull_failure(pattern))

    def set_native_sidecars(self, on: bool) -> None:
        """See :meth:`Sandbox.set_native_sidecars`."""
        self._call(lambda sb: sb.set_native_sidecars(on))

    def evict_pod(self, namespace: str, name: str) -> None:
        self._call(lambda sb: sb.evict_pod(namespace, name))

    def preempt_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """See :meth:`Sandbox.preempt_pod`."""
        self._call(lambda sb: sb.preempt_pod(namespace, name, grace_seconds))

    def api_evict_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> dict[str, Any]:
        """See :meth:`Sandbox.api_evict_pod`."""
        return dict(self._call(lambda sb: sb.api_evict_pod(namespace, name, grace_seconds)))

    def taint_evict_pod(self, namespace: str, name: str) -> None:
        self._call(lambda sb: sb.taint_evict_pod(namespace, name))

    def kubelet_preempt_pod(self, namespace: str, name: str) -> None:
        self._call(lambda sb: sb.kubelet_preempt_pod(namespace, name))

    def shutdown_node(self, namespace: str | None = None, name: str | None = None) -> int:
        """See :meth:`Sandbox.shutdown_node`."""
        return int(self._call(lambda sb: sb.shutdown_node(namespace, name)))

    def set_pod_quota(self, namespace: str, pods: int | None, name: str = "pod-quota") -> None:
        """See :meth:`Sandbox.set_pod_quota`."""
        self._call(lambda sb: sb.set_pod_quota(namespace, pods, name))

    def pod_quota_usage(self, namespace: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._call(lambda sb: sb.pod_quota_usage(namespace))
        return result

    def set_pod_creation_rate(self, rate: float | None) -> None:
        """See :meth:`Sandbox.set_pod_creation_rate`."""
        self._call(lambda sb: sb.set_pod_creation_rate(rate))

    def set_kueue(self, capacity: int | None, cluster_queue: str = "cluster-queue") -> None:
        """See :meth:`Sandbox.set_kueue`."""
        self._call(lambda sb: sb.set_kueue(capacity, cluster_queue))

    def kueue_preempt(self, namespace: str, name: str, hold_seconds: float = 0.0) -> None:
        """See :meth:`Sandbox.kueue_preempt`."""
        self._call(lambda sb: sb.kueue_preempt(namespace, name, hold_seconds))

    def kueue_state(self) -> dict[str, Any]:
        return dict(self._call(lambda sb: sb.kueue_state()))

    def lose_node(self) -> int:
        return int(self._call(lambda sb: sb.lose_node()))

    def force_delete_pod(self, namespace: str, name: str) -> bool:
        return bool(self._call(lambda sb: sb.force_delete_pod(namespace, name)))

    def counters(self) -> dict[str, int]:
        return dict(self._call(lambda sb: sb.counters()))

    def reset_counters(self) -> None:
        self._call(lambda sb: sb.reset_counters())

    def objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return list(self._call(lambda sb: sb.objects(kind, namespace)))

    def get_object(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._call(lambda sb: sb.get_object(kind, namespace, name))
        return result
