"""What a Pod or a Job object means: pending, running, succeeded, failed or suspended, and why.

This is the only place in airflow-jobwatch that derives a state from raw Kubernetes fields; the
executor and the trigger call it and never look at ``status`` themselves. The functions are pure:
one object (plus, for a Job, the pods it owns) in, one immutable :class:`ObjectState` out. They never
raise on odd shapes: a brand-new object has no ``status`` at all, fields the server omits are simply
missing, and a watch can hand us a half-written object, so any field of the wrong type is treated as
absent.

Rules, each answering a way real monitoring code has gone wrong (see ``docs/architecture.md``):

* Job conditions decide a Job's outcome, never pod counters. ``status.failed > 0`` is not a failed Job
  while ``backoffLimit`` allows retries, ``completionTime`` stays null on failure, and a pod can be
  Succeeded while the Job still counts it as active.
* A condition counts only when its ``status`` is the string ``"True"``; ``"False"`` and ``"Unknown"``
  decide nothing (``"False"`` is a truthy string, a classic bug).
* Since Kubernetes 1.31 the Job controller sets ``FailureTarget`` / ``SuccessCriteriaMet`` first and
  adds ``Failed`` / ``Complete`` only once every pod has terminated; the outcome is already decided at
  the first of the two, so both count. A ``Failed`` condition without a ``reason`` is still a failure.
* A container stuck waiting on a reason that never heals by itself (``ErrImagePull``, ...) keeps its
  pod in phase Pending forever; it fails fast instead, except for registry throttling ("pull QPS
  exceeded"), which does heal.
* ``deleted=True`` means we will never see the object again (a DELETED watch event or a tombstone
  after a relist). A terminal object keeps its outcome (a Succeeded pod seen only in its DELETED event
  is a success); anything else failed with reason ``Deleted``, because nobody will ever finish it.
* A Job that *vanished* (gone at a relist, its deletion never seen) is not a deleted one: what
  happened between the last state we saw and its removal is unknown. :func:`vanished_job_state`
  reports the last state when that was already terminal, what its pods' final states prove for a
  simple Job, and otherwise reason ``FinalStateUnknown``, not terminal, and no advice to run it again.
* A pod can be *disrupted*: stopped by the cluster rather than by its own code (scheduler preemption,
  eviction, node shutdown, node loss, garbage collection). :func:`pod_disruption` recognises it from
  the ``DisruptionTarget`` condition (Kubernetes 1.26+) or, failing that, ``status.reason``, and says
  in the user's words what happened and whether any container ever started (a pod disrupted before
  it started cannot have run the task). The shapes it reads are recorded with their Kubernetes
  source files in ``tests/fixtures/real-apiserver/README.md``.

The rules live in one module per concept; this module is their facade, and every name is importable
from here as before:

* ``kube/meaning/objectstate.py``: :class:`ObjectState`, the phases, and the fatal and transient waiting reasons.
* ``kube/meaning/state_words.py``: tolerant field access, quoting, and the hint after a reason.
* ``kube/meaning/containers.py``: which container failed or cannot start, and whether any ever started.
* ``kube/meaning/disruptions.py``: :class:`Disruption` and :func:`pod_disruption`.
* ``kube/meaning/pod_states.py``: :func:`classify_pod` and :func:`pod_summary`.
* ``kube/meaning/job_states.py``: :func:`classify_job` and :func:`vanished_job_state`.
"""

from __future__ import annotations

from airflow_jobwatch.kube.meaning.containers import containers_started as containers_started
from airflow_jobwatch.kube.meaning.disruptions import DISRUPTION_REASONS, Disruption, pod_disruption
from airflow_jobwatch.kube.meaning.job_states import classify_job, vanished_job_state
from airflow_jobwatch.kube.meaning.objectstate import (
    DEFAULT_FATAL_WAITING_REASONS,
    TERMINAL_PHASES,
    TRANSIENT_WAITING_MESSAGES,
    ObjectState,
    Phase,
)
from airflow_jobwatch.kube.meaning.objectstate import FINAL_STATE_UNKNOWN as FINAL_STATE_UNKNOWN
from airflow_jobwatch.kube.meaning.pod_states import classify_pod, pod_summary
from airflow_jobwatch.kube.meaning.state_words import MAX_QUOTED_CHARS as MAX_QUOTED_CHARS

__all__ = [
    "DEFAULT_FATAL_WAITING_REASONS",
    "DISRUPTION_REASONS",
    "TERMINAL_PHASES",
    "TRANSIENT_WAITING_MESSAGES",
    "Disruption",
    "ObjectState",
    "Phase",
    "classify_job",
    "classify_pod",
    "pod_disruption",
    "pod_summary",
    "vanished_job_state",
]
