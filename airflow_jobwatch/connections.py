"""Airflow configuration -> :class:`~airflow_jobwatch.kube.cluster.client.ClusterConfig`.

Two sources, each read the way upstream (apache-airflow-providers-cncf-kubernetes) reads it, so that
an existing deployment means the same thing here:

* a Kubernetes **connection** (``kubernetes_conn_id``: the trigger and the operator). Its extras are read
  through the provider's public ``AsyncKubernetesHook.get_conn_extras()`` and mean what
  ``KubernetesHook.get_conn()`` makes of them: ``in_cluster``, ``kube_config_path``, ``kube_config``
  (a whole kubeconfig, YAML or JSON), ``cluster_context``, ``disable_verify_ssl``,
  ``disable_tcp_keepalive`` (keepalive is on unless disabled, with the ``[kubernetes_executor]
  tcp_keep_*`` values), with or without the old ``extra__kubernetes__`` prefix. ``in_cluster``,
  ``kube_config_path`` and ``kube_config`` are mutually exclusive; when none is set, the pod's service
  account is used if the process runs in a pod, else the default kubeconfig (the hook's
  ``_get_default_client`` order).
* the **``[kubernetes_executor]``** section (the executor and its watcher processes): ``in_cluster``,
  ``config_file``, ``cluster_context``, ``verify_ssl``, ``ssl_ca_cert``, ``enable_tcp_keepalive`` and
  ``tcp_keep_idle/intvl/cnt``, ``api_client_retry_configuration`` and the ``_request_timeout`` of
  ``kube_client_request_args``, as ``get_kube_client()`` reads them.

We build the ``ClusterConfig`` ourselves instead of asking the hook for a client because the hook's
loading is private (``_load_config``) or process-global (``get_conn()`` and ``get_kube_client()`` set
the library's *default* Configuration when SSL verification is off), and because our clients must
refresh credentials (:mod:`airflow_jobwatch.kube.cluster.client`).

Nothing here reads a kubeconfig: that happens when a client is built, and only for the file(s) the
configuration names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from airflow_jobwatch.kube.cluster.client import ClusterConfig, ClusterConfigError, TcpKeepalive

__all__ = [
    "cluster_config_from_connection",
    "cluster_config_from_executor_conf",
    "cluster_config_from_extras",
    "running_in_a_pod",
]

K8S_SECTION = "kubernetes_executor"
_PREFIX = "extra__kubernetes__"


def running_in_a_pod(cfg: ClusterConfig | None = None) -> bool:
    """Whether the in-cluster configuration is there: the service env vars and a token file."""
    token_file, _ = (cfg or ClusterConfig(in_cluster=True)).service_account_files()
    return bool(
        os.environ.get("KUBERNETES_SERVICE_HOST")
        and os.environ.get("KUBERNETES_SERVICE_PORT")
        and os.path.isfile(token_file)
    )


def _field(extras: Mapping[str, Any], name: str) -> Any:
    """An extra with or without the ``extra__kubernetes__`` prefix; empty values count as unset."""
    if name in extras:
        return extras[name] or None
    return extras.get(f"{_PREFIX}{name}") or None


def _as_bool(value: Any, *, name: str, source: str) -> bool | None:
    """The hook's ``_get_bool``: booleans, and the strings true/false in any case."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ClusterConfigError(f"{source}: extra {name!r} is {value!r}; expected true or false")


def _conf() -> Any:
    from airflow.providers.common.compat.sdk import conf

    return conf


def _keepalive_from_conf(source: Any = None) -> TcpKeepalive:
    conf = source or _conf()
    default = TcpKeepalive()
    return TcpKeepalive(
        idle=conf.getint(K8S_SECTION, "tcp_keep_idle", fallback=default.idle),
        interval=conf.getint(K8S_SECTION, "tcp_keep_intvl", fallback=default.interval),
        count=conf.getint(K8S_SECTION, "tcp_keep_cnt", fallback=default.count),
    )


