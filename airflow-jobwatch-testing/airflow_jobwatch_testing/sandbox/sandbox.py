"""``Sandbox``: the embedded Kubernetes API emulator running in the caller's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from .auth import Authenticator, service_account_user
from .errors import ApiError, not_found
from .gc import GarbageCollector
from .incluster import ROTATE_AT_SHARE_OF_TTL, ServiceAccountVolume, parse_service_account
from .kubeconfig import exec_kubeconfig_text, kubeconfig_text, write_private_file
from .rbac import Rbac
from .server import ApiServer
from .store import Store, clone

log = logging.getLogger(__name__)


class Sandbox:
    """An in-process Kubernetes API server (namespaces, pods, batch/v1 jobs) with a kubelet that runs
    containers as local processes, a Job controller, a garbage collector and fault injection.

    Use it as ``async with Sandbox(...) as sb:`` inside a running event loop; every method below is a
    plain method to call from that loop. :class:`~.thread.SandboxThread` runs the same thing in a
    background thread with thread-safe synchronous methods.

    :param port: TCP port on 127.0.0.1 (0 = any free port; an outage reopens the same one).
    :param history_window: number of past changes kept for watch replay; a watch from an older
        resourceVersion gets the 410 Expired ERROR event (the real server keeps ~5 minutes).
    :param bookmark_interval: seconds between BOOKMARK events on watches that allow them (None = never).
    :param kubelet: run pods as local subprocesses (False: pods stay Pending, unscheduled).
    :param job_controller: run the Job controller (False: Jobs get no pods and no status).
    :param pod_start_delay: seconds a pod stays Pending (ContainerCreating) before its containers start.
    :param pod_creation_rate: pods per second the Job controller creates in all (None: at once); see
        :meth:`set_pod_creation_rate`.
    :param inherit_env: container processes get this process's environment overlaid with the
        container's ``env``, and ``PATH`` starting with the directory of ``sys.executable``.
    :param token: bearer token clients must send (random when None).
    :param namespaces: namespaces that exist at start.
    :param tls: serve HTTPS with a throw-away self-signed certificate (its CA goes into the
        kubeconfig). Needed for kubectl, which sends the bearer token only over TLS.
    :param signing_key: HMAC key of the signed (expiring) tokens (random when None).
    :param in_cluster_dir: write a service-account volume (``token``, ``ca.crt``, ``namespace``) to
        this directory at start, see :meth:`enable_in_cluster`. Implies ``tls=True``.
    :param service_account: ``"namespace:name"`` of the in-cluster service account.
    :param token_ttl: seconds the in-cluster token is valid (None: it never expires).
    :param rotate_tokens: rewrite the in-cluster token file at 80% of ``token_ttl`` like the kubelet.
    :param rbac: authorize requests with RBAC rules (:meth:`grant`, :meth:`load_rbac_manifests`);
        off: every authenticated user may do everything. The admin token is never refused.
    :param watch_cache: answer ``resourceVersion=0`` and ``NotOlderThan`` lists from the watch cache,
        ignoring ``limit`` for ``resourceVersion=0`` (a real server's default). Off (the sandbox's
        default, so existing tests that page RV=0 lists keep working): every list is a consistent,
        pageable read. A lag or a freeze turns it on.
    :param watch_cache_lag: revisions the watch cache lags behind (see :meth:`set_watch_cache_lag`);
        > 0 turns the watch cache on.
    :param simulate_pods: run every pod simulated (no host process; see ``sandbox/simulated.py``),
        unless its annotation ``sandbox.jobwatch.io/simulate`` is ``"false"``.
    :param simulated_namespaces: namespaces whose pods run simulated.
    :param simulated_default_seconds: how long a simulated container whose command cannot be read
        (and has no duration annotation) runs.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        history_window: int = 10000,
        bookmark_interval: float | None = 5.0,
        kubelet: bool = True,
        job_controller: bool = True,
        pod_start_delay: float = 0.0,
        pod_creation_rate: float | None = None,
        inherit_env: bool = True,
        token: str | None = None,
        namespaces: Iterable[str] = ("default",),
        host: str = "127.0.0.1",
        tls: bool = False,
        signing_key: bytes | None = None,
        in_cluster_dir: str | os.PathLike[str] | None = None,
        service_account: str = "default:default",
        token_ttl: float | None = None,
        rotate_tokens: bool = True,
        rbac: bool = False,
        watch_cache: bool = False,
        watch_cache_lag: int = 0,
        simulate_pods: bool = False,
        simulated_namespaces: Iterable[str] = (),
        simulated_default_seconds: float = 60.0,
    ) -> None:
        if history_window < 0:
            raise ValueError(f"history_window must be >= 0, got {history_window}")
        if bookmark_interval is not None and bookmark_interval <= 0:
            raise ValueError(f"bookmark_interval must be > 0 seconds or None, got {bookmark_interval}")
        if pod_start_delay < 0:
            raise ValueError(f"pod_start_delay must be >= 0 seconds, got {pod_start_delay}")
        if pod_creation_rate is not None and not pod_creation_rate > 0:
            raise ValueError(
                f"pod_creation_rate must be > 0 pods per second or None, got {pod_creation_rate}"
            )
        if token_ttl is not None and token_ttl <= 0:
            raise ValueError(f"token_ttl must be > 0 seconds or None, got {token_ttl}")
        parse_service_account(service_account)  # fail early on a malformed one
        if simulated_default_seconds < 0:
            raise ValueError(
                f"simulated_default_seconds must be >= 0 seconds, got {simulated_default_seconds}"
            )
        self.simulate_pods = simulate_pods
        self.simulated_namespaces = frozenset(simulated_namespaces)
        self.simulated_default_seconds = simulated_default_seconds
        # record_pod_ends(): pod uid -> when its terminal phase was first committed (off until called)
        self._pod_ends: dict[str, dict[str, Any]] = {}
        self._pod_ends_limit = 0
        self.host = host
        self.port = port
        self.tls = tls or in_cluster_dir is not None
        self._in_cluster_options: dict[str, Any] | None = (
            {
                "directory": in_cluster_dir,
                "service_account": service_account,
                "token_ttl": token_ttl,
                "rotate": rotate_tokens,
            }
            if in_cluster_dir is not None
            else None
        )
        self.sa_volume: ServiceAccountVolume | None = None
        self._sa_user = ""
        self._sa_namespace = ""
        self._sa_token_ttl: float | None = None
        self._sa_rotate_task: asyncio.Task[None] | None = None
        self._ssl_context: Any = None
        self.ca_pem: bytes | None = None
        self.bookmark_interval = bookmark_interval
        self.pod_start_delay = pod_start_delay
        self._pod_creation_rate = pod_creation_rate
        self.inherit_env = inherit_env
        self.token = token or secrets.token_urlsafe(24)
        self.auth = Authenticator(self.token, signing_key)
        self.rbac = Rbac(enabled=rbac)
        self._initial_namespaces = tuple(namespaces)
        self._want_kubelet = kubelet
        self._want_job_controller = job_controller
        self.store = Store(history_window=history_window)
        self.api = ApiServer(self)
        self.set_watch_cache(watch_cache)
        if watch_cache_lag:
            self.set_watch_cache_lag(watch_cache_lag)
        self.gc = GarbageCollector(self)
        from .admin import AdminHandler

        self.admin = AdminHandler(self)
        self.kubelet: Any = None
        self.job_controller: Any = None
        from .disruption import PodQuota
        from .kueue import Kueue

        self.pod_quota = PodQuota(self)
        self.kueue = Kueue(self)
        self.native_sidecars = True  # set_native_sidecars
        self._runner: web.ServerRunner | None = None
        self._site: web.TCPSite | None = None
        self._outage_task: asyncio.Task[None] | None = None
        self._in_outage = False
        self.image_pull_failure: re.Pattern[str] | None = None

    # ---- lifecycle -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}"

    async def start(self) -> Sandbox:
        if self.tls and self._ssl_context is None:
            from .tls import self_signed_context

            self._ssl_context, self.ca_pem = self_signed_context(self.host)
        for ns in self._initial_namespaces:
            if self.store.get("namespaces", "", ns) is None:
                self.api.create("namespaces", None, {"metadata": {"name": ns}})
        if self._want_kubelet:
            from .kubelet import Kubelet

            self.kubelet = Kubelet(self)
        if self._want_job_controller:
            from .jobcontroller import JobController

            self.job_controller = JobController(self)
        server = web.Server(self.api.handle, access_log=None)
        # At stop, request handlers still running after their connections were aborted get at most 5 s
        # (aiohttp's default is 60 s), so that stopping the sandbox stays short.
        self._runner = web.ServerRunner(server, handle_signals=False, access_log=None, shutdown_timeout=5.0)
        await self._runner.setup()
        await self._open_site()
        if self.kubelet is not None:
            self.kubelet.start()
        if self.job_controller is not None:
            self.job_controller.start()
            if self._pod_creation_rate is not None:
                self.job_controller.set_pod_creation_rate(self._pod_creation_rate)
        if self._in_cluster_options is not None:
            self.enable_in_cluster(**self._in_cluster_options)
        return self

    async def _open_site(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(
            self._runner, self.host, self.port, reuse_address=True, ssl_context=self._ssl_context
        )
        await self._site.start()
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop everything: watches end, pod processes are killed, the port is closed."""
        if self._outage_task is not None:
            self._outage_task.cancel()
        if self._sa_rotate_task is not None:
            self._sa_rotate_task.cancel()
        if self.job_controller is not None:
            await self.job_controller.stop()
        self.kueue.stop()
        if self.kubelet is not None:
            await self.kubelet.stop()
        for watcher in self.store.all_watchers():
            watcher.close("shutdown")
        if self._runner is not None:
            self._abort_connections()
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Sandbox:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def write_kubeconfig(
        self, path: str | os.PathLike[str], *, token: str | None = None, namespace: str = "default"
    ) -> str:
        """Write a kubeconfig (server = url, user = bearer token, current-context set), mode 0600.

        :param token: the user's bearer token (default: the admin token, which RBAC never refuses);
            e.g. one from :meth:`issue_token`.
        """
        text = kubeconfig_text(self.url, token or self.token, ca_pem=self.ca_pem, namespace=namespace)
        return write_private_file(path, text)

    def write_exec_kubeconfig(
        self,
        path: str | os.PathLike[str],
        *,
        user: str = "sandbox-exec-user",
        token_ttl: float = 60.0,
        key_file: str | os.PathLike[str] | None = None,
        namespace: str = "default",
    ) -> str:
        """Write a kubeconfig whose user is an exec plugin (``python -m airflow_jobwatch_testing.sandbox.credential``)
        handing out tokens for ``user`` that expire after ``token_ttl`` seconds, like EKS or GKE.

        The plugin needs the token-signing key: it is written to ``key_file`` (default: ``path`` +
        ``.signing-key``), mode 0600. Returns the kubeconfig's path.
        """
        if token_ttl <= 0:
            raise ValueError(f"token_ttl must be > 0 seconds, got {token_ttl}")
        key_path = os.fspath(key_file) if key_file is not None else os.fspath(path) + ".signing-key"
        write_private_file(key_path, self.auth.key)
        text = exec_kubeconfig_text(
            self.url,
            key_file=os.path.abspath(key_path),
            user=user,
            token_ttl=token_ttl,
            ca_pem=self.ca_pem,
            namespace=namespace,
        )
        return write_private_file(path, text)

    # ---- credentials -----------------------------------------------------------------------------
    def issue_token(self, user: str, *, groups: Iterable[str] | None = None, ttl: float | None = None) -> str:
        """A new bearer token for ``user`` (e.g. ``system:serviceaccount:airflow:scheduler``) that the
        server refuses with 401 once ``ttl`` seconds have passed (None: never)."""
        return self.auth.issue(user, groups=tuple(groups) if groups is not None else None, ttl=ttl)

    def expire_token(self, token: str) -> None:
        """Refuse ``token`` with 401 from now on (as if it had expired)."""
        self.auth.expire(token)

    def tokens_seen(self, user: str) -> int:
        """How many distinct tokens the server accepted for ``user`` (2+ shows a client refreshed)."""
        return self.auth.tokens_seen(user)

    # ---- RBAC ------------------------------------------------------------------------------------
    def set_rbac(self, on: bool) -> None:
        """Switch RBAC on (users need a rule for every request; 403 otherwise) or off."""
        self.rbac.enabled = bool(on)

    def grant(
        self,
        subject: str,
        *,
        verbs: list[str],
        resources: list[str],
        namespace: str | None = None,
        resource_names: list[str] | None = None,
    ) -> None:
        """Allow ``subject`` (a user, e.g. ``system:serviceaccount:airflow:scheduler``, or
        ``group:<name>``) ``verbs`` on ``resources`` (``pods``, ``pods/log``, ``jobs``, ``*``...) in
        ``namespace`` (None: every namespace and cluster scope). Turns RBAC on."""
        self.rbac.grant(
            subject,
            verbs=verbs,
            resources=resources,
            namespace=namespace,
            resource_names=resource_names or (),
        )
        self.rbac.enabled = True

    def load_rbac_manifests(
        self, manifests: str | list[dict[str, Any]], *, namespace: str | None = None
    ) -> list[str]:
        """Load Role/ClusterRole/RoleBinding/ClusterRoleBinding manifests (YAML text or dicts) as
        ``kubectl apply -n namespace`` would, and turn RBAC on. Returns what was loaded
        (``kind/namespace/name``)."""
        loaded = self.rbac.load_manifests(manifests, namespace=namespace)
        self.rbac.enabled = True
        return loaded

    def clear_rbac(self) -> None:
        """Forget every role, binding and grant (RBAC stays on or off as it is)."""
        self.rbac.clear()

    # ---- in-cluster mode -------------------------------------------------------------------------
    def enable_in_cluster(
        self,
        directory: str | os.PathLike[str],
        *,
        service_account: str = "default:default",
        token_ttl: float | None = None,
        rotate: bool = True,
    ) -> dict[str, str]:
        """Write a service-account volume (``token``, ``ca.crt``, ``namespace``) to ``directory``.

        The token is for ``system:serviceaccount:<namespace>:<name>``; with ``token_ttl`` it expires
        (401 afterwards) and, when ``rotate``, a new one is written at 80% of its lifetime, like the
        kubelet does for projected tokens. The service account's namespace is created if missing.
        Returns :meth:`in_cluster_env` plus the file paths.
        """
        if not self.tls or self.ca_pem is None:
            raise RuntimeError(
                "in-cluster mode needs the sandbox to serve HTTPS (Sandbox(tls=True)): "
                "load_incluster_config() always connects to https://KUBERNETES_SERVICE_HOST:PORT"
            )
        if token_ttl is not None and token_ttl <= 0:
            raise ValueError(f"token_ttl must be > 0 seconds or None, got {token_ttl}")
        ns, name = parse_service_account(service_account)
        if self.store.get("namespaces", "", ns) is None:
            self.api.create("namespaces", None, {"metadata": {"name": ns}})
        self.sa_volume = ServiceAccountVolume(directory)
        self._sa_user = service_account_user(ns, name)
        self._sa_namespace = ns
        self._sa_token_ttl = token_ttl
        self.rotate_service_account_token()
        if self._sa_rotate_task is not None:
            self._sa_rotate_task.cancel()
            self._sa_rotate_task = None
        if token_ttl is not None and rotate:
            self._sa_rotate_task = asyncio.get_running_loop().create_task(self._rotate_forever(token_ttl))
        return {
            **self.in_cluster_env(),
            "token": str(self.sa_volume.token_path),
            "ca.crt": str(self.sa_volume.ca_path),
            "namespace": str(self.sa_volume.namespace_path),
            "user": self._sa_user,
        }

    def in_cluster_env(self) -> dict[str, str]:
        """The environment a pod gets: ``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT``."""
        return {"KUBERNETES_SERVICE_HOST": self.host, "KUBERNETES_SERVICE_PORT": str(self.port)}

    def rotate_service_account_token(self, *, expire_old: bool = False) -> str:
        """Write a new service-account token to the in-cluster token file (atomically); the old one
        keeps working until its own expiry unless ``expire_old``. Returns the new token."""
        if self.sa_volume is None or self.ca_pem is None:
            raise RuntimeError("in-cluster mode is off: call enable_in_cluster(directory) first")
        old = self.sa_volume.read_token() if self.sa_volume.token_path.exists() else None
        token = self.auth.issue(self._sa_user, ttl=self._sa_token_ttl)
        self.sa_volume.write(token=token, ca_pem=self.ca_pem, namespace=self._sa_namespace)
        if expire_old and old:
            self.auth.expire(old)
        return token

    async def _rotate_forever(self, ttl: float) -> None:
        while True:
            await asyncio.sleep(ttl * ROTATE_AT_SHARE_OF_TTL)
            self.rotate_service_account_token()

    # ---- inspection ------------------------------------------------------------------------------
    def current_resource_version(self) -> int:
        return self.store.rv

    def set_history_window(self, n: int) -> None:
        self.store.set_history_window(int(n))

    def counters(self) -> dict[str, int]:
        return dict(self.api.counters)

    def reset_counters(self) -> None:
        self.api.counters.clear()

    def record_pod_ends(self, limit: int = 100_000) -> None:
        """From now on, note the moment (``time.time()``, sub-millisecond, unlike ``finishedAt``'s 1 s)
        at which each pod's status first commits a terminal phase, for :meth:`pod_ends`. At most
        ``limit`` pods are kept, the oldest dropped first; calling it again clears what was noted."""
        if int(limit) < 1:
            raise ValueError(f"limit must be >= 1 pods, got {limit!r}")
        self._pod_ends_limit = int(limit)
        self._pod_ends = {}
        if self._on_pod_end not in self.store.listeners:
            self.store.listeners.append(self._on_pod_end)

    def _on_pod_end(self, event: Any) -> None:
        if event.resource != "pods" or event.type == "DELETED":
            return
        meta = event.obj.get("metadata") or {}
        uid = meta.get("uid", "")
        phase = (event.obj.get("status") or {}).get("phase")
        if phase not in ("Succeeded", "Failed") or uid in self._pod_ends:
            return
        if len(self._pod_ends) >= self._pod_ends_limit:
            self._pod_ends.pop(next(iter(self._pod_ends)))
        self._pod_ends[uid] = {
            "namespace": meta.get("namespace", ""),
            "name": meta.get("name", ""),
            "annotations": dict(meta.get("annotations") or {}),
            "phase": phase,
            "at": time.time(),
        }

    def pod_ends(self) -> list[dict[str, Any]]:
        """The pods noted since :meth:`record_pod_ends`: namespace, name, annotations, terminal phase and
        the wall-clock moment it was committed."""
        return list(self._pod_ends.values())

    def objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Deep copies (with kind/apiVersion, as GET returns them) of the stored objects of ``kind``."""
        self._check_kind(kind)
        return [json.loads(e.full) for e in self.store.iter(kind, namespace)]

    def get_object(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        self._check_kind(kind)
        entry = self.store.get(kind, namespace or "", name)
        return json.loads(entry.full) if entry is not None else None

    @staticmethod
    def _check_kind(kind: str) -> None:
        if kind not in ("pods", "jobs", "namespaces", "events"):
            raise ValueError(f"unknown kind {kind!r}: expected 'pods', 'jobs', 'namespaces' or 'events'")

    # ---- watch faults ----------------------------------------------------------------------------
    def drop_watches(self) -> int:
        """Cut every open watch connection now (clients see the stream break). Returns how many."""
        watchers = self.store.all_watchers()
        for watcher in watchers:
            watcher.close("dropped")
        return len(watchers)

    def stall_watches(self, on: bool) -> None:
        """While on, open and new watches send nothing (no events, bookmarks or timeout end), like a
        half-open connection. Turning it off affects only new watches: stalled ones stay silent."""
        self.store.stall_new_watches = bool(on)
        if on:
            for watcher in self.store.all_watchers():
                watcher.stalled = True
                watcher.wakeup.set()

    def set_watch_expired(self, on: bool) -> None:
        """While on, every watch from a resourceVersion other than unset/"0" gets 410 at once."""
        self.api.watch_expired = bool(on)

    # ---- stale reads -------------------------------------------------------------------------------
    def set_watch_cache(self, on: bool) -> None:
        """On (as on a real server): ``resourceVersion=0`` lists come from the watch cache, whole
        (``limit`` ignored), and ``NotOlderThan`` lists are answered from it. Off (the sandbox's
        default): every list is a consistent read that pages. Off also ends a lag or a freeze."""
        self.api.watch_cache = bool(on)
        if not on:
            self.api.cache_lag = 0
            self.api.cache_frozen_at = None

    def set_watch_cache_lag(self, revisions: int) -> None:
        """The watch cache shows the state of ``revisions`` changes ago: a ``resourceVersion=0`` list
        can miss objects created since and show objects deleted since (as an HA server whose cache
        lags does). The lag is bounded by the history window. 0: the cache is current. Turns the
        watch cache on."""
        revisions = int(revisions)
        if revisions < 0:
            raise ValueError(f"revisions must be >= 0, got {revisions}")
        self.api.watch_cache = True
        self.api.cache_lag = revisions
        self.api.cache_frozen_at = None

    def freeze_watch_cache(self) -> int:
        """Stop the watch cache at the current revision until :meth:`thaw_watch_cache`; returns it.
        Turns the watch cache on."""
        self.api.watch_cache = True
        self.api.cache_frozen_at = self.store.rv
        return self.store.rv

    def thaw_watch_cache(self) -> None:
        """Let a frozen (or lagging) watch cache catch up at once (it stays on)."""
        self.api.cache_frozen_at = None
        self.api.cache_lag = 0

    def watch_cache_resource_version(self, kind: str = "pods") -> int:
        """The revision the watch cache of ``kind`` shows now."""
        self._check_kind(kind)
        return self.api.cache_rv(kind)

    # ---- request faults --------------------------------------------------------------------------
    def set_error_rate(
        self,
        share: float,
        *,
        status: int = 503,
        retry_after: float | None = None,
        verbs: Iterable[str] | None = None,
    ) -> None:
        """Answer ``share`` (0..1) of API requests (optionally only ``verbs``) with ``status``."""
        share = float(share)
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share must be between 0 and 1, got {share}")
        if not 400 <= int(status) <= 599:
            raise ValueError(f"status must be an HTTP error code (400-599), got {status}")
        self.api.error_rate = share
        self.api.error_status = int(status)
        self.api.error_retry_after = retry_after
        self.api.error_verbs = set(verbs) if verbs is not None else None

    # ---- outages ---------------------------------------------------------------------------------
    def _abort_connections(self) -> None:
        if self._runner is None or self._runner.server is None:
            return
        for handler in self._runner.server.connections:
            transport = handler.transport
            if transport is not None:
                transport.abort()

    def start_outage(self) -> None:
        """Refuse all TCP connections: close the listening socket and every open connection."""
        if self._in_outage:
            return
        self._in_outage = True
        for watcher in self.store.all_watchers():
            watcher.close("outage")
        # An outage refuses connections at once, from a method that cannot await: the listening socket is
        # closed through the site's asyncio Server (aiohttp has no public synchronous close; TCPSite.stop()
        # is a coroutine, and it is awaited when the outage ends).
        if self._site is not None and self._site._server is not None:
            self._site._server.close()
        self._abort_connections()

    def end_outage(self) -> asyncio.Task[None]:
        """Listen again on the same port. Returns a task; await it to be sure the port is open."""
        if self._outage_task is not None and not self._outage_task.done():
            self._outage_task.cancel()
        return asyncio.get_running_loop().create_task(self._reopen())

    async def _reopen(self) -> None:
        if not self._in_outage or self._runner is None:
            return
        assert self._site is not None
        with contextlib.suppress(RuntimeError):
            await self._site.stop()
        # The kernel may keep the port briefly; retry with a short doubling delay (bounded).
        delay = 0.01
        for _attempt in range(12):
            try:
                await self._open_site()
                break
            except OSError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
        else:
            raise RuntimeError(f"could not listen on {self.host}:{self.port} again after the outage")
        self._in_outage = False

    def outage(self, seconds: float) -> None:
        """An outage that ends by itself after ``seconds``."""
        self.start_outage()

        async def later() -> None:
            await asyncio.sleep(float(seconds))
            await self._reopen()

        self._outage_task = asyncio.get_running_loop().create_task(later())

    # ---- node / pod faults -----------------------------------------------------------------------
    def set_image_pull_failure(self, pattern: str | None) -> None:
        """Pods whose container image matches ``pattern`` stay Pending with ErrImagePull/ImagePullBackOff."""
        self.image_pull_failure = re.compile(pattern) if pattern else None

    def evict_pod(self, namespace: str, name: str) -> None:
        """Kill the pod's processes and mark it Failed/Evicted like a kubelet under memory pressure."""
        if self.kubelet is None:
            raise RuntimeError("evict_pod needs the kubelet (Sandbox(kubelet=True))")
        if self.store.get("pods", namespace, name) is None:
            raise LookupError(f"pod {namespace}/{name} not found")
        self.kubelet.evict(namespace, name)

    def lose_node(self) -> int:
        """Every pod vanishes at once, with no terminal status (node loss + force deletion)."""
        pods = [(e.obj["metadata"]["namespace"], e.obj["metadata"]["name"]) for e in self.store.iter("pods")]
        for ns, name in pods:
            self.force_delete_pod(ns, name)
        return len(pods)

    def force_delete_pod(self, namespace: str, name: str) -> bool:
        """Remove one pod at once, ignoring grace period and finalizers; its processes are killed."""
        if self.kubelet is not None:
            self.kubelet.kill_silently(namespace, name)
        return self.api.remove_now("pods", namespace, name)

    # ---- capacity and disruptions (see disruption.py, kueue.py and docs/sandbox.md) --------------
    def admit_create(self, resource: str, obj: dict[str, Any]) -> None:
        """Admission on create, after validation and defaulting: Kueue's webhook suspends a queued
        Job; the ResourceQuota plugin refuses a pod over the namespace's quota."""
        if not self.native_sidecars:
            drop_native_sidecars(resource, obj)
        if resource == "jobs":
            self.kueue.mutate(obj)
        elif resource == "pods":
            self.pod_quota.admit(obj)

    def set_native_sidecars(self, on: bool) -> None:
        """Act as a cluster with (True, the default: Kubernetes 1.29+) or without native sidecars (False:
        1.28 and older, or the ``SidecarContainers`` feature gate off), whose API server drops an init
        container's ``restartPolicy`` from new pods and Jobs' pod templates without an error
        (``dropDisabledFields`` in kubernetes pkg/api/pod/util.go). The init container then runs as an
        ordinary one: to completion, before the main containers."""
        self.native_sidecars = on

    def preempt_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """The scheduler preempts the pod (running or pending): DisruptionTarget PreemptionByScheduler,
        then a graceful delete (``grace_seconds``, default the pod's terminationGracePeriodSeconds)."""
        from .disruption import preempt

        preempt(self, namespace, name, grace_seconds=grace_seconds)

    def api_evict_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> dict[str, Any]:
        """What ``POST pods/NAME/eviction`` does (a drain, the cluster autoscaler): DisruptionTarget
        EvictionByEvictionAPI, then a graceful delete."""
        from .disruption import evict_through_api

        body = None if grace_seconds is None else {"deleteOptions": {"gracePeriodSeconds": grace_seconds}}
        return evict_through_api(self, namespace, name, body)

    def taint_evict_pod(self, namespace: str, name: str) -> None:
        """The taint manager deletes the pod (its node got a NoExecute taint): DisruptionTarget
        DeletionByTaintManager, then a graceful delete."""
        from .disruption import taint_evict

        taint_evict(self, namespace, name)

    def kubelet_preempt_pod(self, namespace: str, name: str) -> None:
        """The kubelet preempts the pod to admit a critical pod: Failed, reason Preempting."""
        from .kubelet import KUBELET_PREEMPTION

        if self.kubelet is None:
            raise RuntimeError("kubelet_preempt_pod needs the kubelet (Sandbox(kubelet=True))")
        self.kubelet.stop_pod(namespace, name, KUBELET_PREEMPTION, event_reason="Preempting")

    def shutdown_node(self, namespace: str | None = None, name: str | None = None) -> int:
        """Graceful node shutdown: every pod on the node (or only ``namespace``/``name``, as if it were
        alone there) is stopped; one that started reports Failed, reason Terminated, with
        DisruptionTarget TerminationByKubelet; one that had not started is refused, reason
        NodeShutdown. The pods are not deleted (the node comes back). Returns the count stopped."""
        from .kubelet import KUBELET_NODE_SHUTDOWN, KUBELET_NODE_SHUTDOWN_REJECTED

        if self.kubelet is None:
            raise RuntimeError("shutdown_node needs the kubelet (Sandbox(kubelet=True))")
        stopped = 0
        for entry in list(self.store.iter("pods", namespace)):
            meta = entry.obj["metadata"]
            if name is not None and meta["name"] != name:
                continue
            try:
                self.kubelet.stop_pod(
                    meta.get("namespace", ""),
                    meta["name"],
                    KUBELET_NODE_SHUTDOWN,
                    event_reason="NodeShutdown",
                    before_start=KUBELET_NODE_SHUTDOWN_REJECTED,
                )
            except RuntimeError:
                continue  # finished already, or not run by this kubelet
            stopped += 1
        if name is not None and not stopped:
            raise LookupError(f"pod {namespace}/{name} is not running on the sandbox node")
        return stopped

    def set_pod_quota(self, namespace: str, pods: int | None, name: str = "pod-quota") -> None:
        """A ResourceQuota ``name`` with ``spec.hard.pods`` in ``namespace`` (None removes it): a pod
        create over it gets the real 403 "exceeded quota" answer."""
        if self.store.get("namespaces", "", namespace) is None:
            raise LookupError(f"namespace {namespace} not found")
        self.pod_quota.set(namespace, pods, name=name)

    def pod_quota_usage(self, namespace: str) -> dict[str, Any] | None:
        """The namespace's pod quota with its ``status.used`` (None when there is none)."""
        return self.pod_quota.usage(namespace)

    def set_pod_creation_rate(self, rate: float | None) -> None:
        """Let the Job controller create at most ``rate`` pods per second in all (None: at once), like a
        busy kube-controller-manager: Jobs wait for their pods first come, first served, with no event."""
        if rate is not None and not (
            isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0
        ):
            raise ValueError(f"pod_creation_rate must be > 0 pods per second or None, got {rate!r}")
        self._pod_creation_rate = rate
        if self.job_controller is not None:
            self.job_controller.set_pod_creation_rate(rate)

    def set_kueue(self, capacity: int | None, cluster_queue: str = "cluster-queue") -> None:
        """Run a minimal Kueue with ``capacity`` admitted Jobs at a time (None: off). Jobs labelled
        ``kueue.x-k8s.io/queue-name`` are suspended on create and admitted first come, first served."""
        self.kueue.configure(capacity, cluster_queue=cluster_queue)

    def kueue_preempt(self, namespace: str, name: str, hold_seconds: float = 0.0) -> None:
        """Kueue preempts an admitted Job: suspended again, re-admitted when a slot frees, not before
        ``hold_seconds``."""
        self.kueue.preempt(namespace, name, hold_seconds=hold_seconds)

    def kueue_state(self) -> dict[str, Any]:
        """Capacity, admitted Jobs and admission counts of the sandbox Kueue."""
        return self.kueue.state()

    # ---- kubelet log endpoint --------------------------------------------------------------------
    async def kubelet_logs(self, request: web.BaseRequest, ns: str, name: str) -> web.StreamResponse:
        entry = self.store.get("pods", ns, name)
        if entry is None:
            raise not_found("pods", name)
        if self.kubelet is None:
            raise ApiError(400, f'container "{name}" in pod "{name}" is waiting to start: ContainerCreating')
        answer: web.StreamResponse = await self.kubelet.serve_logs(request, clone(entry.obj))
        return answer


def drop_native_sidecars(resource: str, obj: dict[str, Any]) -> None:
    """Remove ``restartPolicy`` from the init containers of a pod or a Job's pod template, as an API
    server without native sidecars does."""
    spec = obj.get("spec") or {}
    if resource == "jobs":
        spec = (spec.get("template") or {}).get("spec") or {}
    elif resource != "pods":
        return
    for container in spec.get("initContainers") or []:
        if isinstance(container, dict):
            container.pop("restartPolicy", None)
