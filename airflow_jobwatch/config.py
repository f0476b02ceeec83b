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

import re
from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from airflow_jobwatch.kube.engine.informer import InformerConfig

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


class Bounds(NamedTuple):
    """The values a numeric option accepts: from ``low`` (itself accepted when ``inclusive``) up to
    ``high`` (accepted; None: no upper bound)."""

    low: float
    inclusive: bool
    high: float | None = None

    def admits(self, value: float) -> bool:
        above = value >= self.low if self.inclusive else value > self.low
        return above and (self.high is None or value <= self.high)

    def __str__(self) -> str:
        if self.high is not None and self.inclusive:
            return f"from {_number(self.low)} to {_number(self.high)}"
        lowest = f"{'>=' if self.inclusive else '>'} {_number(self.low)}"
        return lowest if self.high is None else f"{lowest} and <= {_number(self.high)}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


#: The range of each numeric option. A timeout, a delay or a period of 0 or less would make a loop spin
#: or never wait, so those must be > 0; where 0 means "off" or "none", >= 0. Every read of the option
#: (executor, trigger, worker) applies it, so a bad value is refused by the first component that starts,
#: with the option's name, not by a class deep in the watch engine.
RANGES: dict[str, Bounds] = {
    "watch_timeout_seconds": Bounds(0, False),
    "watch_stall_timeout_seconds": Bounds(0, False),
    "api_connect_timeout_seconds": Bounds(0, False),
    "backoff_initial_seconds": Bounds(0, False),
    "backoff_max_seconds": Bounds(0, False),
    "backoff_reset_after_seconds": Bounds(0, True),
    "unhealthy_after_seconds": Bounds(0, False),
    "resync_interval_seconds": Bounds(0, True),  # 0: the executor's watcher never replays its cache
    "namespace_watch_linger_seconds": Bounds(0, True),
    "api_failure_tolerance_seconds": Bounds(0, True),
    "resume_hold_seconds": Bounds(0, True),
    "watcher_unresponsive_after_seconds": Bounds(0, False),
    "pod_creation_concurrency": Bounds(1, True),
    "disruption_relaunches": Bounds(0, True),
    # 1 KiB to 16 MiB: a tail is held in the triggerer's memory and paced through its log socket, which
    # its supervisor reads at a few hundred KiB/s. The trigger reads these bounds too, but warns and uses
    # the default for a value outside them (ending/pod_logs.py), so that a task is never failed for
    # its log's size limit.
    "trigger_log_max_bytes": Bounds(1024, True, 16 * 1024 * 1024),
}

#: The values ``worker_pod_labels`` accepts.
WORKER_POD_LABELS = ("upstream", "jobwatch")

#: What the operator and the trigger read (checked in the worker before a Job is created).
TRIGGER_OPTIONS = (
    "watch_timeout_seconds",
    "watch_stall_timeout_seconds",
    "api_connect_timeout_seconds",
    "backoff_initial_seconds",
    "backoff_max_seconds",
    "backoff_reset_after_seconds",
    "unhealthy_after_seconds",
    "resync_interval_seconds",
    "namespace_watch_linger_seconds",
    "api_failure_tolerance_seconds",
    "resume_hold_seconds",
)


def _where(option: str) -> str:
    return f"set it in airflow.cfg or AIRFLOW__{SECTION.upper()}__{option.upper()}"


def get_float(option: str, *, minimum: float | None = None, source: Any = None) -> float:
    """The option's value as a number of seconds (or another float), within the option's range
    (:data:`RANGES`).

    :param minimum: smallest accepted value (inclusive) instead of the option's own range.
    :param source: as for :func:`get_str`.
    """
    raw = get_str(option, source=source) or default(option)
    bounds = Bounds(minimum, True) if minimum is not None else RANGES.get(option)
    expected = "a number" if bounds is None else f"a number {bounds}"
    try:
        value = float(raw)
    except ValueError:
        raise JobwatchConfigError(
            f"[{SECTION}] {option} must be {expected}, got {raw!r} (the default is {default(option)!r}; "
            f"{_where(option)})"
        ) from None
    if (
        value != value  # NaN
        or value in (float("inf"), float("-inf"))
        or (bounds is not None and not bounds.admits(value))
    ):
        raise JobwatchConfigError(
            f"[{SECTION}] {option} = {raw!r} must be {expected} (the default is {default(option)!r}; "
            f"{_where(option)})"
        )
    return value


def get_int(option: str, *, source: Any = None) -> int:
    """The option's value as a whole number, within the option's range (:data:`RANGES`)."""
    raw = get_str(option, source=source) or default(option)
    value = get_float(option, source=source)
    if value != int(value):
        raise JobwatchConfigError(
            f"[{SECTION}] {option} must be a whole number, got {raw!r} (the default is "
            f"{default(option)!r}; {_where(option)})"
        )
    return int(value)


