"""Reading and checking a kubeconfig ourselves, before either client library sees it.

The client libraries' own errors on a bad kubeconfig quote the offending YAML line and may print a token;
here each problem is found first and named by file, context and what was expected, never by content.
The files are merged and the context resolved the way kubectl does (``resolve``), and parsed files are
cached by their stat so that thousands of triggers naming one kubeconfig parse it once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import yaml


class KubeconfigSource(Protocol):
    """What this module reads of a cluster configuration (:class:`airflow_jobwatch.kube.cluster.client.ClusterConfig`
    has it): the kubeconfig it names, the context, the inline kubeconfig, the in-cluster files and the CA
    bundle, and where it came from for messages. A protocol, so that reading a kubeconfig does not depend on
    the module that builds clients from it."""

    @property
    def config_file(self) -> str | None: ...
    @property
    def cluster_context(self) -> str | None: ...
    @property
    def in_cluster(self) -> bool: ...
    @property
    def kube_config(self) -> str | None: ...
    @property
    def ssl_ca_cert(self) -> str | None: ...
    @property
    def source(self) -> str: ...
    def kubeconfig_paths(self) -> list[str]: ...
    def service_account_files(self) -> tuple[str, str]: ...


#: How ``kubectl`` (and both client libraries) find a kubeconfig when none is named.
DEFAULT_KUBECONFIG = "~/.kube/config"

#: Separator of the ``KUBECONFIG`` path list (``:``; ``;`` on Windows), as in kubectl.
KUBECONFIG_PATH_SEPARATOR = os.pathsep

#: Shortest credential value that is scrubbed from library error messages: shorter strings (a user
#: name such as "admin") would also scrub innocent words, and no real token or key is that short.
_MIN_SECRET_LEN = 8

#: How an inline kubeconfig (the connection extra ``kube_config``) is named in messages.
INLINE_KUBECONFIG = "<connection extra kube_config>"


class ClusterConfigError(ValueError):
    """The cluster connection cannot be configured; the message says which file/context and why."""


# --------------------------------------------------------------------------------------------------
# Reading and checking the kubeconfig ourselves


@dataclass(frozen=True)
class Resolved:
    paths: list[str]
    context: str
    cluster: str
    server: str
    user: str | None
    user_fields: Mapping[str, Any]
    cluster_fields: Mapping[str, Any] = field(default_factory=dict)

    data: Mapping[str, Any] | None = None  # the inline kubeconfig, when there is no file

    @property
    def config_file_arg(self) -> str:
        return KUBECONFIG_PATH_SEPARATOR.join(self.paths)

    def describe(self) -> str:
        return f"kubeconfig {self.config_file_arg!r}, context {self.context!r}"


#: Parsed kubeconfig files by path, with the (mtime, size, inode) they were parsed at. Every JobTrigger
#: resolves its kubeconfig to name its shared watch; with thousands of triggers in one triggerer, parsing
#: the same YAML each time blocked the event loop for seconds. A file rewritten in place or replaced
#: (credential rotation) changes its stat and is parsed again. Read-only: callers never mutate the result.
_PARSED_KUBECONFIGS: dict[str, tuple[tuple[int, int, int], Mapping[str, Any]]] = {}
_PARSED_KUBECONFIGS_MAX = 64
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(path: str) -> Mapping[str, Any]:
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise ClusterConfigError(
            f"kubeconfig {path!r} cannot be read ({exc.strerror or type(exc).__name__}); "
            "expected a readable kubeconfig YAML file"
        ) from None
    stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
    cached = _PARSED_KUBECONFIGS.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    data = _parse_kubeconfig_file(path)
    if len(_PARSED_KUBECONFIGS) >= _PARSED_KUBECONFIGS_MAX:
        _PARSED_KUBECONFIGS.pop(next(iter(_PARSED_KUBECONFIGS)))
    _PARSED_KUBECONFIGS[path] = (stamp, data)
    return data


def _parse_kubeconfig_file(path: str) -> Mapping[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.load(handle, Loader=_YAML_LOADER)  # a safe loader (libyaml when built with it)
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


def _existing_kubeconfig_files(cfg: KubeconfigSource) -> list[str]:
    paths = cfg.kubeconfig_paths()
    shown = KUBECONFIG_PATH_SEPARATOR.join(paths)
    existing = [p for p in paths if os.path.isfile(p)]
    if cfg.config_file and len(existing) < len(paths):
        missing = [p for p in paths if p not in existing]
        raise ClusterConfigError(
            f"kubeconfig {missing[0]!r} (from config_file) does not exist or is not a file; "
            "expected the path of a kubeconfig YAML file"
        )
    if not existing:
        source = "$KUBECONFIG" if os.environ.get("KUBECONFIG") else "the default location"
        raise ClusterConfigError(
            f"no kubeconfig found at {shown!r} ({source}); set config_file (or the connection's "
            "kube_config_path / kube_config) to a kubeconfig, or in_cluster=True when running in a pod"
        )
    return existing


def _load_inline(text: str) -> Mapping[str, Any]:
    """The connection extra ``kube_config``: a kubeconfig as YAML or JSON text (or already a mapping)."""
    if isinstance(text, Mapping):
        return text
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ClusterConfigError(
            f"the connection's kube_config is not valid YAML or JSON{where}; expected a whole kubeconfig "
            "(apiVersion: v1, kind: Config, with clusters, contexts and users)"
        ) from None
    if not isinstance(data, Mapping):
        raise ClusterConfigError(
            f"the connection's kube_config holds a {type(data).__name__}, expected a kubeconfig mapping "
            "(apiVersion: v1, kind: Config, with clusters, contexts and users)"
        )
    return data


def resolve(cfg: KubeconfigSource) -> Resolved:
    """Merge the kubeconfig files the way kubectl does and resolve the context, checking every step.

    Merge rules (kubectl's): a name defined in an earlier file wins; the first file that sets
    ``current-context`` decides it. A file named in ``config_file`` must exist; in ``$KUBECONFIG``
    missing files are skipped as long as one exists.
    """
    # name -> (entry, the file that defined it: relative paths in an entry are relative to its file)
    clusters: dict[str, tuple[Mapping[str, Any], str]] = {}
    contexts: dict[str, tuple[Mapping[str, Any], str]] = {}
    users: dict[str, tuple[Mapping[str, Any], str]] = {}
    current: str | None = None
    if cfg.kube_config:
        existing = [INLINE_KUBECONFIG]
        documents = [(os.path.join(os.getcwd(), INLINE_KUBECONFIG), _load_inline(cfg.kube_config))]
    else:
        existing = _existing_kubeconfig_files(cfg)
        documents = [(path, _load_yaml(path)) for path in existing]
    for path, data in documents:
        label = INLINE_KUBECONFIG if cfg.kube_config else path
        for target, section in ((clusters, "clusters"), (contexts, "contexts"), (users, "users")):
            for name, entry in _named(data.get(section), label, section).items():
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
    return Resolved(
        paths=existing,
        context=context_name,
        cluster=cluster_name,
        server=server.rstrip("/"),
        user=user_name,
        user_fields=user_fields,
        cluster_fields=cluster,
        data=documents[0][1] if cfg.kube_config else None,
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


def library_error(resolved: Resolved, exc: BaseException) -> ClusterConfigError:
    detail = _scrub(str(exc), _secrets(resolved.user_fields)) or type(exc).__name__
    return ClusterConfigError(f"{resolved.describe()} cannot be loaded: {detail}")


def in_cluster_error(cfg: KubeconfigSource, exc: BaseException) -> ClusterConfigError:
    directory = os.path.dirname(cfg.service_account_files()[0])
    origin = f" ({cfg.source})" if cfg.source else ""
    return ClusterConfigError(
        f"in_cluster=True{origin} but the in-cluster configuration cannot be loaded ({exc}); expected to run "
        "in a pod with KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT set and a service account token "
        f"mounted at {directory} (automountServiceAccountToken must not be false); outside a cluster set "
        "config_file (or the connection's kube_config_path) instead"
    )


def tls_error(cfg: KubeconfigSource, exc: OSError) -> ClusterConfigError:
    if cfg.in_cluster:
        where = "the in-cluster service account CA"
    elif cfg.kube_config:
        where = INLINE_KUBECONFIG
    else:
        where = resolve(cfg).describe()
    if cfg.ssl_ca_cert:
        where += f" / ssl_ca_cert {cfg.ssl_ca_cert!r}"
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__
    return ClusterConfigError(
        f"{where}: the TLS material (certificate-authority, ssl_ca_cert, client-certificate or client-key) "
        f"cannot be loaded ({reason}); expected readable PEM-encoded certificates and key"
    )


# Everything the loaders are known to raise on a bad kubeconfig (ConfigException, plus the raw
# KeyError/TypeError/ValueError their dict walking throws on odd shapes, and OSError for cert files).
# Each loader adds its library's ConfigException (imported there, lazily).
LOAD_ERRORS: tuple[type[BaseException], ...] = (OSError, KeyError, TypeError, ValueError)
