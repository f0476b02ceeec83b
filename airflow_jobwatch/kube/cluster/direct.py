"""An API client for raw GETs (the informer's list/watch, the watcher's pod checks) that talks aiohttp
directly and never imports a Kubernetes client library.

The executor's KubernetesJobWatcher child needs nothing of ``kubernetes_asyncio`` but its HTTP session and
its credentials: the informer reads raw JSON and never builds a model. Importing the library costs about
38 MiB of private memory in a process that lives as long as the scheduler. So the child
uses this client: credentials are resolved by ``kubernetes_asyncio`` in a short-lived helper process
(:mod:`airflow_jobwatch.kube.cluster.credhelper`, run as kubectl runs an exec credential plugin) and the requests
go through an ``aiohttp.ClientSession`` built the way ``kubernetes_asyncio``'s REST client builds it
(same TLS context, ``trust_env``, read buffer, proxy and TLS server name), plus the keepalive options.

Credentials are fetched again (one helper run, shared by concurrent requests, at most once a second):

* before a request, once an exec plugin's token is within :data:`EXPIRY_MARGIN_SECONDS` of its
  ``expirationTimestamp``;
* after a 401, and the request is sent once more (as :class:`~airflow_jobwatch.kube.cluster.client.
  JobwatchAsyncApiClient` does); a 401 that persists is returned to the caller, which reports it.

In-cluster, the service-account token file is re-read whenever it changes (the kubelet rotates it).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import os
import pickle
import shutil
import signal
import ssl
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from typing import Any

import aiohttp

from airflow_jobwatch.kube.cluster.client import (
    DEFAULT_REQUEST_TIMEOUT_SECONDS,
    MIN_RELOAD_INTERVAL_SECONDS,
    ClusterConfig,
    ClusterConfigError,
    token_file_refresher,
)

log = logging.getLogger(__name__)

#: An exec-plugin token is fetched again this long before its ``expirationTimestamp`` (clock skew, and the
#: time a request takes), so that requests do not meet the 401 first; a quarter of the token's life for
#: tokens that live less than four times this.
EXPIRY_MARGIN_SECONDS = 10.0
#: How long one run of the credential helper may take (it may run an exec plugin: a cloud CLI that
#: calls its identity service).
HELPER_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class _Tls:
    """What the connection pool's TLS context and connector are built from (compared on reload)."""

    verify_ssl: bool
    disable_strict: bool
    ca: str | None
    cert: str | None
    key: str | None
    pool_size: int


