"""Every Airflow (and cncf.kubernetes provider) interface that differs between the supported releases.

airflow-jobwatch supports Airflow 3.1, 3.2 and 3.3, each with the cncf.kubernetes provider release its
constraint file pins (docs/compatibility.md; CI runs the unit and integration tests on each with the pins
in constraints/). The rest of the package imports a version-dependent name from here, never from where
one release keeps it, so that supporting a new release means changing this module only.

What differs, and which release does what:

======================  ===================================  ==================================  ==========================
interface               Airflow 3.1 (provider 10.13)         Airflow 3.2 (provider 10.17)        Airflow 3.3 (provider 10.25)
======================  ===================================  ==================================  ==========================
executor workloads      module ``airflow.executors.          package; the task instance is       as 3.2 (``TaskInstanceDTO``
                        workloads``; the task instance is     ``workloads.TaskInstanceDTO``       extends the execution
                        ``workloads.TaskInstance``                                                API's ``TaskInstance``)
executor ``self.conf``  ``ExecutorConf`` with ``get`` and     ``ExecutorConf`` of the executor's  as 3.2
(multi-team)            ``getboolean`` only: the global       team (``team_name``), with every
                        ``conf`` is used instead              getter
``KubeConfig``          ``KubeConfig()``: global conf only    ``KubeConfig(executor_conf=...)``   as 3.2
metrics (``Stats``)     ``airflow.stats.Stats``, its backend  ``airflow.observability.stats.     module functions in
                        chosen from ``[metrics]`` when        Stats``; ``Stats.initialize(        ``airflow.observability.
                        ``airflow.stats`` is imported         factory=get_stats_factory(Stats))`` stats``; ``initialize(
                                                                                                  factory, export_legacy_
                                                                                                  names)``
CLI commands            from the configured executors'       from the provider's ``cli`` entry   as 3.2
                        ``get_cli_commands()`` only
DagBag                  ``airflow.models.dagbag``             ``airflow.dag_processing.dagbag``   as 3.2
``on_kill_action``      not a KubernetesPodOperator           ``OnKillAction`` in                 as 3.2
                        argument; the pods are always         ``utils.pod_manager``
                        deleted on kill
kubernetes /            35 / 34                               35 / 35                             36 / 36
kubernetes_asyncio
======================  ===================================  ==================================  ==========================

The kubernetes client's major version comes with the provider (10.13 and 10.17 require ``kubernetes<36``):
``kubernetes_models_use_client_configuration()`` says whether models built by ``ApiClient.deserialize`` honour
that client's ``Configuration`` (36+), or validate required fields whatever it says (35). kubernetes 35
also ignores ``Configuration.socket_options`` (TCP keepalive): ``kube/cluster/client.py`` hands them to urllib3
itself, next to the code that needs it (``kube/`` knows nothing of Airflow, so it does not import this).

Nothing here changes behaviour on Airflow 3.3: each function does what the code did before it moved here.
"""

from __future__ import annotations

import enum
import functools
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.executors.base_executor import BaseExecutor
    from airflow.executors.workloads import BundleInfo, ExecuteTask, TaskInstanceDTO
    from airflow.providers.cncf.kubernetes.utils.pod_manager import OnKillAction


def _airflow_version() -> str:
    try:
        from airflow import __version__
    except ImportError:  # pragma: no cover - a worker with the task SDK only: no airflow-core
        return "3.3"
    return str(__version__)


def _major_minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


#: The running Airflow's (major, minor), e.g. (3, 2).
AIRFLOW_VERSION: tuple[int, int] = _major_minor(_airflow_version())
AIRFLOW_V_3_2_PLUS: bool = AIRFLOW_VERSION >= (3, 2)
AIRFLOW_V_3_3_PLUS: bool = AIRFLOW_VERSION >= (3, 3)


