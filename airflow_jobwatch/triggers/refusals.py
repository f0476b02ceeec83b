"""Why a Job's pods cannot be created, from one shared watch of the namespace's ``FailedCreate`` events.

When the API refuses a pod the Job controller creates (a ResourceQuota's 403, an admission webhook, a
missing service account), the only place that says so is an Event about the Job: the controller's pod
control records reason ``FailedCreate`` with the message ``Error creating: <the API's answer>``
(``FailedCreatePodReason`` and ``RealPodControl.createPods`` in kubernetes ``pkg/controller/
controller_utils.go``). The Job itself shows nothing: no ``active`` pod, no condition.

A trigger whose Job has no pod for a while (``notes.MISSING_PODS_FIRST_CHECK_SECONDS``) looks here. This
module keeps one watch of those events per shared namespace watch (so per cluster, namespace and
credential, like the Job and pod watches in ``registry.py``), filtered on the server with the field
selector :data:`FIELD_SELECTOR`. A Job waiting for pods costs no request of its own: 10,000 Jobs
waiting for a slow Job controller cost the one LIST and watch of this module, however long they wait.

The watch is started lazily, by the first trigger whose Job shows no pod past that grace, so a
triggerer whose Jobs all get their pods never watches events. Once started it lives as long as the
namespace watch it belongs to (it stops when that one does, after the last trigger leaves and the
linger ends). It is best effort: an events watch that fails or is refused (a Role without ``list`` and
``watch`` on ``events``) only leaves the reason unsaid; it never fails a trigger. Its informer retries
failures with the engine's jittered, bounded backoff; a refusal (401/403) is logged once and the watch
stops until the namespace is watched again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from airflow_jobwatch import metrics
from airflow_jobwatch.kube.engine.informer import (
    EventType,
    Informer,
    InformerConfig,
    InformerEvent,
    InformerHealth,
)

log = logging.getLogger(__name__)

__all__ = ["FIELD_SELECTOR", "Refusals"]

#: Only the Job controller's refusals: events about a Job with reason ``FailedCreate``. The API server
#: selects core/v1 Events on ``involvedObject.kind`` and ``reason`` among others (``ToSelectableFields``
#: in kubernetes ``pkg/registry/core/event/strategy.go``), for LIST and WATCH alike, so the namespace's
#: many other events (every pod's Scheduled, Pulled, Created, Started ...) never reach the triggerer.
FIELD_SELECTOR = "involvedObject.kind=Job,reason=FailedCreate"


def _stamp(event: dict[str, Any]) -> str:
    """When the event last happened, as text that sorts in time order (RFC 3339, UTC)."""
    return str(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or "")


class Refusals:
    """The latest ``FailedCreate`` message of each Job of one namespace, and who to tell about new ones.

    :param api_client: the namespace watch's ``kubernetes_asyncio`` ApiClient (shared, never closed here).
    :param namespace: the namespace whose events are watched.
    :param config: the namespace watch's informer tuning, without a periodic resync: a refusal is read
        when its event arrives, and the Job controller records it again at each retry (its back-off is
        capped at minutes), so the watch delivers a fresh one anyway.
    """

    def __init__(self, api_client: Any, namespace: str, *, config: InformerConfig) -> None:
        self.namespace = namespace
        config = dataclasses.replace(config, resync_interval_seconds=None)
        self.informer = Informer(
            api_client,
            kind="events",
            namespace=namespace,
            field_selector=FIELD_SELECTOR,
            config=config,
            name=f"job-refusals/{namespace}",
            observer=metrics.InformerMetrics("triggerer", "events", namespace),
        )
        # job uid -> (when, event name, message) of its latest FailedCreate event
        self._latest: dict[str, tuple[str, str, str]] = {}
        # job uid -> listener id -> callback(message)
        self._listeners: dict[str, dict[int, Callable[[str], None]]] = {}
        self._next_id = 0
        self._task: asyncio.Task[None] | None = None
        self._denied_logged = False
        self._give_up: asyncio.Task[None] | None = None
        self.informer.subscribe(self._on_event, self._on_health)

    def start(self) -> None:
        """Start the watch in the running loop (returns at once; idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self.informer.start(), name=f"jobwatch-refusals-{self.namespace}"
            )

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        with contextlib.suppress(Exception):
            await self.informer.stop()
        self._listeners.clear()

    # -- reading ------------------------------------------------------------------------------------
    def reason(self, job_uid: str) -> str | None:
        """The message of the Job's latest ``FailedCreate`` event the watch has seen, or None."""
        latest = self._latest.get(job_uid)
        return latest[2] if latest else None

    def listen(self, job_uid: str, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(message)`` for each ``FailedCreate`` event of the Job from now on; returns
        the function that stops it."""
        lid = self._next_id
        self._next_id += 1
        self._listeners.setdefault(job_uid, {})[lid] = callback

        def remove() -> None:
            callbacks = self._listeners.get(job_uid)
            if callbacks is not None:
                callbacks.pop(lid, None)
                if not callbacks:
                    del self._listeners[job_uid]

        return remove

    # -- the watch's callbacks ----------------------------------------------------------------------
    def _on_event(self, event: InformerEvent) -> None:
        obj = event.obj
        job_uid = (obj.get("involvedObject") or {}).get("uid")
        name = str((obj.get("metadata") or {}).get("name") or "")
        if not job_uid:
            return
        if event.type in (EventType.DELETED, EventType.DELETED_UNKNOWN):
            # Events expire (the API server's --event-ttl, one hour by default); forget what they said.
            latest = self._latest.get(job_uid)
            if latest is not None and latest[1] == name:
                del self._latest[job_uid]
            return
        message = str(obj.get("message") or obj.get("reason") or "")
        key = (_stamp(obj), name)
        latest = self._latest.get(job_uid)
        if latest is None or key >= latest[:2]:
            self._latest[job_uid] = (key[0], key[1], message)
        for callback in list(self._listeners.get(job_uid, {}).values()):
            try:
                callback(message)
            except Exception:  # one trigger's bug must not stop the others hearing of their Jobs
                log.exception("refusal callback for a Job of namespace %s failed", self.namespace)

    def _on_health(self, health: InformerHealth) -> None:
        if not health.access_denied or self._denied_logged:
            return
        # Refused (a Role without list or watch on events, as before this watch existed): say so once
        # and stop asking. Retrying could not help before someone changes the Role, and would log the
        # refusal at every backoff for as long as the namespace is watched. The next watch of the
        # namespace (after its last trigger leaves) asks again.
        self._denied_logged = True
        log.warning(
            "Cannot watch the events of namespace %s, so the reason a Job's pods cannot be created "
            "is not logged (the wait goes on): %s. Grant list and watch on events to the "
            "triggerer's Role (see the provider's deploying guide).",
            self.namespace,
            health.access_denied,
        )
        self._give_up = asyncio.get_running_loop().create_task(
            self.informer.stop(), name=f"jobwatch-refusals-stop-{self.namespace}"
        )