class DirectApiClient:
    """``call_api(path, "GET", ...)`` as ``kubernetes_asyncio.client.ApiClient`` answers it with
    ``_preload_content=False`` (the raw ``aiohttp.ClientResponse``, whatever its status), and ``close()``.

    Build it with :meth:`create`. Only raw responses are served: asking for a deserialized model is a
    ``ValueError`` (this client has no models).
    """

    def __init__(self, cfg: ClusterConfig) -> None:
        self.cfg = cfg
        self.reloads = 0  # credential fetches after the first (expiry or 401)
        self._bundle: dict[str, Any] = {}
        self._tls: _Tls | None = None
        self._session: aiohttp.ClientSession | None = None
        self._retired: list[
            aiohttp.ClientSession
        ] = []  # sessions replaced by a TLS change, closed at close()
        self._auth = types.SimpleNamespace(api_key={})  # what token_file_refresher writes the token into
        self._token_refresh: Any = None
        self._inflight: asyncio.Task[bool] | None = None
        self._last_fetch = float("-inf")
        self._fetched_at = 0.0  # time.time() of the last fetch: an exec token's life is measured from it

    @classmethod
    async def create(cls, cfg: ClusterConfig) -> DirectApiClient:
        """A client with credentials resolved from ``cfg``.

        :raises ClusterConfigError: the configuration cannot be loaded (names the kubeconfig and
            context, never a credential), or its TLS material is not valid.
        """
        client = cls(cfg)
        client._apply(await fetch_credentials(cfg))  # this class's own factory: not another object's insides
        return client

    # ------------------------------------------------------------------------------------ credentials

    def _apply(self, bundle: dict[str, Any]) -> None:
        """Use ``bundle`` from now on; if its TLS material is new, in a new session (built first: a
        ClusterConfigError leaves everything as it was)."""
        tls = _Tls(
            verify_ssl=bool(bundle.get("verify_ssl", True)),
            disable_strict=bool(bundle.get("disable_strict_ssl_verification")),
            ca=bundle.get("ca"),
            cert=bundle.get("cert"),
            key=bundle.get("key"),
            pool_size=int(bundle.get("connection_pool_maxsize") or 100),
        )
        if tls != self._tls:
            session = self._new_session(tls)
            if self._session is not None:
                # A watch may still stream on the old one: it ends by itself and reconnects on the new one.
                self._retired.append(self._session)
            self._session, self._tls = session, tls
        self._bundle = bundle
        self._last_fetch = time.monotonic()
        self._fetched_at = time.time()
        self._auth.api_key.clear()
        if bundle.get("authorization"):
            self._auth.api_key["BearerToken"] = bundle["authorization"]
        token_file = bundle.get("token_file")
        self._token_refresh = token_file_refresher(token_file, prefix="Bearer ") if token_file else None

    def _new_session(self, tls: _Tls) -> aiohttp.ClientSession:
        try:
            context = _ssl_context(tls)
        except (ssl.SSLError, OSError, ValueError) as exc:
            # Never the PEM text itself: only what is wrong with it.
            raise ClusterConfigError(f"{self.cfg.describe()}: its TLS material is not valid: {exc}") from None
        connector_options: dict[str, Any] = {"limit": tls.pool_size, "ssl": context}
        if self.cfg.tcp_keepalive is not None:
            connector_options["socket_factory"] = self.cfg.tcp_keepalive.socket_factory()
        connector = aiohttp.TCPConnector(**connector_options)
        # As kubernetes_asyncio's REST client: proxies from the environment, and a read buffer that holds
        # the largest object etcd stores (1.5 MiB) in one watch line.
        return aiohttp.ClientSession(connector=connector, trust_env=True, read_bufsize=2**21)

    async def reload_credentials(self) -> bool:
        """Fetch the credentials again (one helper run shared by concurrent callers, at most one a
        second); False if the helper failed (logged, without credentials).

        The fetch is a task of this client, not of the caller that started it: a caller cancelled while
        waiting leaves it running for the others, and it is forgotten when it ends (whoever waits), so
        the next call can always start a new one.
        """
        if self._inflight is None:
            if time.monotonic() - self._last_fetch < MIN_RELOAD_INTERVAL_SECONDS:
                return True
            task = asyncio.get_running_loop().create_task(self._fetch_again())
            task.add_done_callback(self._fetch_ended)
            self._inflight = task
        return await asyncio.shield(self._inflight)

    async def _fetch_again(self) -> bool:
        try:
            # _apply refuses TLS material that changed and is not valid: the old credentials stay.
            self._apply(await fetch_credentials(self.cfg))
        except ClusterConfigError as exc:
            self._last_fetch = time.monotonic()
            log.warning(
                "Fetching the Kubernetes credentials of %s again failed: %s", self.cfg.describe(), exc
            )
            return False
        self.reloads += 1
        return True

    def _fetch_ended(self, task: asyncio.Task[bool]) -> None:
        if self._inflight is task:
            self._inflight = None
        if not task.cancelled():
            task.exception()  # retrieved: an unexpected error reaches the waiters, not the loop's log

    async def _authorization(self) -> str | None:
        expires_at = self._bundle.get("expires_at")
        if expires_at is not None:
            margin = min(EXPIRY_MARGIN_SECONDS, max(0.0, expires_at - self._fetched_at) / 4)
            if time.time() >= expires_at - margin:
                await self.reload_credentials()
        if self._token_refresh is not None:
            self._token_refresh(self._auth)
        value = self._auth.api_key.get("BearerToken")
        return str(value) if value else None

    # ----------------------------------------------------------------------------------------- requests

    async def call_api(
        self,
        resource_path: str,
        method: str,
        *,
        query_params: list[tuple[str, str]] | None = None,
        header_params: dict[str, str] | None = None,
        auth_settings: list[str] | None = None,
        _preload_content: bool = True,
        _request_timeout: Any = None,
        **unused: Any,
    ) -> aiohttp.ClientResponse:
        """Send ``method resource_path`` and return the raw response (the caller reads and releases it).

        :param _request_timeout: an ``aiohttp.ClientTimeout``, a number (total seconds) or a
            ``(connect, read)`` pair; default ``cfg.request_timeout``, else 60 s.
        """
        if _preload_content:
            raise ValueError(
                "DirectApiClient.call_api returns raw responses only: pass _preload_content=False"
            )
        if unused:
            raise ValueError(f"DirectApiClient.call_api does not take {sorted(unused)}")
        timeout = _timeout(
            _request_timeout
            if _request_timeout is not None
            else (self.cfg.request_timeout or DEFAULT_REQUEST_TIMEOUT_SECONDS)
        )
        resp = await self._send(resource_path, method, query_params, header_params, auth_settings, timeout)
        if resp.status == 401 and auth_settings and await self.reload_credentials():
            resp.release()
            resp = await self._send(
                resource_path, method, query_params, header_params, auth_settings, timeout
            )
        return resp

    async def _send(
        self,
        path: str,
        method: str,
        query: list[tuple[str, str]] | None,
        headers: dict[str, str] | None,
        auth_settings: list[str] | None,
        client_timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        request_headers = dict(headers or {})
        if auth_settings:
            authorization = await self._authorization()
            if authorization:
                request_headers["Authorization"] = authorization
        kwargs: dict[str, Any] = {
            "params": query or None,
            "headers": request_headers,
            "timeout": client_timeout,
        }
        bundle = self._bundle
        if bundle.get("proxy"):
            kwargs["proxy"] = bundle["proxy"]
            if bundle.get("proxy_headers"):
                kwargs["proxy_headers"] = bundle["proxy_headers"]
        if bundle.get("tls_server_name"):
            kwargs["server_hostname"] = bundle["tls_server_name"]
        assert self._session is not None
        return await self._session.request(method, f"{bundle['host']}{path}", **kwargs)

    async def close(self) -> None:
        """Close the sessions; a credential fetch still running is cancelled (its helper ended)."""
        if self._inflight is not None:
            task = self._inflight
            task.cancel()
            await asyncio.wait({task})
        for session in [*self._retired, *([self._session] if self._session is not None else [])]:
            await session.close()
        self._retired.clear()
        self._session = None


def _timeout(value: Any) -> aiohttp.ClientTimeout:
    if isinstance(value, aiohttp.ClientTimeout):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return aiohttp.ClientTimeout(connect=value[0], sock_connect=value[0], sock_read=value[1])
    return aiohttp.ClientTimeout(total=float(value))


def _ssl_context(tls: _Tls) -> ssl.SSLContext:
    """The TLS context ``kubernetes_asyncio``'s REST client builds, from PEM text instead of files."""
    context = ssl.create_default_context(cadata=tls.ca) if tls.ca else ssl.create_default_context()
    if tls.cert:
        # ssl loads a certificate chain only from files: a private directory (mode 0700, files 0600),
        # removed as soon as this one load_cert_chain returns or fails.
        directory = tempfile.mkdtemp(prefix="jobwatch-tls-")
        try:
            cert = os.path.join(directory, "client.crt")
            key = os.path.join(directory, "client.key") if tls.key else None
            for path, text in ((cert, tls.cert), (key, tls.key)):
                if path is not None and text is not None:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "w", encoding="utf-8") as handle:
                        handle.write(text)
            context.load_cert_chain(cert, keyfile=key)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    if not tls.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if tls.disable_strict:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