def kubernetes_models_use_client_configuration() -> bool:
    """Whether models built by ``kubernetes.client.ApiClient.deserialize`` use that client's
    ``Configuration`` (kubernetes 36+: ``client_side_validation = False`` lets a model lack required
    fields), or each a fresh default ``Configuration()``, which validates whatever the client says (35)."""
    import kubernetes

    return int(str(kubernetes.__version__).split(".")[0]) >= 36


# --- executor workloads ------------------------------------------------------------------------------
# BundleInfo, ExecuteTask, TaskInstanceDTO (and OnKillAction, below) are looked up on first use (module
# __getattr__), so that importing this module imports neither Airflow's executor code nor the provider's
# operators (metrics imports it, in every process).


def __getattr__(name: str) -> Any:
    if name == "OnKillAction":  # the provider's (10.15+) or ours
        return _on_kill_action_enum()
    if name in ("BundleInfo", "ExecuteTask", "TaskInstanceDTO"):
        from airflow.executors import workloads

        if name == "TaskInstanceDTO" and not AIRFLOW_V_3_2_PLUS:
            return workloads.TaskInstance  # Airflow 3.1's name for it
        return getattr(workloads, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AIRFLOW_V_3_2_PLUS",
    "AIRFLOW_V_3_3_PLUS",
    "AIRFLOW_VERSION",
    "PARITY_PROVIDER_VERSION",
    "upstream_arguments",
    "BundleInfo",
    "ExecuteTask",
    "OnKillAction",
    "TaskInstanceDTO",
    "cncf_kubernetes_version",
    "dag_bag_class",
    "executor_cli_commands",
    "executor_conf",
    "kube_config",
    "kubernetes_models_use_client_configuration",
    "on_kill_action",
    "stats_backend",
]


def executor_conf(executor: BaseExecutor) -> Any:
    """Where an executor reads its options: the ``ExecutorConf`` of its team that ``BaseExecutor`` sets
    (Airflow 3.2+ multi-team: ``AIRFLOW__<TEAM>___KUBERNETES_EXECUTOR__...`` before the global option),
    else Airflow's global ``conf``. Airflow 3.1's ``ExecutorConf`` has ``get`` and ``getboolean`` only,
    not the ``getint``/``getjson``/``getsection`` the provider's ``KubeConfig`` calls, so 3.1 gets
    ``conf`` (it has no teams to read options for)."""
    from airflow.configuration import conf

    own = getattr(executor, "conf", None)
    if own is None or not hasattr(own, "getint"):
        return conf
    return own


def kube_config(executor_conf: Any) -> Any:
    """The provider's ``KubeConfig`` (the ``[kubernetes_executor]`` options) read through
    ``executor_conf``. Provider 10.14+ takes it as ``executor_conf=``; 10.13 (Airflow 3.1's) reads the
    global ``conf`` only, which is what :func:`executor_conf` gives on Airflow 3.1 anyway."""
    import inspect

    from airflow.providers.cncf.kubernetes.kube_config import KubeConfig

    if "executor_conf" in inspect.signature(KubeConfig).parameters:
        return KubeConfig(executor_conf=executor_conf)
    return KubeConfig()


def executor_cli_commands() -> list[Any]:
    """The ``airflow jobwatch`` commands, for ``JobWatchExecutor.get_cli_commands()``.

    Airflow 3.2+ reads them from the provider's ``cli`` entry (``get_provider_info``), for every
    installation, and calls an executor's ``get_cli_commands()`` only for providers without one (so they
    are never added twice). Airflow 3.1 reads CLI commands from the configured executors only: there,
    ``airflow jobwatch`` exists where ``[core] executor`` names JobWatchExecutor.
    """
    if AIRFLOW_V_3_2_PLUS:
        return []
    from airflow_jobwatch.cli.definition import get_jobwatch_cli_commands

    return list(get_jobwatch_cli_commands())


# --- metrics -----------------------------------------------------------------------------------------