def cluster_config_from_extras(
    extras: Mapping[str, Any],
    *,
    conn_id: str | None,
    in_cluster: bool | None = None,
    config_file: str | None = None,
    cluster_context: str | None = None,
) -> ClusterConfig:
    """The ClusterConfig a Kubernetes connection's extras describe.

    Explicit arguments (the operator's/trigger's ``in_cluster``, ``config_file``, ``cluster_context``)
    win over the extras, as in ``KubernetesHook``.

    :raises ClusterConfigError: naming the connection, when the extras contradict each other or a value
        has the wrong type.
    """
    source = f"connection {conn_id!r}" if conn_id else "the operator's arguments"
    in_cluster_value = _as_bool(
        in_cluster if in_cluster is not None else _field(extras, "in_cluster"),
        name="in_cluster",
        source=source,
    )
    kube_config_path = config_file or _field(extras, "kube_config_path")
    kube_config = _field(extras, "kube_config")
    context = cluster_context or _field(extras, "cluster_context")
    chosen = [
        name
        for name, value in (
            ("in_cluster", in_cluster_value),
            ("kube_config_path", kube_config_path),
            ("kube_config", kube_config),
        )
        if value
    ]
    if len(chosen) > 1:
        raise ClusterConfigError(
            f"{source}: {' and '.join(chosen)} are both set; in_cluster, kube_config_path and kube_config "
            "are mutually exclusive (as in the cncf.kubernetes provider): keep one"
        )
    if kube_config is not None and not isinstance(kube_config, str | Mapping):
        raise ClusterConfigError(
            f"{source}: extra 'kube_config' is a {type(kube_config).__name__}; expected a kubeconfig as "
            "YAML or JSON text"
        )
    if isinstance(kube_config, Mapping):
        import json

        kube_config = json.dumps(kube_config)
    verify_off = _as_bool(_field(extras, "disable_verify_ssl"), name="disable_verify_ssl", source=source)
    keepalive_off = _as_bool(
        _field(extras, "disable_tcp_keepalive"), name="disable_tcp_keepalive", source=source
    )
    options: dict[str, Any] = {
        "verify_ssl": verify_off is not True,
        # The hook enables keepalive unless the connection disables it.
        "tcp_keepalive": None if keepalive_off is True else _keepalive_from_conf(),
        "source": source,
    }
    if in_cluster_value:
        return ClusterConfig(in_cluster=True, **options)
    if kube_config_path or kube_config:
        return ClusterConfig(
            config_file=str(kube_config_path) if kube_config_path else None,
            kube_config=kube_config,
            cluster_context=context,
            **options,
        )
    if conn_id and not context and running_in_a_pod():
        # Nothing chosen: the hook tries the pod's service account first, then the default kubeconfig.
        return ClusterConfig(in_cluster=True, **options)
    return ClusterConfig(cluster_context=context, **options)


async def cluster_config_from_connection(
    conn_id: str | None,
    *,
    in_cluster: bool | None = None,
    config_file: str | None = None,
    cluster_context: str | None = None,
) -> ClusterConfig:
    """Read connection ``conn_id`` (through the provider's public async hook API) into a ClusterConfig.

    ``conn_id=None`` uses the explicit arguments alone (and the default kubeconfig when they name
    nothing). A missing ``kubernetes_default`` connection counts as one with no extras, as upstream.
    """
    extras: Mapping[str, Any] = {}
    if conn_id:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        extras = await AsyncKubernetesHook(conn_id=conn_id).get_conn_extras()
    return cluster_config_from_extras(
        extras,
        conn_id=conn_id,
        in_cluster=in_cluster,
        config_file=config_file,
        cluster_context=cluster_context,
    )


def _request_timeout(value: Any) -> float | tuple[float, float] | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int | float) for v in value):
        return (float(value[0]), float(value[1]))
    raise ClusterConfigError(
        f"[{K8S_SECTION}] kube_client_request_args _request_timeout is {value!r}; expected seconds or "
        "[connect, read] seconds"
    )


def _json_object_option(conf: Any, option: str, example: str) -> dict[str, Any]:
    """A ``[kubernetes_executor]`` option holding a JSON object (``{}`` when unset); a clear error naming
    the option otherwise. ``example`` ends the message: what such an object looks like."""
    try:
        value = conf.getjson(K8S_SECTION, option, fallback={}) or {}
    except Exception as exc:
        raise ClusterConfigError(
            f"[{K8S_SECTION}] {option} is not valid JSON ({exc}); expected a JSON object {example}"
        ) from None
    if not isinstance(value, dict):
        raise ClusterConfigError(
            f"[{K8S_SECTION}] {option} is a JSON {type(value).__name__}; expected an object {example}"
        )
    return value


def executor_request_args(source: Any = None) -> dict[str, Any]:
    """``[kubernetes_executor] kube_client_request_args`` as a dict (``_request_timeout`` a tuple)."""
    args = _json_object_option(
        source or _conf(), "kube_client_request_args", 'such as {"_request_timeout": [10, 30]}'
    )
    if "_request_timeout" in args:
        args["_request_timeout"] = _request_timeout(args["_request_timeout"])
    return args


def cluster_config_from_executor_conf(source: Any = None) -> ClusterConfig:
    """The ``[kubernetes_executor]`` client options, read as ``get_kube_client()`` reads them.

    :param source: a team-aware ``ExecutorConf`` (the executor's ``self.conf``); default Airflow's conf.
    """
    conf = source or _conf()
    retries = _json_object_option(
        conf,
        "api_client_retry_configuration",
        'of urllib3 Retry arguments, e.g. {"total": 3, "backoff_factor": 0.5}',
    )
    keepalive = conf.getboolean(K8S_SECTION, "enable_tcp_keepalive", fallback=True)
    return ClusterConfig(
        config_file=conf.get(K8S_SECTION, "config_file", fallback=None) or None,
        cluster_context=conf.get(K8S_SECTION, "cluster_context", fallback=None) or None,
        in_cluster=conf.getboolean(K8S_SECTION, "in_cluster", fallback=True),
        verify_ssl=conf.getboolean(K8S_SECTION, "verify_ssl", fallback=True),
        ssl_ca_cert=conf.get(K8S_SECTION, "ssl_ca_cert", fallback=None) or None,
        tcp_keepalive=_keepalive_from_conf(conf) if keepalive else None,
        request_timeout=executor_request_args(conf).get("_request_timeout"),
        retries=retries or None,
        source=f"[{K8S_SECTION}]",
    )
