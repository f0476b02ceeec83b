"""Building ``kubernetes_asyncio`` and ``kubernetes`` API clients from a kubeconfig or in-cluster.

Both client libraries keep a process-wide default ``Configuration`` that ``load_kube_config`` fills
when it is not handed one. We never use it: every client gets a fresh ``Configuration`` of its own,
so an Airflow process that talks to two clusters (two executors' namespaces, a trigger with its own
``config_file``) never sees one connection's credentials leak into another's.

Kubeconfig problems are found before the libraries see the file (``kube/cluster/kubeconfig.py``), so that each
error names the file(s), the context and what was expected, and never quotes the file: a kubeconfig
holds bearer tokens and private keys, and the libraries' YAML errors print the offending line.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import json
import logging
import os
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_jobwatch.kube.cluster.kubeconfig import (
    DEFAULT_KUBECONFIG,
    KUBECONFIG_PATH_SEPARATOR,
    LOAD_ERRORS,
    ClusterConfigError,
    Resolved,
    in_cluster_error,
    library_error,
    resolve,
    tls_error,
)

__all__ = [
    "ClusterConfig",
    "ClusterConfigError",
    "TcpKeepalive",
    "async_api_client",
    "credential_digest",
    "sync_api_client",
]

# Neither client library is imported here at module level: each package imports every model class (about
# 40 MiB of private memory each). The functions that build a client import the one they build; the executor's
# watcher child, which talks HTTP through ``kube/cluster/direct.py``, loads neither. Reading a kubeconfig to name it
# (``identity()``) needs only ``yaml``, through ``kube/cluster/kubeconfig.py``.

log = logging.getLogger(__name__)

#: What ``identity()`` returns for in-cluster configuration: the cluster is the one the pod runs in
#: and the user its service account, both fixed for the life of the process.
IN_CLUSTER_IDENTITY = "in-cluster"
#: Where the kubelet mounts a pod's service account token and CA bundle.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Overrides SERVICE_ACCOUNT_DIR (a non-standard mount, or the sandbox's in-cluster mode in tests).
SERVICE_ACCOUNT_DIR_ENV = "JOBWATCH_SERVICE_ACCOUNT_DIR"
#: Default timeout of one-off requests (seconds) when none is configured: upstream's API_TIMEOUT.
#: Without one, a request on a half-open connection waits forever.
DEFAULT_REQUEST_TIMEOUT_SECONDS = 60.0
#: How often the in-cluster token file is re-read even when its stat() has not changed: the kubelet
#: rewrites projected tokens in place (an atomic symlink swap, which changes the inode), so a stat
#: check catches each rotation; the period is a safety net, as in client-go (1 minute).
TOKEN_FILE_RECHECK_SECONDS = 60.0
#: Two credential reloads (after a 401) are at least this far apart: many requests failing with 401
#: at the same moment share one reload (one exec-plugin run) instead of forking one each.
MIN_RELOAD_INTERVAL_SECONDS = 1.0


@dataclass(frozen=True)
class TcpKeepalive:
    """TCP keepalive probes on the API connections (``[kubernetes_executor] enable_tcp_keepalive``).

    A watch is an idle connection for minutes at a time; cloud load balancers and NAT gateways drop
    idle flows silently (AWS NLB after 350 s), after which the client waits for bytes that never come.
    Probes keep the flow alive and detect a dead one. Defaults are upstream's ``tcp_keep_*`` defaults.
    """

    idle: int = 120
    interval: int = 30
    count: int = 6

    def socket_options(self) -> list[tuple[int, int, int]]:
        options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
        for name, value in (
            ("TCP_KEEPIDLE", self.idle),
            ("TCP_KEEPINTVL", self.interval),
            ("TCP_KEEPCNT", self.count),
        ):
            if hasattr(socket, name):  # not every platform has all three
                options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
        return options

    def socket_factory(self) -> Callable[[Any], socket.socket]:
        """An aiohttp ``socket_factory`` (its public hook for socket options) that sets these options."""
        options = self.socket_options()

        def factory(addr_info: Any) -> socket.socket:
            family, type_, proto, _, _ = addr_info
            sock = socket.socket(family=family, type=type_, proto=proto)
            for level, name, value in options:
                sock.setsockopt(level, name, value)
            return sock

        return factory


@dataclass(frozen=True)
class ClusterConfig:
    """How to reach a Kubernetes API server, and how to talk to it.

    Frozen and picklable: the executor hands it to its spawned watcher processes, which build their
    own clients from it.

    :param config_file: kubeconfig path, or several joined like ``KUBECONFIG`` (``a:b``). ``None``
        means what kubectl uses: ``$KUBECONFIG`` (read when a client is built, not at import time as the
        client libraries do), else ``~/.kube/config``.
    :param cluster_context: kubeconfig context; ``None`` means the kubeconfig's ``current-context``.
    :param in_cluster: use the pod's service account (``KUBERNETES_SERVICE_HOST`` and the mounted token,
        which is re-read as it rotates). It takes precedence over ``config_file`` and
        ``cluster_context``, as ``[kubernetes_executor] in_cluster`` does upstream.
    :param kube_config: a whole kubeconfig as YAML/JSON text (the connection extra ``kube_config``),
        used instead of a file. Never shown in ``repr`` or in errors.
    :param service_account_dir: where the in-cluster token and ``ca.crt`` are; default
        ``$JOBWATCH_SERVICE_ACCOUNT_DIR``, else ``/var/run/secrets/kubernetes.io/serviceaccount``.
    :param verify_ssl: verify the API server's certificate (``[kubernetes_executor] verify_ssl``, the
        connection extra ``disable_verify_ssl``).
    :param ssl_ca_cert: a CA bundle to verify the server with, instead of the kubeconfig's
        (``[kubernetes_executor] ssl_ca_cert``).
    :param tcp_keepalive: keepalive probes on every connection, or None for the OS defaults.
    :param request_timeout: default timeout of one-off requests (seconds, or ``(connect, read)``);
        ``kube_client_request_args["_request_timeout"]``. Watches set their own.
    :param retries: ``urllib3.util.Retry`` keyword arguments for the synchronous client
        (``[kubernetes_executor] api_client_retry_configuration``).
    :param source: where this configuration came from, for error messages (e.g. ``connection 'k8s'``).
    """

    config_file: str | None = None
    cluster_context: str | None = None
    in_cluster: bool = False
    kube_config: str | None = field(default=None, repr=False)
    service_account_dir: str | None = None
    verify_ssl: bool = True
    ssl_ca_cert: str | None = None
    tcp_keepalive: TcpKeepalive | None = None
    request_timeout: float | tuple[float, float] | None = None
    retries: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)
    source: str = field(default="", compare=False)

    def kubeconfig_paths(self) -> list[str]:
        """The kubeconfig files this configuration reads, in merge order, user-expanded."""
        raw = self.config_file or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
        return [os.path.expanduser(p) for p in raw.split(KUBECONFIG_PATH_SEPARATOR) if p]

    def service_account_files(self) -> tuple[str, str]:
        """(token file, CA bundle) of the in-cluster service account."""
        directory = self.service_account_dir or os.environ.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT_DIR
        return os.path.join(directory, "token"), os.path.join(directory, "ca.crt")

    def identity(self) -> str:
        """A stable string naming the cluster and the user we act as (for messages and keys).

        Built from the resolved server URL, context and user *names* only, never credentials. Names are
        not enough to decide that two configurations may share a watch: two kubeconfigs can use the
        same names with different credentials; :meth:`credential_digest` tells those apart. It reads
        only what this configuration names: the kubeconfig file(s) it names (or ``$KUBECONFIG`` /
        ``~/.kube/config`` when it names none and is not in-cluster), or the inline kubeconfig;
        in-cluster it reads nothing but the environment. No exec plugin is run.

        :raises ClusterConfigError: when the kubeconfig cannot be read or the context does not resolve.
        """
        return self._identity(None if self.in_cluster else resolve(self))

    def identity_and_credential_digest(self) -> tuple[str, str]:
        """``(identity(), credential_digest())``, resolving the kubeconfig once (a trigger names its
        shared watch with both; with thousands of triggers an inline kubeconfig parsed twice shows)."""
        resolved = None if self.in_cluster else resolve(self)
        return self._identity(resolved), self._credential_digest(resolved)

    def _identity(self, resolved: Resolved | None) -> str:
        if resolved is None:
            # The pod's own cluster and service account: fixed for the life of the process.
            base = IN_CLUSTER_IDENTITY
            directory = os.path.dirname(self.service_account_files()[0])
            if directory != SERVICE_ACCOUNT_DIR:
                base += f" sa={directory}"
        else:
            base = f"server={resolved.server} context={resolved.context} user={resolved.user or '-'}"
        if not self.verify_ssl:
            base += " insecure"
        if self.ssl_ca_cert:
            base += f" ca={self.ssl_ca_cert}"
        return base

    def credential_digest(self) -> str:
        """A keyed, non-reversible digest of *which credential* this configuration acts with.

        ``identity()`` names the cluster and user, but two kubeconfigs can use the same names with
        different credentials (EKS ``update-kubeconfig --role-arn``: context and user are both named
        after the cluster; generated kubeconfigs). Anything shared between clients (a watch, a cache)
        is shared only between configurations with the same digest. What goes in is the credential's
        source, never resolved at run time (no exec plugin runs, no token file is read):

        * in-cluster: the service-account token file (the kubelet rotates its content; its path
          names the credential);
        * a kubeconfig file: its path(s) and the context, plus the resolved user entry (token,
          ``tokenFile``, client certificate and key, ``exec`` command, args and env,
          ``auth-provider``, username/password) and cluster entry (server, CA, TLS options);
        * an inline ``kube_config``: its whole content (parsed, so formatting does not count), plus the
          context;
        * the TLS options of this configuration (``verify_ssl``, ``ssl_ca_cert``).

        It is an HMAC-SHA256 under a key drawn at random once per process: it identifies a credential
        within this process only and cannot be matched against a guessed token offline (a plain hash
        of a short token could). The input is never logged or kept.

        :raises ClusterConfigError: when the kubeconfig cannot be read or the context does not resolve.
        """
        return self._credential_digest(None if self.in_cluster else resolve(self))

    def _credential_digest(self, resolved: Resolved | None) -> str:
        source: dict[str, Any] = {"verify_ssl": self.verify_ssl, "ssl_ca_cert": self.ssl_ca_cert}
        if resolved is None:
            token_file, ca_file = self.service_account_files()
            source["in_cluster"] = {"token_file": os.path.abspath(token_file), "ca_file": ca_file}
        else:
            source["context"] = resolved.context
            source["user"] = resolved.user_fields
            source["cluster"] = resolved.cluster_fields
            if self.kube_config:
                source["inline"] = resolved.data  # parsed: the same kubeconfig however it is formatted
            else:
                source["paths"] = [os.path.abspath(p) for p in resolved.paths]
        return credential_digest(source)

    def describe(self) -> str:
        """Where this configuration comes from, for messages (never credentials)."""
        if self.in_cluster:
            what = "in-cluster service account"
        elif self.kube_config:
            what = "inline kubeconfig"
        else:
            what = f"kubeconfig {KUBECONFIG_PATH_SEPARATOR.join(self.kubeconfig_paths())!r}"
        return f"{what} ({self.source})" if self.source else what


#: The HMAC key of ``credential_digest``: random, drawn once per process and never written anywhere,
#: so a digest means something only inside this process (a status file or log line that shows one
#: cannot be used to test guessed tokens offline).
_DIGEST_KEY = secrets.token_bytes(32)


def credential_digest(source: Mapping[str, Any]) -> str:
    """HMAC-SHA256 (per-process random key) of ``source`` serialized canonically (sorted keys), hex.

    ``source`` holds credentials: callers pass it here and drop it, never log it."""
    data = json.dumps(source, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hmac.new(_DIGEST_KEY, data, hashlib.sha256).hexdigest()


# --------------------------------------------------------------------------------------------------
# Clients


class _Credentials:
    """Loads a configuration's credentials into a client ``Configuration`` and reloads them after a 401.

    One per client. ``reload()`` builds a fresh ``Configuration`` the way the first load did (re-reading
    the token file, re-running an exec plugin whether or not its token looked expired, re-reading the
    kubeconfig: a rotated static token in the file is picked up too) and copies the credential fields
    onto the live configuration, so an open client (and a watch that reconnects with it) goes on with
    new credentials. Client certificates live in the connection pool's TLS context and are not reloaded.
    """

    _FIELDS = ("api_key", "api_key_prefix", "refresh_api_key_hook", "username", "password")

    def __init__(self, cfg: ClusterConfig, load: Callable[[Any], Any], new_configuration: Callable[[], Any]):
        self.cfg = cfg
        self._load = load  # fills a fresh Configuration; a coroutine function for the async client
        self._new = new_configuration
        self._last_reload = float("-inf")
        self._lock = threading.Lock()  # sync client: requests from several threads share one reload
        self._inflight: asyncio.Future[bool] | None = None  # async client: the same, within one loop
        self.reloads = 0

    def _recent(self) -> bool:
        # Requests refused while (or just before) another reload ran retry with what it fetched.
        return time.monotonic() - self._last_reload < MIN_RELOAD_INTERVAL_SECONDS

    def _apply(self, fresh: Any, configuration: Any) -> bool:
        for name in self._FIELDS:
            if hasattr(fresh, name):
                setattr(configuration, name, getattr(fresh, name))
        self.reloads += 1
        self._last_reload = time.monotonic()
        log.info(
            "Kubernetes API answered 401 Unauthorized: reloaded the credentials of %s", self.cfg.describe()
        )
        return True

    def _failed(self, exc: ClusterConfigError) -> bool:
        self._last_reload = time.monotonic()
        log.warning(
            "Reloading the Kubernetes credentials of %s after a 401 failed: %s", self.cfg.describe(), exc
        )
        return False

    def reload_sync(self, configuration: Any) -> bool:
        """Reload into ``configuration`` (sync client); False if the reload failed."""
        with self._lock:
            if self._recent():
                return True
            fresh = self._new()
            try:
                self._load(fresh)
            except ClusterConfigError as exc:
                return self._failed(exc)
            return self._apply(fresh, configuration)

    async def reload(self, configuration: Any) -> bool:
        """Reload into ``configuration`` (async client); False if the reload failed. Concurrent 401s
        share one reload (one exec-plugin run) and all retry with its result."""
        if self._inflight is not None:
            return await asyncio.shield(self._inflight)
        if self._recent():
            return True

        async def run() -> bool:
            fresh = self._new()
            try:
                await self._load(fresh)
            except ClusterConfigError as exc:
                return self._failed(exc)
            return self._apply(fresh, configuration)

        self._inflight = asyncio.ensure_future(run())
        try:
            return await asyncio.shield(self._inflight)
        finally:
            if self._inflight is not None and self._inflight.done():
                self._inflight = None


def token_file_refresher(token_file: str, *, prefix: str) -> Callable[[Any], None]:
    """A ``refresh_api_key_hook`` that re-reads the in-cluster token file whenever it changes.

    The kubelet rewrites a projected service-account token in place (by default hourly, for a token
    valid 1 h + grace; an atomic ``..data`` symlink swap). A stat() per request is cheap and catches the
    rotation at once; the libraries' own hooks re-read only once a minute, and only the async one.
    """
    lock = threading.Lock()
    state: dict[str, Any] = {"stat": None, "checked": 0.0, "token": None}

    def refresh(configuration: Any, *args: Any) -> None:
        now = time.monotonic()
        try:
            st = os.stat(token_file)
        except OSError:
            return  # keep the last token; the 401 (and its message) will say what is wrong
        signature = (st.st_ino, st.st_mtime_ns, st.st_size)
        with lock:
            if signature != state["stat"] or now - state["checked"] >= TOKEN_FILE_RECHECK_SECONDS:
                try:
                    with open(token_file, encoding="utf-8") as handle:
                        token = handle.read().strip()
                except OSError:
                    return
                if token:
                    state["token"] = token
                state["stat"] = signature
                state["checked"] = now
            if state["token"]:
                configuration.api_key["BearerToken"] = f"{prefix}{state['token']}"

    return refresh


def _apply_options(cfg: ClusterConfig, configuration: Any) -> None:
    """The TLS options that override what the kubeconfig / in-cluster loader set."""
    if not cfg.verify_ssl:
        configuration.verify_ssl = False
    if cfg.ssl_ca_cert:
        configuration.ssl_ca_cert = cfg.ssl_ca_cert


async def load_async(cfg: ClusterConfig, configuration: Any) -> Any:
    """Fill a ``kubernetes_asyncio`` Configuration; returns the kubeconfig loader (or None)."""
    import kubernetes_asyncio.config
    import kubernetes_asyncio.config.incluster_config

    load_errors: tuple[type[BaseException], ...] = (kubernetes_asyncio.config.ConfigException, *LOAD_ERRORS)
    if cfg.in_cluster:
        token_file, ca_file = cfg.service_account_files()
        try:
            kubernetes_asyncio.config.incluster_config.InClusterConfigLoader(
                token_filename=token_file, cert_filename=ca_file, try_refresh_token=False
            ).load_and_set(configuration)
        except load_errors as exc:
            raise in_cluster_error(cfg, exc) from None
        configuration.refresh_api_key_hook = token_file_refresher(token_file, prefix="Bearer ")
        _apply_options(cfg, configuration)
        return None
    resolved = resolve(cfg)
    try:
        if resolved.data is not None:
            loader = await kubernetes_asyncio.config.load_kube_config_from_dict(
                config_dict=dict(resolved.data), context=resolved.context, client_configuration=configuration
            )
        else:
            loader = await kubernetes_asyncio.config.load_kube_config(
                config_file=resolved.config_file_arg,
                context=resolved.context,
                client_configuration=configuration,
                persist_config=False,  # never write refreshed tokens back into the user's file
            )
    except load_errors as exc:
        raise library_error(resolved, exc) from None
    if "exec" in resolved.user_fields and configuration.refresh_api_key_hook is None:
        configuration.refresh_api_key_hook = _exec_token_refresher(loader)
    _apply_options(cfg, configuration)
    return loader


def _load_sync(cfg: ClusterConfig, configuration: Any) -> None:
    """Fill a ``kubernetes`` Configuration (the library installs its own exec/expiry refresh hook)."""
    import kubernetes.config
    import kubernetes.config.incluster_config
    import urllib3.util
    from urllib3.connection import HTTPConnection

    load_errors = (kubernetes.config.ConfigException, *LOAD_ERRORS)
    if cfg.in_cluster:
        token_file, ca_file = cfg.service_account_files()
        try:
            kubernetes.config.incluster_config.InClusterConfigLoader(
                token_filename=token_file, cert_filename=ca_file, try_refresh_token=False
            ).load_and_set(configuration)
        except load_errors as exc:
            raise in_cluster_error(cfg, exc) from None
        configuration.refresh_api_key_hook = token_file_refresher(token_file, prefix="Bearer ")
    else:
        resolved = resolve(cfg)
        try:
            if resolved.data is not None:
                kubernetes.config.load_kube_config_from_dict(
                    config_dict=dict(resolved.data),
                    context=resolved.context,
                    client_configuration=configuration,
                    persist_config=False,
                )
            else:
                kubernetes.config.load_kube_config(
                    config_file=resolved.config_file_arg,
                    context=resolved.context,
                    client_configuration=configuration,
                    persist_config=False,
                )
        except load_errors as exc:
            raise library_error(resolved, exc) from None
    _apply_options(cfg, configuration)
    if cfg.tcp_keepalive is not None:
        # (kubernetes 35's Configuration has no socket_options: JobwatchApiClient hands them to urllib3)
        base = getattr(configuration, "socket_options", None) or list(HTTPConnection.default_socket_options)
        options = cfg.tcp_keepalive.socket_options()
        overridden = {(level, name) for level, name, _ in options}
        configuration.socket_options = [o for o in base if (o[0], o[1]) not in overridden] + options
    if cfg.retries:
        try:
            configuration.retries = urllib3.util.Retry(**dict(cfg.retries))
        except TypeError as exc:
            raise ClusterConfigError(
                f"api_client_retry_configuration {dict(cfg.retries)!r} is not valid: {exc}; expected "
                'keyword arguments of urllib3.util.Retry, e.g. {"total": 3, "backoff_factor": 0.5}'
            ) from None


def _is_401(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 401


@functools.cache
def _jobwatch_async_api_client_class() -> type[Any]:
    """:class:`JobwatchAsyncApiClient`, defined on first use so that importing this module does not import
    ``kubernetes_asyncio`` (see the note on imports at the top)."""
    import kubernetes_asyncio.client
    import kubernetes_asyncio.client.exceptions

    class JobwatchAsyncApiClient(kubernetes_asyncio.client.ApiClient):
        """A ``kubernetes_asyncio`` ApiClient with a default request timeout and one credential reload
        and retry on 401 (expired exec-plugin token, rotated service-account token, rotated static token).

        A 401 that persists after the reload is returned/raised as it is: the caller reports it as a
        permission error (see :mod:`airflow_jobwatch.kube.cluster.errors`).
        """

        def __init__(self, configuration: Any, *, credentials: _Credentials) -> None:
            super().__init__(configuration=configuration)
            self.credentials = credentials
            timeout = credentials.cfg.request_timeout
            self._default_timeout = timeout if timeout is not None else DEFAULT_REQUEST_TIMEOUT_SECONDS

        async def reload_credentials(self) -> bool:
            return await self.credentials.reload(self.configuration)

        async def call_api(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("_request_timeout") is None and kwargs.get("_preload_content", True):
                kwargs["_request_timeout"] = self._default_timeout
            try:
                result = await super().call_api(*args, **kwargs)
            except kubernetes_asyncio.client.exceptions.ApiException as exc:
                if not _is_401(exc) or not await self.reload_credentials():
                    raise
                return await super().call_api(*args, **kwargs)
            # _preload_content=False hands back the raw response whatever its status (the informer reads it).
            if not kwargs.get("_preload_content", True) and getattr(result, "status", None) == 401:
                if await self.reload_credentials():
                    result.release()
                    return await super().call_api(*args, **kwargs)
            return result

    JobwatchAsyncApiClient.__module__ = __name__
    JobwatchAsyncApiClient.__qualname__ = "JobwatchAsyncApiClient"
    return JobwatchAsyncApiClient


@functools.cache
def _jobwatch_api_client_class() -> type[Any]:
    """:class:`JobwatchApiClient`, defined on first use so that importing this module does not import
    the synchronous ``kubernetes`` client."""
    import kubernetes.client
    import kubernetes.client.exceptions

    class JobwatchApiClient(kubernetes.client.ApiClient):  # type: ignore[misc]
        """The synchronous counterpart of :class:`JobwatchAsyncApiClient`."""

        def __init__(self, configuration: Any, *, credentials: _Credentials) -> None:
            super().__init__(configuration=configuration)
            pool_kw = self.rest_client.pool_manager.connection_pool_kw
            options = getattr(configuration, "socket_options", None)
            if options is not None and "socket_options" not in pool_kw:
                # kubernetes 35 (what the cncf.kubernetes releases for Airflow 3.1 and 3.2 pin) ignores
                # Configuration.socket_options; 36 passes them to urllib3's pools, as this does.
                pool_kw["socket_options"] = options
            self.credentials = credentials
            timeout = credentials.cfg.request_timeout
            self._default_timeout = timeout if timeout is not None else DEFAULT_REQUEST_TIMEOUT_SECONDS

        def reload_credentials(self) -> bool:
            return self.credentials.reload_sync(self.configuration)

        def call_api(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("_request_timeout") is None and kwargs.get("_preload_content", True):
                kwargs["_request_timeout"] = self._default_timeout
            try:
                return super().call_api(*args, **kwargs)
            except kubernetes.client.exceptions.ApiException as exc:
                if not _is_401(exc) or not self.reload_credentials():
                    raise
                return super().call_api(*args, **kwargs)

    JobwatchApiClient.__module__ = __name__
    JobwatchApiClient.__qualname__ = "JobwatchApiClient"
    return JobwatchApiClient


def __getattr__(name: str) -> Any:
    # PEP 562: ``from airflow_jobwatch.kube.cluster.client import JobwatchApiClient`` still works (lazily).
    if name == "JobwatchApiClient":
        return _jobwatch_api_client_class()
    if name == "JobwatchAsyncApiClient":
        return _jobwatch_async_api_client_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


async def _keepalive_session(api_client: Any, configuration: Any, keepalive: TcpKeepalive) -> None:
    """Give an async client an aiohttp session whose sockets carry keepalive options.

    ``kubernetes_asyncio`` builds its ``aiohttp.TCPConnector`` without socket options; aiohttp's public
    ``socket_factory`` hook is the way to set them. The TLS context is built as the library builds it.
    """
    import aiohttp

    ssl_context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        ssl_context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        ssl_context.check_hostname = False
        ssl_context.verify_mode = ssl.CERT_NONE
    connector = aiohttp.TCPConnector(
        limit=configuration.connection_pool_maxsize,
        ssl=ssl_context,
        socket_factory=keepalive.socket_factory(),
    )
    old = api_client.rest_client.pool_manager
    api_client.rest_client.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=True, read_bufsize=2**21
    )
    await old.close()  # it never opened a connection


async def async_api_client(cfg: ClusterConfig) -> Any:
    """A ``kubernetes_asyncio`` ``ApiClient`` with its own ``Configuration``; the caller closes it.

    Every option of ``cfg`` applies (TLS, CA, keepalive, default timeout). Tokens from a kubeconfig
    ``exec`` plugin (EKS, GKE, OIDC helpers) are short-lived (15 min on EKS) while our watches run for
    hours, so for such users a refresh hook re-runs the plugin once the token has expired;
    ``kubernetes_asyncio`` calls it before each request. In-cluster tokens are re-read from the mounted
    file when it changes. A 401 reloads the credentials once and retries.

    :raises ClusterConfigError: naming the kubeconfig path and context, or the in-cluster setup.
    """
    import kubernetes_asyncio.client

    configuration = kubernetes_asyncio.client.Configuration()
    await load_async(cfg, configuration)

    async def load(fresh: Any) -> None:
        await load_async(cfg, fresh)

    credentials = _Credentials(cfg, load, kubernetes_asyncio.client.Configuration)
    try:
        # The aiohttp connector loads the CA bundle and client certificate here.
        client = _jobwatch_async_api_client_class()(configuration, credentials=credentials)
    except (ssl.SSLError, OSError) as exc:
        raise tls_error(cfg, exc) from None
    if cfg.tcp_keepalive is not None:
        await _keepalive_session(client, configuration, cfg.tcp_keepalive)
    return client


def _exec_token_refresher(loader: Any) -> Any:
    async def refresh(configuration: Any) -> None:
        # A plugin that gave no expirationTimestamp issued a token for the life of the process (kubectl
        # too keeps it until a 401); re-running it before every request would fork a process per call.
        if getattr(loader, "exec_plugin_expiry", None) is None:
            return
        # load_from_exec_plugin() returns at once while the token it holds has not expired.
        if await loader.load_from_exec_plugin() and getattr(loader, "token", None):
            configuration.api_key["BearerToken"] = loader.token

    return refresh


def sync_api_client(cfg: ClusterConfig) -> Any:
    """A ``kubernetes`` (official client) ``ApiClient`` with its own ``Configuration``; the caller closes it.

    Every option of ``cfg`` applies (TLS, CA, keepalive, retries, default timeout). The official client
    installs its own refresh hook for expiring kubeconfig tokens; in-cluster tokens are re-read from
    the mounted file when it changes; a 401 reloads the credentials once and retries.

    :raises ClusterConfigError: naming the kubeconfig path and context, or the in-cluster setup.
    """
    import kubernetes.client

    configuration = kubernetes.client.Configuration()
    _load_sync(cfg, configuration)

    def load(fresh: Any) -> None:
        _load_sync(cfg, fresh)

    credentials = _Credentials(cfg, load, kubernetes.client.Configuration)
    try:
        return _jobwatch_api_client_class()(configuration, credentials=credentials)
    except (ssl.SSLError, OSError) as exc:
        raise tls_error(cfg, exc) from None
