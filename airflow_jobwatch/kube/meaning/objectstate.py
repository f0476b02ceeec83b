"""The vocabulary of a classified state: :class:`ObjectState`, its phases, and the waiting reasons
that fail a pod at once.

Part of the state classification (:mod:`airflow_jobwatch.kube.meaning.states` is its facade and states its
rules).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from airflow_jobwatch.kube.meaning.state_words import as_int, as_str

#: The reason of a Job that vanished while nobody watched, whose end was not seen and cannot be derived
#: (client-go's name for the same tombstone is ``DeletedFinalStateUnknown``).
FINAL_STATE_UNKNOWN = "FinalStateUnknown"

Phase = Literal["pending", "running", "succeeded", "failed", "suspended"]
TERMINAL_PHASES: frozenset[str] = frozenset({"succeeded", "failed"})

#: Waiting reasons after which a container will not start without a change to the Pod spec, the image or
#: the cluster (a Secret, a ConfigMap, a registry credential). The kubelet keeps retrying them with a
#: back-off and the pod stays Pending, so waiting for them only burns the task's timeout.
DEFAULT_FATAL_WAITING_REASONS: frozenset[str] = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "ImageInspectError",
    }
)

#: Substrings of a waiting ``message`` that mark a fatal-looking reason as transient. The kubelet reports
#: its own registry rate limit (``registryPullQPS``) as ``ErrImagePull`` with "pull QPS exceeded"; the
#: next pull attempt succeeds once the limiter refills, so failing the pod would be wrong. Compared
#: case-insensitively.
TRANSIENT_WAITING_MESSAGES: tuple[str, ...] = ("pull qps exceeded",)


@dataclass(frozen=True, slots=True)
class ObjectState:
    """The meaning of one Pod or Job at one moment.

    :param phase: ``pending``, ``running``, ``succeeded``, ``failed`` or ``suspended``.
    :param terminal: whether the outcome is final; true exactly when ``phase`` is succeeded or failed.
    :param reason: a short machine word (``BackoffLimitExceeded``, ``ErrImagePull``, ``OOMKilled``,
        ``Deleted``, ...) or ``None`` when there is nothing to say beyond the phase.
    :param message: a sentence a user can act on (which container, its exit code and termination message).
    :param exit_code: the exit code of the container that decided a failure (``0`` for a Succeeded pod),
        ``None`` when unknown.
    """

    phase: Phase
    terminal: bool
    reason: str | None
    message: str
    exit_code: int | None = None

    def __post_init__(self) -> None:
        if self.phase not in _PHASES:
            raise ValueError(f"ObjectState.phase must be one of {sorted(_PHASES)}, got {self.phase!r}")
        if self.terminal != (self.phase in TERMINAL_PHASES):
            raise ValueError(
                f"ObjectState.terminal must be true exactly for phases {sorted(TERMINAL_PHASES)}, "
                f"got phase={self.phase!r} terminal={self.terminal!r}"
            )

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe form, e.g. for a TriggerEvent payload; :meth:`from_dict` reverses it."""
        return {
            "phase": self.phase,
            "terminal": self.terminal,
            "reason": self.reason,
            "message": self.message,
            "exit_code": self.exit_code,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ObjectState:
        """Rebuild a state from :meth:`as_dict` output.

        :raises ValueError: naming the bad field when ``data`` is not such output.
        """
        phase = data.get("phase")
        if phase not in _PHASES:
            raise ValueError(
                f"ObjectState.from_dict: 'phase' must be one of {sorted(_PHASES)}, got {phase!r}"
            )
        exit_code = data.get("exit_code")
        return cls(
            phase=cast(Phase, phase),
            terminal=phase in TERMINAL_PHASES,
            reason=as_str(data.get("reason")),
            message=str(data.get("message") or ""),
            exit_code=as_int(exit_code),
        )


_PHASES: frozenset[str] = frozenset(get_args(Phase))
