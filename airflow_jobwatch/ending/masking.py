"""The task's secrets, masked in what the triggerer writes into the task's log.

In Airflow 3 a process that sends its log records to a supervisor does not mask them: the supervisor
does, with its own masker. A worker's supervisor learns the task's secrets, since the task runner sends
it a ``MaskSecret`` for every connection and Variable the task reads (rendering its templates
included) and for every ``mask_secret()``. The triggerer's supervisor never learns them. So a line the
trigger writes into the task's log (the pods' logs, the XCom and termination-message lines, the notes
of the wait) would be in clear where the same line written by a worker shows ``***``.

This module carries the worker's knowledge to the trigger:

* :func:`capture` runs in the worker when the operator defers, and reads the secrets the task's own
  masker holds at that moment (everything its templates and code registered so far);
* they travel in the trigger's kwargs, which Airflow stores encrypted with ``[core] fernet_key``, as it
  stores connection passwords;
* :class:`TaskSecrets` rebuilds a masker from them with Airflow's own ``SecretsMasker`` class, and
  :meth:`TaskSecrets.log` wraps the trigger's logger so that every line it writes is redacted.

Where the secrets cannot be known (the worker's Airflow has no masker to read, or the kwargs came from
an operator that did not capture them), :func:`TaskSecrets.from_kwargs` gives None, and the trigger
must not write the task's output itself: it resumes the task on a worker, whose supervisor masks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import ModuleType
from typing import Any

__all__ = ["KWARG", "TaskSecrets", "capture", "logged_event", "redact_job_env"]

#: The trigger kwarg that carries the task's secrets (a list of strings; absent: not known).
KWARG = "mask_secrets"

#: Where Airflow keeps its secrets masker, newest first: the Task SDK's shared copy (3.1 and later),
#: the Task SDK's earlier home, then Airflow core's. The first that imports is the one the task
#: runner's ``mask_secret`` registers into.
_MASKER_MODULES = (
    "airflow.sdk._shared.secrets_masker",
    "airflow.sdk.execution_time.secrets_masker",
    "airflow._shared.secrets_masker",
    "airflow.utils.log.secrets_masker",
)

# re.escape puts a backslash before each character it escapes and adds nothing else, so removing the
# backslash of every escaped pair gives back the value the pattern was built from.
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)


def _masker_module() -> ModuleType | None:
    import importlib
    import warnings

    for name in _MASKER_MODULES:
        try:
            with warnings.catch_warnings():  # a deprecated alias still answers; say nothing
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "SecretsMasker") and hasattr(module, "_secrets_masker"):
            return module
    return None


def capture() -> list[str] | None:
    """The values the task's masker hides now (sorted), or None where this Airflow has none to read.

    Called in the worker, in the task's process, when the operator defers: the masker then holds what
    the task registered while rendering its templates (connection passwords and extras, sensitive
    Variables) and every ``mask_secret()`` value, with the adaptations of ``[logging]
    secret_mask_adapter`` already applied."""
    module = _masker_module()
    if module is None:
        return None
    try:
        # Private API: Airflow has no public way to list what a masker holds (``mask_secret`` only
        # adds), so the process's masker (``_secrets_masker()``) and its ``patterns`` set are read
        # directly. tests/unit/trigger/test_masking.py pins this on Airflow 3.1, 3.2 and 3.3.
        patterns = module._secrets_masker().patterns
    except Exception:
        return None
    if not isinstance(patterns, set | frozenset | list | tuple):
        return None
    values = {_ESCAPED.sub(r"\1", str(p)) for p in patterns}
    return sorted(values - _configuration_secrets())


def _configuration_secrets() -> set[str]:
    """The values of Airflow's sensitive options (``[database] sql_alchemy_conn``, ``[core]
    fernet_key``, ...), which every Airflow process masks at start-up: the triggerer masks its own
    already, and they are not the task's to carry in its trigger's kwargs."""
    try:
        from airflow.providers.common.compat.sdk import conf

        options = set(conf.sensitive_config_values)
    except Exception:
        return set()
    import warnings

    values: set[str] = set()
    with warnings.catch_warnings():  # an option's deprecated name is listed too; say nothing of it
        warnings.simplefilter("ignore")
        for section, key in options:
            try:
                value = conf.get(section, key, fallback=None)
            except Exception:
                continue
            if isinstance(value, str) and value:
                values.add(value)
    return values


def redact_job_env(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """``job`` (``V1Job.to_dict()`` shape) with every container's ``env[].value`` replaced by ``***``.

    The event's ``job`` is logged whole by Airflow when a task resumes, and a pod template's ``env``
    holds what the task rendered into it (a connection's password, a Variable). Names and ``valueFrom``
    references (a Secret's name and key, never its data) are kept; nothing the resume reads is in a
    value."""
    if not isinstance(job, dict):
        return job
    spec = ((job.get("spec") or {}).get("template") or {}).get("spec")
    if not isinstance(spec, dict):
        return job
    changed: dict[str, Any] = {}
    for key in ("containers", "init_containers", "initContainers", "ephemeral_containers"):
        containers = spec.get(key)
        if not isinstance(containers, list):
            continue
        changed[key] = [_container_without_env_values(c) for c in containers]
    if not changed:
        return job
    template = job["spec"]["template"]
    return {**job, "spec": {**job["spec"], "template": {**template, "spec": {**spec, **changed}}}}


#: Set on a resume's event whose ``xcom_result`` held a secret of the task and was masked: the worker then
#: reads the result from the pods again, and never takes the masked text for the value.
XCOM_RESULT_MASKED = "xcom_result_masked"


def logged_event(payload: dict[str, Any], secrets: TaskSecrets | None) -> dict[str, Any]:
    """The trigger's event ``payload`` as it may be logged: Airflow logs a resume's event whole.

    Its ``job`` has no env values (:func:`redact_job_env`; the same Job becomes the ``job`` XCom when the
    task ends in the triggerer), and, with the task's secrets, its ``message`` (which quotes a failed
    container's termination message), ``disruptions`` and ``xcom_result`` are masked. A masked
    ``xcom_result`` is no longer the value: the event says so (:data:`XCOM_RESULT_MASKED`), and the resume
    reads the value from the pods. What the resume reads to find the Job (names, uid, outcome) is left as
    it is."""
    event = {**payload, "job": redact_job_env(payload.get("job"))}
    if secrets is not None:
        for key in ("message", "disruptions"):
            if key in event:
                event[key] = secrets.redact(event[key])
        results = event.get("xcom_result")
        if results:
            masked = secrets.redact(results)
            if masked != results:
                event["xcom_result"] = masked
                event[XCOM_RESULT_MASKED] = True
    return event


def _container_without_env_values(container: Any) -> Any:
    if not isinstance(container, dict) or not isinstance(container.get("env"), list):
        return container
    env = [
        {**item, "value": "***"} if isinstance(item, dict) and item.get("value") is not None else item
        for item in container["env"]
    ]
    return {**container, "env": env}


class TaskSecrets:
    """A task's secrets in the trigger: Airflow's ``SecretsMasker`` loaded with them.

    :param values: the values :func:`capture` read in the worker.
    """

    def __init__(self, values: Iterable[str]) -> None:
        module = _masker_module()
        if module is None:
            raise RuntimeError("this Airflow has no secrets masker (SecretsMasker) to mask the task log with")
        self.count = 0
        self._masker = module.SecretsMasker()
        # The worker's masker already left out what is too short or too common to mask; every value
        # captured is masked here, whatever this triggerer's [logging] min_length_masked_secret says.
        self._masker.min_length_to_mask = 1
        for value in values:
            if isinstance(value, str) and value:
                self._masker.add_mask(value)
                self.count += 1

    def __repr__(self) -> str:
        return f"<TaskSecrets: {self.count} value(s)>"

    @classmethod
    def from_kwargs(cls, values: Any) -> TaskSecrets | None:
        """The masker for the trigger kwarg :data:`KWARG`; None when the secrets are not known (absent,
        or not a list of strings) or this triggerer's Airflow has no masker."""
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            return None
        try:
            return cls(values)
        except RuntimeError:
            return None

    def redact(self, value: Any) -> Any:
        """``value`` with every secret replaced by ``***`` (strings, and inside dicts, lists, tuples)."""
        return self._masker.redact(value) if self.count else value

    def log(self, log: Any) -> Any:
        """``log`` whose level methods redact what they write (see :class:`MaskedLog`)."""
        return MaskedLog(log, self) if self.count else log


class MaskedLog:
    """A logger whose lines are formatted, then redacted, before they are written.

    The message is formatted with its arguments first, so that a secret split between the two, or an
    argument that is not a string (an exception), is still found.
    """

    _LEVELS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal"})

    def __init__(self, log: Any, secrets: TaskSecrets) -> None:
        self._log = log
        self._secrets = secrets

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._log, name)
        if name not in self._LEVELS:
            return attribute

        def emit(message: Any, *args: Any, **kwargs: Any) -> Any:
            text = str(message)
            if args:
                try:
                    text = text % args
                except (TypeError, ValueError):
                    text = " ".join([text, *map(str, args)])
            # No arguments left: neither structlog nor logging formats the message again.
            return attribute(self._secrets.redact(text), **(self._secrets.redact(kwargs) if kwargs else {}))

        return emit