#: How long the helper's process group has, after SIGTERM, to end before it is killed (timeout, cancellation).
HELPER_TERM_GRACE_SECONDS = 0.5

# Helper runs not finished yet, ended by :func:`end_helpers` when this process exits (its exit paths call it
# too: ``os._exit`` skips ``atexit``): process-group ids, and the private temporary folders.
_live_groups: set[int] = set()
_live_dirs: set[str] = set()


def end_helpers() -> None:
    """Kill every running credential helper's process group (the helper and any exec plugin it started)
    and remove its temporary folder. For the exit paths of the process that runs helpers."""
    for pgid in list(_live_groups):
        _signal_group(pgid, signal.SIGKILL)
        _live_groups.discard(pgid)
    for directory in list(_live_dirs):
        shutil.rmtree(directory, ignore_errors=True)
        _live_dirs.discard(directory)


atexit.register(end_helpers)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone (PermissionError: macOS, for a group of zombies)


async def _end_helper(proc: asyncio.subprocess.Process, *, grace: float) -> None:
    """End the helper's process group and close the helper's pipes, on every path.

    A helper that is still running gets SIGTERM (it kills its own group, plugins included) and ``grace``
    seconds; whatever is left of the group then gets SIGKILL, also when the helper has exited by itself
    (a plugin it started may still run: the helper was killed, or the plugin outlived it). Being cancelled
    while waiting does not skip the SIGKILL.
    """
    pgid = proc.pid
    try:
        if proc.returncode is None:
            _signal_group(pgid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), grace)
            except TimeoutError:
                pass
    finally:
        _signal_group(pgid, signal.SIGKILL)
        _live_groups.discard(pgid)
        # asyncio.subprocess.Process has no close(): its transport, left open, warns when collected
        # (after the loop closed, as with pytest's per-test loops). Closing it closes the pipes and
        # kills the helper if it still runs; the loop's child watcher reaps it.
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()
    if proc.returncode is None:
        # Reaped by the child watcher right after the SIGKILL; bounded in case the watcher is slow.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 5.0)


