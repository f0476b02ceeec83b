"""How a state's message is worded, and tolerant access to the fields it quotes.

Part of the state classification (:mod:`airflow_jobwatch.kube.meaning.states` is its facade and states its
rules). Any field of the wrong type counts as missing here, so the classifiers never raise on a
half-written object; a quoted server or container message is trimmed to :data:`MAX_QUOTED_CHARS`; a
reason whose cause is not obvious from the word alone gets one sentence on what to do next.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

#: Longest termination message (or pod/condition message) quoted in a state's message. The kubelet keeps up
#: to 4096 bytes per container (and 80 log lines with ``FallbackToLogsOnError``); the error is usually at
#: the end, so the tail is kept. 1000 characters stay readable in a task log line and keep trigger events
#: (stored in Airflow's database) small.
MAX_QUOTED_CHARS = 1000

# One sentence on what to do next, for the reasons whose cause is not obvious from the word alone.
_HINTS: Mapping[str, str] = {
    "ErrImagePull": "check the image name and tag, and that the registry is reachable and imagePullSecrets are set",
    "ImagePullBackOff": "check the image name and tag, and that the registry is reachable and imagePullSecrets are set",
    "InvalidImageName": "fix the image reference in the pod spec",
    "ImageInspectError": "the image could not be inspected on the node; check that the image is not corrupt",
    "CreateContainerConfigError": "check that the Secrets and ConfigMaps the pod references exist",
    "CreateContainerError": "the container runtime could not create the container; see the message above",
    "StartError": "the container's command could not be started; check command, args and the image's entrypoint",
    "ContainerCannotRun": "the container's command could not be started; check command, args and the image's entrypoint",
    "OOMKilled": "the container ran out of memory; raise its memory limit or lower its usage",
    "Evicted": "the node evicted the pod under resource pressure; set resource requests or retry",
    "PreemptionByScheduler": "a higher-priority pod took its place; give the task a higher priorityClassName or retry",
    "EvictionByEvictionAPI": "a node drain or the cluster autoscaler evicted it; a PodDisruptionBudget can hold "
    "such evictions back",
    "DeletionByTaintManager": "its node got a NoExecute taint (often: the node became unreachable); retry",
    "DeletionByPodGC": "its node was removed from the cluster (scale-down or a lost spot instance); retry",
    "TerminationByKubelet": "the node's kubelet stopped it; retry",
    "Preempting": "the kubelet made room for a critical pod; retry",
    "NodeShutdown": "its node shut down (a spot or preemptible instance being reclaimed, or maintenance); retry",
    "NodeLost": "its node stopped reporting; retry",
    "DeadlineExceeded": "activeDeadlineSeconds was reached; raise it or make the work faster",
    "BackoffLimitExceeded": "every allowed retry failed; see the failing pod's exit code and logs",
}


# --------------------------------------------------------------------------------------------------
# Tolerant field access: anything of the wrong type counts as missing.


def as_map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_maps(value: object) -> list[Mapping[str, Any]]:
    if not isinstance(value, list | tuple):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def as_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def as_int(value: object) -> int | None:
    # bool is an int subclass; an exit code of True is garbage, not 1.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def quote_message(text: str | None) -> str | None:
    """Trim a server- or container-written message to something fit for one log line."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    if len(text) > MAX_QUOTED_CHARS:
        text = "..." + text[-MAX_QUOTED_CHARS:]
    return text


def display_name(obj: Mapping[str, Any]) -> str:
    meta = as_map(obj.get("metadata"))
    name = as_str(meta.get("name")) or as_str(meta.get("generateName")) or "<unnamed>"
    namespace = as_str(meta.get("namespace"))
    return f"{namespace}/{name}" if namespace else name


def true_condition(status: Mapping[str, Any], types: Iterable[str]) -> Mapping[str, Any] | None:
    """The first condition, in the order of ``types``, whose status is the string ``"True"``."""
    conditions = as_maps(status.get("conditions"))
    for wanted in types:
        for condition in conditions:
            if condition.get("type") == wanted and condition.get("status") == "True":
                return condition
    return None


def as_sentence(text: str) -> str:
    """End ``text`` with exactly one full stop (quoted server messages often bring their own)."""
    return text.rstrip(" .") + "."


def check_reasons(fatal_waiting_reasons: Collection[str]) -> None:
    # A str is a Collection[str] too, and "Err" in "ErrImagePull" would then match by substring.
    if isinstance(fatal_waiting_reasons, str):
        raise TypeError(
            f"fatal_waiting_reasons must be a collection of reason names, e.g. {{'ErrImagePull'}}, "
            f"not the string {fatal_waiting_reasons!r} (split a comma-separated setting first)"
        )


def with_hint(message: str, reason: str | None) -> str:
    hint = _HINTS.get(reason or "")
    return as_sentence(message) + (f" Hint: {hint}." if hint else "")
