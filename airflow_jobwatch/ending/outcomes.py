"""The words of a JobTrigger event: its ``status`` (upstream's) and its ``outcome`` (ours).

Importable from :mod:`airflow_jobwatch.triggers.job` as before.
"""

from __future__ import annotations

#: The event's ``status``: upstream's ``KubernetesJobTrigger`` vocabulary, kept so that code written
#: for upstream's events (``event["status"] == "error"``) reads ours the same way.
STATUS_SUCCESS = "success"
STATUS_ERROR = "error"

#: The event's ``outcome``: our finer reading of how the wait ended (``status`` is ``success`` only for
#: ``OUTCOME_SUCCESS``, ``error`` for every other outcome).
OUTCOME_SUCCESS = "success"
OUTCOME_FAILED = "failed"
OUTCOME_DELETED = "deleted"
OUTCOME_TIMEOUT = "timeout"
OUTCOME_ERROR = "error"
#: The Job vanished while the watch was away (a relist no longer listed it), or was gone before the
#: watch ever saw it, and neither its last state nor its pods' final states say how it ended: it may
#: have succeeded, failed or been deleted.
OUTCOME_UNKNOWN = "unknown"