async def fetch_credentials(cfg: ClusterConfig, *, helper_timeout: float | None = None) -> dict[str, Any]:
    """Run the credential helper for ``cfg`` and return its answer (see :func:`.credhelper.export`).

    The helper runs in a session (and process group) of its own, with a private temporary folder
    (mode 0700) as its ``TMPDIR``: the client key and certificate ``kubernetes_asyncio`` writes to
    temporary files go there. Whatever happens (answer, failure, timeout, the helper killed, this
    coroutine cancelled), the group is ended (the helper and every exec plugin it started) and the
    folder removed before this returns or raises.

    :param helper_timeout: seconds the helper may take; default :data:`HELPER_TIMEOUT_SECONDS`.
    :raises ClusterConfigError: the helper reported a configuration error (its message), failed
        otherwise (its exit code; its stderr is not repeated: it could hold a plugin's output), or
        did not answer within the timeout.
    """
    from airflow_jobwatch.kube.cluster.credhelper import CONFIG_ERROR_EXIT_CODE, PRIVATE_TMPDIR_ENV

    limit = HELPER_TIMEOUT_SECONDS if helper_timeout is None else helper_timeout
    directory = tempfile.mkdtemp(prefix="jobwatch-credhelper-")  # mode 0700
    _live_dirs.add(directory)
    env = {**os.environ, "TMPDIR": directory, "TEMP": directory, "TMP": directory}
    env[PRIVATE_TMPDIR_ENV] = directory
    proc: asyncio.subprocess.Process | None = None
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "airflow_jobwatch.kube.cluster.credhelper",
            str(os.getpid()),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        _live_groups.add(proc.pid)
        try:
            out, err = await asyncio.wait_for(proc.communicate(pickle.dumps((list(sys.path), cfg))), limit)
        except TimeoutError:
            raise ClusterConfigError(
                f"{cfg.describe()}: resolving its credentials took more than {limit:g} s "
                "(an exec plugin that does not answer?)"
            ) from None
    finally:
        try:
            if proc is not None:
                await _end_helper(proc, grace=HELPER_TERM_GRACE_SECONDS)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
            _live_dirs.discard(directory)
    if proc.returncode == CONFIG_ERROR_EXIT_CODE:
        lines = [
            line
            for line in err.decode("utf-8", "replace").splitlines()
            if line.strip() and not line.startswith("import time:")
        ]
        raise ClusterConfigError(lines[-1] if lines else f"{cfg.describe()}: not a valid configuration")
    if proc.returncode != 0:
        raise ClusterConfigError(
            f"{cfg.describe()}: resolving its credentials failed (helper exit code {proc.returncode})"
        )
    try:
        bundle = json.loads(out)
    except ValueError:
        raise ClusterConfigError(f"{cfg.describe()}: the credential helper's answer is not JSON") from None
    if not isinstance(bundle, dict) or not bundle.get("host"):
        raise ClusterConfigError(f"{cfg.describe()}: the credential helper named no API server")
    return bundle
