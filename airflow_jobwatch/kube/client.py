"""Building ``kubernetes_asyncio`` and ``kubernetes`` API clients from a kubeconfig or in-cluster.

Both client libraries keep a process-wide default ``Configuration`` that ``load_kube_config`` fills
when it is not handed one. We never use it: every client gets a fresh ``Configuration`` of its own,
so an Airflow process that talks to two clusters (two executors' namespaces, a trigger with its own
``config_file``) never sees one connection's credentials leak into another's.

Kubeconfig problems are found before the libraries see the file, so that each error names the
file(s), the context and what was expected, and never quotes the file: a kubeconfig holds bearer
tokens and private keys, and the libraries' YAML errors print the offending line.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kubernetes.client
import kubernetes.config
import kubernetes_asyncio.client
import kubernetes_asyncio.config
import yaml

__all__ = ["ClusterConfig", "ClusterConfigError", "async_api_client", "sync_api_client"]

#: How ``kubectl`` (and both client libraries) find a kubeconfig when none is named.
DEFAULT_KUBECONFIG = "~/.kube/config"
#: Separator of the ``KUBECONFIG`` path list (``:``; ``;`` on Windows), as in kubectl.
KUBECONFIG_PATH_SEPARATOR = os.pathsep
#: What ``identity()`` returns for in-cluster configuration: the cluster is the one the pod runs in
#: and the user its service account, both fixed for the life of the process.
IN_CLUSTER_IDENTITY = "in-cluster"
#: Shortest credential value that is scrubbed from library error messages: shorter strings (a user
#: name such as "admin") would also scrub innocent words, and no real token or key is that short.
_MIN_SECRET_LEN = 8


class ClusterConfigError(ValueError):
    """The cluster connection cannot be configured; the message says which file/context and why."""


@dataclass(frozen=True)
class ClusterConfig:
    """How to reach a Kubernetes API server.

    :param config_file: kubeconfig path, or several joined like ``KUBECONFIG`` (``a:b``). ``None``
        means what kubectl uses: ``$KUBECONFIG`` (read when a client is built, not at import time as the
        client libraries do), else ``~/.kube/config``.
    :param cluster_context: kubeconfig context; ``None`` means the kubeconfig's ``current-context``.
    :param in_cluster: use the pod's service account (``KUBERNETES_SERVICE_HOST`` and the mounted token,
        which is re-read as it rotates). It takes precedence over ``config_file`` and
        ``cluster_context``, as ``[kubernetes_executor] in_cluster`` does upstream.
    """

    config_file: str | None = None
    cluster_context: str | None = None
    in_cluster: bool = False

    def kubeconfig_paths(self) -> list[str]:
        """The kubeconfig files this configuration reads, in merge order, user-expanded."""
        raw = self.config_file or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
        return [os.path.expanduser(p) for p in raw.split(KUBECONFIG_PATH_SEPARATOR) if p]

    def identity(self) -> str:
        """A stable key naming the cluster and the user we act as, for sharing informers.

        Two configurations with the same identity see the same objects with the same permissions, so
        one watch can serve both. Built from the resolved server URL, context and user *names* only,
        never credentials. It reads the kubeconfig (no exec plugin is run).

        :raises ClusterConfigError: when the kubeconfig cannot be read or the context does not resolve.
        """
        if self.in_cluster:
            return IN_CLUSTER_IDENTITY
        resolved = _resolve(self)
        return f"server={resolved.server} context={resolved.context} user={resolved.user or '-'}"


# --------------------------------------------------------------------------------------------------
# Reading and checking the kubeconfig ourselves


@dataclass(frozen=True)
class _Resolved:
    paths: list[str]
    context: str
    cluster: str
    server: str
    user: str | None
    user_fields: Mapping[str, Any]

    @property
    def config_file_arg(self) -> str:
        return KUBECONFIG_PATH_SEPARATOR.join(self.paths)

    def describe(self) -> str:
        return f"kubeconfig {self.config_file_arg!r}, context {self.context!r}"


def _load_yaml(path: str) -> Mapping[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise ClusterConfigError(
            f"kubeconfig {path!r} cannot be read ({exc.strerror or type(exc).__name__}); "
            "expected a readable kubeconfig YAML file"
        ) from None
    except yaml.YAMLError as exc:
        # Only the position: yaml's own message quotes the offending line, which may hold a token.
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ClusterConfigError(
            f"kubeconfig {path!r} is not valid YAML{where}; expected a kubeconfig "
            "(apiVersion: v1, kind: Config, with clusters, contexts and users)"
        ) from None
    except UnicodeDecodeError:
        raise ClusterConfigError(
            f"kubeconfig {path!r} is not UTF-8 text; expected a kubeconfig YAML file"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ClusterConfigError(
            f"kubeconfig {path!r} holds a YAML {type(data).__name__}, expected a mapping "
            "(apiVersion: v1, kind: Config, with clusters, contexts and users)"
        )
    return data


def _named(entries: object, path: str, section: str) -> dict[str, Mapping[str, Any]]:
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise ClusterConfigError(f"kubeconfig {path!r}: '{section}' must be a list of named entries")
    result: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise ClusterConfigError(f"kubeconfig {path!r}: every entry of '{section}' needs a 'name'")
        result.setdefault(entry["name"], entry)
    return result


def _resolve(cfg: ClusterConfig) -> _Resolved:
    """Merge the kubeconfig files the way kubectl does and resolve the context, checking every step.

    Merge rules (kubectl's): a name defined in an earlier file wins; the first file that sets
    ``current-context`` decides it. A file named in ``config_file`` must exist; in ``$KUBECONFIG``
    missing files are skipped as long as one exists.
    """
    paths = cfg.kubeconfig_paths()
    shown = KUBECONFIG_PATH_SEPARATOR.join(paths)
    if cfg.config_file:
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise ClusterConfigError(
                f"kubeconfig {missing[0]!r} (from config_file) does not exist or is not a file; "
                "expected the path of a kubeconfig YAML file"
            )
    existing = [p for p in paths if os.path.isfile(p)]
    if not existing:
        source = "$KUBECONFIG" if os.environ.get("KUBECONFIG") else "the default location"
        raise ClusterConfigError(
            f"no kubeconfig found at {shown!r} ({source}); set config_file to a kubeconfig path, "
            "or in_cluster=True when running in a pod"
        )

    # name -> (entry, the file that defined it: relative paths in an entry are relative to its file)
    clusters: dict[str, tuple[Mapping[str, Any], str]] = {}
    contexts: dict[str, tuple[Mapping[str, Any], str]] = {}
    users: dict[str, tuple[Mapping[str, Any], str]] = {}
    current: str | None = None
    for path in existing:
        data = _load_yaml(path)
        for target, section in ((clusters, "clusters"), (contexts, "contexts"), (users, "users")):
            for name, entry in _named(data.get(section), path, section).items():
                target.setdefault(name, (entry, path))
        if current is None and isinstance(data.get("current-context"), str) and data["current-context"]:
            current = data["current-context"]
    shown = KUBECONFIG_PATH_SEPARATOR.join(existing)

    context_name = cfg.cluster_context or current
    available = ", ".join(sorted(contexts)) or "none"
    if context_name is None:
        raise ClusterConfigError(
            f"kubeconfig {shown!r} sets no current-context and no cluster_context was given; "
            f"expected one of the contexts it defines: {available}"
        )
    if context_name not in contexts:
        raise ClusterConfigError(
            f"kubeconfig {shown!r} has no context {context_name!r}; expected one of: {available}"
        )
    context = contexts[context_name][0].get("context")
    if not isinstance(context, Mapping) or not isinstance(context.get("cluster"), str):
        raise ClusterConfigError(
            f"kubeconfig {shown!r}, context {context_name!r}: expected 'context.cluster' naming a cluster"
        )
    cluster_name: str = context["cluster"]
    cluster_entry, cluster_file = clusters.get(cluster_name, ({}, shown))
    cluster = cluster_entry.get("cluster")
    if not isinstance(cluster, Mapping):
        raise ClusterConfigError(
            f"kubeconfig {shown!r}, context {context_name!r}: cluster {cluster_name!r} is not defined; "
            f"expected one of: {', '.join(sorted(clusters)) or 'none'}"
        )
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise ClusterConfigError(
            f"kubeconfig {shown!r}, context {context_name!r}: cluster {cluster_name!r} has no 'server'; "
            "expected the API server URL, e.g. https://10.0.0.1:6443"
        )
    user_name = context.get("user") if isinstance(context.get("user"), str) else None
    user_fields: Mapping[str, Any] = {}
    if user_name:
        user_entry = users.get(user_name)
        if user_entry is None:
            raise ClusterConfigError(
                f"kubeconfig {shown!r}, context {context_name!r}: user {user_name!r} is not defined; "
                f"expected one of: {', '.join(sorted(users)) or 'none'}"
            )
        fields = user_entry[0].get("user")
        user_fields = fields if isinstance(fields, Mapping) else {}
        _check_files(
            user_fields, user_entry[1], ("client-certificate", "client-key", "tokenFile"), shown, context_name
        )
    _check_files(cluster, cluster_file, ("certificate-authority",), shown, context_name)
    return _Resolved(
        paths=existing,
        context=context_name,
        cluster=cluster_name,
        server=server.rstrip("/"),
        user=user_name,
        user_fields=user_fields,
    )


def _check_files(
    fields: Mapping[str, Any], defined_in: str, keys: tuple[str, ...], shown: str, context: str
) -> None:
    """Files a kubeconfig entry refers to must exist (the libraries would fail later, or on first use).

    A ``<key>-data`` field, when present, wins over the file, as in kubectl.
    """
    for key in keys:
        value = fields.get(key)
        if not isinstance(value, str) or not value or fields.get(f"{key}-data"):
            continue
        resolved = os.path.join(os.path.dirname(defined_in), os.path.expanduser(value))
        if not os.path.isfile(resolved):
            raise ClusterConfigError(
                f"kubeconfig {shown!r}, context {context!r}: {key} {resolved!r} does not exist; "
                f"expected a readable file (or inline {key}-data)"
            )


def _secrets(value: object) -> set[str]:
    """Every credential-looking string under a kubeconfig user entry."""
    if isinstance(value, str):
        return {value} if len(value) >= _MIN_SECRET_LEN else set()
    children: list[object] = []
    if isinstance(value, Mapping):
        children = list(value.values())
    elif isinstance(value, list):
        children = value
    found: set[str] = set()
    for child in children:
        found |= _secrets(child)
    return found


def _scrub(text: str, secrets: set[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "<redacted>")
    return text


def _library_error(resolved: _Resolved, exc: BaseException) -> ClusterConfigError:
    detail = _scrub(str(exc), _secrets(resolved.user_fields)) or type(exc).__name__
    return ClusterConfigError(f"{resolved.describe()} cannot be loaded: {detail}")


def _in_cluster_error(exc: BaseException) -> ClusterConfigError:
    return ClusterConfigError(
        f"in_cluster=True but the in-cluster configuration cannot be loaded ({exc}); expected to run in a "
        "pod with KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT set and a service account token mounted "
        "at /var/run/secrets/kubernetes.io/serviceaccount; outside a cluster set config_file instead"
    )


def _tls_error(cfg: ClusterConfig, exc: ssl.SSLError) -> ClusterConfigError:
    where = "the in-cluster service account CA" if cfg.in_cluster else _resolve(cfg).describe()
    return ClusterConfigError(
        f"{where}: the TLS material (certificate-authority, client-certificate or client-key) cannot be "
        f"loaded ({exc.reason or type(exc).__name__}); expected PEM-encoded certificates and key"
    )


# Everything the loaders are known to raise on a bad kubeconfig (ConfigException, plus the raw
# KeyError/TypeError/ValueError their dict walking throws on odd shapes, and OSError for cert files).
_LOAD_ERRORS: tuple[type[BaseException], ...] = (
    kubernetes.config.ConfigException,
    kubernetes_asyncio.config.ConfigException,
    OSError,
    KeyError,
    TypeError,
    ValueError,
)


# --------------------------------------------------------------------------------------------------
# Clients


async def async_api_client(cfg: ClusterConfig) -> kubernetes_asyncio.client.ApiClient:
    """A ``kubernetes_asyncio`` ``ApiClient`` with its own ``Configuration``; the caller closes it.

    Tokens from a kubeconfig ``exec`` plugin (EKS, GKE, OIDC helpers) are short-lived (15 min on
    EKS) while our watches run for hours, so for such users a refresh hook re-runs the plugin once the
    token has expired; ``kubernetes_asyncio`` calls it before each request. In-cluster tokens are
    re-read from the mounted file by the library's own hook.

    :raises ClusterConfigError: naming the kubeconfig path and context, or the in-cluster setup.
    """
    configuration = kubernetes_asyncio.client.Configuration()
    if cfg.in_cluster:
        try:
            kubernetes_asyncio.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]  # untyped in the library
        except _LOAD_ERRORS as exc:
            raise _in_cluster_error(exc) from None
    else:
        resolved = _resolve(cfg)
        try:
            loader = await kubernetes_asyncio.config.load_kube_config(
                config_file=resolved.config_file_arg,
                context=resolved.context,
                client_configuration=configuration,
                persist_config=False,  # never write refreshed tokens back into the user's file
            )
        except _LOAD_ERRORS as exc:
            raise _library_error(resolved, exc) from None
        if "exec" in resolved.user_fields and configuration.refresh_api_key_hook is None:
            configuration.refresh_api_key_hook = _exec_token_refresher(loader)
    try:
        # The aiohttp connector loads the CA bundle and client certificate here.
        return kubernetes_asyncio.client.ApiClient(configuration=configuration)
    except ssl.SSLError as exc:
        raise _tls_error(cfg, exc) from None


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


def sync_api_client(cfg: ClusterConfig) -> kubernetes.client.ApiClient:
    """A ``kubernetes`` (official client) ``ApiClient`` with its own ``Configuration``; the caller closes it.

    The official client installs its own refresh hook for expiring kubeconfig and in-cluster tokens.

    :raises ClusterConfigError: naming the kubeconfig path and context, or the in-cluster setup.
    """
    configuration = kubernetes.client.Configuration()
    if cfg.in_cluster:
        try:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
        except _LOAD_ERRORS as exc:
            raise _in_cluster_error(exc) from None
    else:
        resolved = _resolve(cfg)
        try:
            kubernetes.config.load_kube_config(
                config_file=resolved.config_file_arg,
                context=resolved.context,
                client_configuration=configuration,
                persist_config=False,
            )
        except _LOAD_ERRORS as exc:
            raise _library_error(resolved, exc) from None
    try:
        return kubernetes.client.ApiClient(configuration=configuration)
    except ssl.SSLError as exc:
        raise _tls_error(cfg, exc) from None