def check_options(options: Iterable[str] | None = None, *, source: Any = None) -> None:
    """Read every ``[jobwatch]`` option (or those named), refusing a value of the wrong kind or out of
    its range with :class:`JobwatchConfigError`: the option, the value and what it accepts. Called
    where a component starts (the operator before it creates anything), so a typo is reported there
    and not when a later step first reads the option."""
    names = list(options) if options is not None else list(_declared())
    for option in names:
        kind = _declared()[option].get("type")
        if kind == "integer":
            get_int(option, source=source)
        elif kind == "float":
            get_float(option, source=source)
        elif option == "worker_pod_labels":
            value = get_str(option, source=source).lower()
            if value not in WORKER_POD_LABELS:
                raise JobwatchConfigError(
                    f"[{SECTION}] {option} = {value!r} is not one of {', '.join(WORKER_POD_LABELS)} "
                    f"(the default is {default(option)!r}; {_where(option)})"
                )
    if options is None or {"backoff_initial_seconds", "backoff_max_seconds"} <= set(names):
        _check_backoff(source)


def unknown_options() -> dict[str, str | None]:
    """Each option set in ``[jobwatch]`` (airflow.cfg or ``AIRFLOW__JOBWATCH__*``) that airflow-jobwatch
    does not have -> the closest option it has (``difflib``; None when none is close). Such an option is
    otherwise ignored without a word: a misspelt ``watch_timeout_second`` leaves the default in force."""
    import difflib

    try:
        given = _conf().getsection(SECTION) or {}
    except Exception:  # no Airflow configuration to read (a bare process): nothing was set
        return {}
    known = list(_declared())
    return {
        name: next(iter(difflib.get_close_matches(name, known, n=1, cutoff=0.6)), None)
        for name in sorted(given)
        if name not in known
    }


def unknown_option_warnings() -> list[str]:
    """One line per unknown ``[jobwatch]`` option, naming the closest known one."""
    lines = []
    for name, closest in unknown_options().items():
        hint = f"did you mean {closest}?" if closest else f"the options are listed by: {_LIST_COMMAND}"
        lines.append(f"[{SECTION}] {name} is not an option of airflow-jobwatch and is ignored; {hint}")
    return lines


#: The command that prints every [jobwatch] option with its description and default.
_LIST_COMMAND = "airflow config list --section jobwatch"

#: The unknown-option lines already logged by this process (each is logged once, not per task or start).
_WARNED: set[str] = set()


def warn_unknown_options(log: Any) -> None:
    """Log :func:`unknown_option_warnings` through ``log`` (a logger), each line once per process."""
    for line in unknown_option_warnings():
        if line not in _WARNED:
            _WARNED.add(line)
            log.warning("%s", line)


def _check_backoff(source: Any) -> None:
    initial = get_float("backoff_initial_seconds", source=source)
    maximum = get_float("backoff_max_seconds", source=source)
    if maximum < initial:
        raise JobwatchConfigError(
            f"[{SECTION}] backoff_max_seconds = {maximum:g} must be >= backoff_initial_seconds "
            f"({initial:g}): the retry delay starts at the initial value and doubles up to the maximum"
        )


def informer_config(*, resync_interval_seconds: float | None = None, source: Any = None) -> InformerConfig:
    """The watch engine's configuration from ``[jobwatch]`` (shared by the executor and JobTrigger).

    :param resync_interval_seconds: overrides ``[jobwatch] resync_interval_seconds`` when given.
    :param source: as for :func:`get_str` (the executor passes its team's configuration).
    """

    def seconds(option: str, *, minimum: float | None = None) -> float:
        return get_float(option, minimum=minimum, source=source)

    from airflow_jobwatch.kube.engine.informer import InformerConfig

    resync = (
        resync_interval_seconds
        if resync_interval_seconds is not None
        else seconds("resync_interval_seconds", minimum=0)
    )
    _check_backoff(source)
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
        # the watch engine's own field names are not the options' (no class name reaches the user)
        message = re.sub(r"\bInformerConfig\.", "", str(err))
        raise JobwatchConfigError(f"[{SECTION}] options are inconsistent: {message}") from err


__all__ = [
    "RANGES",
    "Bounds",
    "SECTION",
    "TRIGGER_OPTIONS",
    "JobwatchConfigError",
    "check_options",
    "default",
    "get_float",
    "get_int",
    "get_str",
    "informer_config",
    "unknown_option_warnings",
    "unknown_options",
    "warn_unknown_options",
]