def stats_backend(*, reinitialize: bool = False) -> Any:
    """Airflow's metrics sender: an object with ``incr(name, count=, tags=)``, ``gauge(name, value,
    tags=)`` and ``timing(name, value, tags=)``, that sends through the backend ``[metrics]`` selects
    (StatsD, Datadog, OpenTelemetry, or nothing).

    It is configured from ``[metrics]`` the way Airflow's own components do it, if nothing in this process
    did yet (the executor's watcher child and the triggerer's subprocesses may be spawned), or always with
    ``reinitialize=True``. Configured already, it is left alone: for OpenTelemetry, configuring again
    would replace the meter provider.
    """
    from airflow.configuration import conf

    try:
        from airflow.observability import stats as stats_module
    except ImportError:
        stats_module = None  # type: ignore[assignment]

    if stats_module is not None and hasattr(stats_module, "initialize"):  # Airflow 3.3
        from airflow.observability.metrics import stats_utils

        if reinitialize or getattr(stats_module, "_factory", None) is None:
            stats_module.initialize(
                factory=stats_utils.get_stats_factory(),
                export_legacy_names=conf.getboolean("metrics", "legacy_names_on", fallback=True),
            )
        return stats_module

    if stats_module is not None:  # Airflow 3.2: the Stats class, configured by initialize()
        stats_utils_32: Any = importlib.import_module("airflow.observability.metrics.stats_utils")

        stats_cls: Any = stats_module.Stats
        if reinitialize or getattr(type(stats_cls), "factory", None) is None:
            stats_cls.initialize(factory=stats_utils_32.get_stats_factory(stats_cls))
        return stats_cls

    # Airflow 3.1: airflow.stats.Stats picks its backend from [metrics] once, when it is first imported.
    try:
        from airflow.stats import Stats
    except ImportError:  # pragma: no cover - a worker with the task SDK only: it configures its own
        from airflow.sdk.observability import stats as sdk_stats

        return sdk_stats

    if reinitialize:
        stats_31: Any = Stats
        type(stats_31).factory = _stats_factory_31(conf)  # where airflow.stats keeps it
        stats_31.instance = None  # the backend built by the old factory (on the class): built again
    return Stats


def _stats_factory_31(conf: Any) -> Any:
    """The backend Airflow 3.1's ``airflow.stats`` chooses at import, chosen again from today's conf."""
    if conf.getboolean("metrics", "statsd_datadog_enabled", fallback=False):
        from airflow.metrics import datadog_logger

        return datadog_logger.get_dogstatsd_logger
    if conf.getboolean("metrics", "statsd_on", fallback=False):
        from airflow.metrics import statsd_logger

        return statsd_logger.get_statsd_logger
    if conf.getboolean("metrics", "otel_on", fallback=False):
        from airflow.metrics import otel_logger

        return otel_logger.get_otel_logger
    from airflow.metrics.base_stats_logger import NoStatsLogger

    return NoStatsLogger


# --- DAG parsing -------------------------------------------------------------------------------------


def dag_bag_class() -> Any:
    """``DagBag``: ``airflow.dag_processing.dagbag`` since Airflow 3.2, ``airflow.models.dagbag`` in 3.1."""
    module = "airflow.dag_processing.dagbag" if AIRFLOW_V_3_2_PLUS else "airflow.models.dagbag"
    return importlib.import_module(module).DagBag


# --- the provider (cncf.kubernetes) ------------------------------------------------------------------


def policy_plugin_manager() -> Any:
    """Airflow's pluggy manager of cluster policies (``pod_mutation_hook`` and the others): built on first
    use by ``settings.get_policy_plugin_manager()`` on Airflow 3.2+, a module global on Airflow 3.1."""
    from airflow import settings

    getter = getattr(settings, "get_policy_plugin_manager", None)
    if getter is not None:
        return getter()
    return settings.POLICY_PLUGIN_MANAGER


