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


def get_str(option: str) -> str:
    """The option's value as a string (empty when unset and its default is empty)."""
    value = _conf().get(SECTION, option, fallback=default(option))
    return "" if value is None else str(value).strip()


def get_float(option: str, *, minimum: float | None = None) -> float:
    """The option's value as a number of seconds (or another float).

    :param minimum: smallest accepted value (inclusive); anything below raises.
    """
    raw = get_str(option) or default(option)
    try:
        value = float(raw)
    except ValueError:
        raise JobwatchConfigError(
            f"[{SECTION}] {option} = {raw!r} is not a number; expected seconds such as "
            f"{default(option)!r} (set it in airflow.cfg or AIRFLOW__{SECTION.upper()}__{option.upper()})"
        ) from None
    if value != value or (minimum is not None and value < minimum):  # NaN, or below the minimum
        raise JobwatchConfigError(f"[{SECTION}] {option} = {raw!r} must be a number >= {minimum}")
    return value


def informer_config(*, resync_interval_seconds: float | None = None) -> InformerConfig:
    """The watch engine's configuration from ``[jobwatch]`` (shared by the executor and JobTrigger).

    :param resync_interval_seconds: overrides ``[jobwatch] resync_interval_seconds`` when given.
    """
    from airflow_jobwatch.kube.informer import InformerConfig

    resync = (
        resync_interval_seconds
        if resync_interval_seconds is not None
        else get_float("resync_interval_seconds", minimum=0)
    )
    try:
        return InformerConfig(
            watch_timeout_seconds=get_float("watch_timeout_seconds"),
            stall_timeout_seconds=get_float("watch_stall_timeout_seconds"),
            connect_timeout_seconds=get_float("api_connect_timeout_seconds"),
            backoff_initial_seconds=get_float("backoff_initial_seconds"),
            backoff_max_seconds=get_float("backoff_max_seconds"),
            backoff_reset_after_seconds=get_float("backoff_reset_after_seconds"),
            unhealthy_after_seconds=get_float("unhealthy_after_seconds"),
            resync_interval_seconds=resync if resync > 0 else None,
        )
    except ValueError as err:
        if isinstance(err, JobwatchConfigError):
            raise
        raise JobwatchConfigError(f"[{SECTION}] options are inconsistent: {err}") from err


__all__ = ["SECTION", "JobwatchConfigError", "default", "get_float", "get_str", "informer_config"]
