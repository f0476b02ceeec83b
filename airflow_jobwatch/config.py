"""The one reader of the ``[jobwatch]`` configuration section.

Every ``[jobwatch]`` option is declared once, in ``provider.yaml`` (description, type, default); the
defaults here come from that declaration through :func:`~airflow_jobwatch.get_provider_info.get_provider_info`,
so code and documentation cannot disagree. Values are read through Airflow's configuration each time a
function is called, so ``AIRFLOW__JOBWATCH__*`` environment variables and ``airflow.cfg`` edits apply to
the next executor start or trigger.

A value that is not what the option expects raises :class:`JobwatchConfigError`, naming the option, the
value and what was expected, where the user sees it (scheduler start-up, triggerer log).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_jobwatch.kube.informer import InformerConfig

SECTION = "jobwatch"


class JobwatchConfigError(ValueError):
    """A ``[jobwatch]`` option holds a value of the wrong kind."""


@cache
def _declared() -> dict[str, dict[str, Any]]:
    from airflow_jobwatch.get_provider_info import get_provider_info

    options: dict[str, dict[str, Any]] = get_provider_info()["config"][SECTION]["options"]
    return options


def default(option: str) -> str:
    """The default of ``option`` as declared in provider.yaml (a string, as in ``airflow.cfg``)."""
    try:
        return str(_declared()[option]["default"] or "")
    except KeyError:
        raise KeyError(f"[{SECTION}] {option} is not an option of airflow-jobwatch") from None


def _conf() -> Any:
    from airflow.providers.common.compat.sdk import conf

    return conf


def get_str(option: str, *, source: Any = None) -> str:
    """The option's value as a string (empty when unset and its default is empty).

    :param source: where to read it: a team's ``ExecutorConf`` (Airflow 3.2+ multi-team executors), or
        None for Airflow's configuration.
    """
    value = (source or _conf()).get(SECTION, option, fallback=None)
    if value is None or str(value).strip() == "":
        value = default(option)
    return str(value).strip()


def get_float(option: str, *, minimum: float | None = None, source: Any = None) -> float:
    """The option's value as a number of seconds (or another float).

    :param minimum: smallest accepted value (inclusive); anything below raises.
    :param source: as for :func:`get_str`.
    """
    raw = get_str(option, source=source) or default(option)
    try:
        value = float(raw)
    except ValueError:
        raise JobwatchConfigError(
            f"[{SECTION}] {option} must be a number of seconds, got {raw!r} (the default is "
            f"{default(option)!r}; set it in airflow.cfg or AIRFLOW__{SECTION.upper()}__{option.upper()})"
        ) from None
    if value != value or (minimum is not None and value < minimum):  # NaN, or below the minimum
        raise JobwatchConfigError(f"[{SECTION}] {option} = {raw!r} must be a number >= {minimum}")
    return value


def informer_config(*, resync_interval_seconds: float | None = None, source: Any = None) -> InformerConfig:
    """The watch engine's configuration from ``[jobwatch]`` (shared by the executor and JobTrigger).

    :param resync_interval_seconds: overrides ``[jobwatch] resync_interval_seconds`` when given.
    :param source: as for :func:`get_str` (the executor passes its team's configuration).
    """

    def seconds(option: str, *, minimum: float | None = None) -> float:
        return get_float(option, minimum=minimum, source=source)

    from airflow_jobwatch.kube.informer import InformerConfig

    resync = (
        resync_interval_seconds
        if resync_interval_seconds is not None
        else seconds("resync_interval_seconds", minimum=0)
    )
    try:
        return InformerConfig(
            watch_timeout_seconds=seconds("watch_timeout_seconds"),
            stall_timeout_seconds=seconds("watch_stall_timeout_seconds"),
            connect_timeout_seconds=seconds("api_connect_timeout_seconds"),
            backoff_initial_seconds=seconds("backoff_initial_seconds"),
            backoff_max_seconds=seconds("backoff_max_seconds"),
            backoff_reset_after_seconds=seconds("backoff_reset_after_seconds"),
            unhealthy_after_seconds=seconds("unhealthy_after_seconds"),
            resync_interval_seconds=resync if resync > 0 else None,
        )
    except ValueError as err:
        if isinstance(err, JobwatchConfigError):
            raise
        raise JobwatchConfigError(f"[{SECTION}] options are inconsistent: {err}") from err


__all__ = ["SECTION", "JobwatchConfigError", "default", "get_float", "get_str", "informer_config"]