def cncf_kubernetes_version() -> tuple[int, int]:
    """The installed apache-airflow-providers-cncf-kubernetes release's (major, minor), e.g. (10, 25)."""
    from importlib.metadata import version

    return _major_minor(version("apache-airflow-providers-cncf-kubernetes"))


#: The provider release whose behaviour the differential tests (tests/integration/trigger/
#: test_differential_job_operator.py) compare ours with: Airflow 3.3's. Older releases differ from it in
#: ways of their own (the Job operator's on_finish_action, on_kill_action, log and error texts).
PARITY_PROVIDER_VERSION = (10, 25)


def _signature_arguments(*classes: Any) -> frozenset[str]:
    """The arguments each of ``classes``' ``__init__`` names (read from the installed provider: they
    differ by release)."""
    import inspect

    return frozenset(name for cls in classes for name in inspect.signature(cls.__init__).parameters)


@functools.cache
def pod_operator_arguments() -> frozenset[str]:
    """The arguments of the installed provider's ``KubernetesPodOperator``."""
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    return _signature_arguments(KubernetesPodOperator)


def upstream_arguments(owner: type, arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` (every argument of provider 10.25's ``KubernetesJobOperator``, as ``owner``'s
    ``__init__`` names them) less those the installed provider does not know.

    ``owner``'s signature names 10.25's arguments so that IDEs and ``help()`` show them; an older provider
    (10.13 with Airflow 3.1, 10.17 with 3.2) lacks some (``durable``, ``on_kill_action``,
    ``log_events_on_startup``, ...), and Airflow's ``BaseOperator`` refuses unknown arguments. Every argument
    left at ``owner``'s default is dropped (the installed provider applies its own); an unknown one set to
    anything else raises ``TypeError`` naming it and the provider release.
    """
    import inspect

    from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    known = _signature_arguments(KubernetesJobOperator, KubernetesPodOperator)
    defaults = inspect.signature(owner).parameters

    def at_default(name: str) -> bool:
        if name not in defaults:
            return False
        default, value = defaults[name].default, arguments[name]
        return value is default or (
            isinstance(value, (bool, int, float, str)) and type(value) is type(default) and value == default
        )

    set_ = sorted(n for n in set(arguments) - known if not at_default(n))
    if set_:
        major, minor = cncf_kubernetes_version()
        raise TypeError(
            f"{owner.__name__}: {', '.join(set_)} need a newer apache-airflow-providers-cncf-kubernetes "
            f"than the installed {major}.{minor}; upgrade the provider or leave them unset"
        )
    # An argument left at owner's default is not passed: the installed provider applies its own default,
    # which is the same on 10.25 (a test compares the signatures) and may differ on older releases
    # (10.13's reattach_on_restart is True where 10.25 takes None to mean the same).
    return {k: v for k, v in arguments.items() if k in known and not at_default(k)}


class _OnKillAction(str, enum.Enum):  # noqa: UP042 - a str Enum as upstream's, not a StrEnum
    """The provider's ``OnKillAction`` (10.15+), for providers that predate it."""

    DELETE_POD = "delete_pod"
    KEEP_POD = "keep_pod"


def _on_kill_action_enum() -> Any:
    try:
        from airflow.providers.cncf.kubernetes.utils.pod_manager import OnKillAction
    except ImportError:  # provider 10.13/10.14 (Airflow 3.1's): no on_kill_action; pods deleted on kill
        return _OnKillAction
    return OnKillAction


def on_kill_action(operator: Any) -> OnKillAction:
    """What the operator does with the Job's pods when the task is killed: upstream's ``on_kill_action``
    (set by ``KubernetesPodOperator.__init__`` since provider 10.15); older providers always delete them."""
    value = getattr(operator, "on_kill_action", None)
    enum_cls = _on_kill_action_enum()
    return enum_cls(value) if value is not None else enum_cls.DELETE_POD  # type: ignore[no-any-return]
