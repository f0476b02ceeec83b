"""What the KubernetesJobWatcher child and its parent-side supervisor say to each other.

Plain picklable dataclasses, so that they cross to a new interpreter: :class:`WatcherSpec` goes from
the parent to a new child (pickled on its stdin) (its whole configuration), :class:`PodUpdate` / :class:`Synced` /
:class:`WatcherStats` / :class:`Metric` come back over a pipe, and :class:`PodResult` is what the supervisor hands its
owner (the executor). This module imports neither Airflow nor the Kubernetes clients.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from airflow_jobwatch.kube.cluster.client import ClusterConfig
from airflow_jobwatch.kube.engine.informer import InformerConfig

PodRef = tuple[str, str]  # (namespace, name)


def unseen_end(namespace: str, name: str, last_seen: str, found: str) -> str:
    """The message of a pod found deleted with its end unseen: what was seen of it, when it was found gone,
    and that its final state is unknown (its phase and reason are left for the scheduler to weigh)."""
    return f"Pod '{namespace}/{name}' was last seen {last_seen}, then found deleted {found}: its final state is unknown."


# ---------------------------------------------------------------------------------------------
# Messages (child -> parent). Plain picklable dataclasses.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodUpdate:
    """The classified state of one pod, as the child's informer saw it."""

    namespace: str
    name: str
    uid: str
    state: dict[str, Any]  # ObjectState.as_dict()
    annotations: dict[str, str]
    deleted: bool  # the last state we will ever see of this pod (DELETED or tombstone)
    observed_at: float  # time.time() in the child when the informer delivered the event
    disruption: str | None = None  # a failed pod the cluster disrupted: what did it, in words

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Rebuilt by its constructor: a slotted dataclass's default unpickling looks its fields up
        # for every object, and the scheduler reads one of these per pod change.
        return (
            PodUpdate,
            (
                self.namespace,
                self.name,
                self.uid,
                self.state,
                self.annotations,
                self.deleted,
                self.observed_at,
                self.disruption,
            ),
        )


@dataclass(frozen=True, slots=True)
class Synced:
    """The child's informer finished its initial list: these are all the pods it saw."""

    keys: frozenset[PodRef]


@dataclass(frozen=True, slots=True)
class PodGone:
    """A pod the parent expected is absent from the child's first list and a GET answered 404.

    It was deleted while no watcher ran; its final state is unknown.
    """

    namespace: str
    name: str
    observed_at: float


@dataclass(frozen=True, slots=True)
class PodAdopted:
    """A pod left this scheduler's label selector while it still exists: another scheduler adopted it.

    Seen as a watch DELETED event whose object no longer matches the selector, or as a missing-pod GET
    (after a restart) that finds the pod relabelled. Its task belongs to the other scheduler now: as
    upstream's ``ADOPTED`` state, the executor frees the slot and reports nothing. (Pods this scheduler
    labels done after their report leave the selector too; the parent no longer tracks those and ignores it.)
    """

    namespace: str
    name: str
    worker: str | None  # the scheduler job the pod is labelled with now, when known
    observed_at: float


@dataclass(frozen=True, slots=True)
class WatcherStats:
    relists: int
    watches: int
    healthy: bool
    connected: bool
    last_error: str | None
    access_denied: str | None = None  # An explained 401/403 on list/watch


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric of the child's informer, for the parent to send through Airflow's ``Stats`` (the child
    never imports Airflow). Already named and tagged by :mod:`airflow_jobwatch.metrics`."""

    kind: str  # incr | gauge | timing
    name: str
    value: Any
    tags: dict[str, Any] | None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (Metric, (self.kind, self.name, self.value, self.tags))  # as PodUpdate's


# ---------------------------------------------------------------------------------------------
# What the parent reports to its user (the executor, or a test).
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodResult:
    """A change worth reporting for a tracked pod: first ``running``, or its one terminal state."""

    key: Hashable
    namespace: str
    name: str
    phase: str  # pending | running | succeeded | failed
    terminal: bool
    reason: str | None
    message: str
    exit_code: int | None
    annotations: dict[str, str]
    observed_at: float
    gap: bool = False  # found by the parent's post-restart reconciliation, not by an event
    # Whether any container of the pod ever started (a pod disrupted before that cannot have
    # run the task); None when unknown (a pod found deleted after a watcher gap).
    started: bool | None = None
    adopted: bool = False  # another scheduler adopted the pod: free the slot, report nothing
    disruption: str | None = None  # "preempted by the scheduler on node X", ... (failed results only)


@dataclass(frozen=True)
class WatcherSpec:
    """Everything a child needs; picklable: it reaches the child pickled on its stdin."""

    cluster: ClusterConfig
    namespace: str | None  # None = all namespaces
    label_selector: str
    informer_config: InformerConfig
    fatal_waiting_reasons: frozenset[str]
    name: str = "jobwatch-executor"
    # [kubernetes_executor] async_client_factory: an import path (a string survives pickling), resolved in the child
    async_client_factory: str | None = None


def import_callable(path: str) -> Any:
    """The object at ``path`` (``package.module.name``), as Airflow's ``conf.getimport`` resolves the
    ``[kubernetes_executor] client_factory`` / ``async_client_factory`` import paths."""
    import importlib

    module, _, name = path.strip().rpartition(".")
    if not module:
        raise ImportError(f"{path!r} is not an import path of the form package.module.name")
    try:
        return getattr(importlib.import_module(module), name)
    except AttributeError:
        raise ImportError(f"module {module!r} has no attribute {name!r}") from None
