"""Adoption's pod lists: every worker pod a gone scheduler's launch could have made, or no answer at all.

An adoption decision ("no pod of its current launch exists") rests on complete evidence: a list across all
namespaces, or, where RBAC refuses that, a list of every namespace a launch of the task instances could
have used. A list that fails is an exception, never a partial answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_jobwatch.executors.completed_pods import CompletedPodCleanup
from airflow_jobwatch.kube.engine.backoff import Backoff


class Where:
    """Where one adoption round may list: whether the list across all namespaces was refused."""

    cluster_refused = False


@dataclass
class Unresolved:
    """A task instance adopted while its scheduler's pods could not all be listed: what its row said.

    Kept by :mod:`.adoption_retry`; defined here because the lists and the matching take it in place of a
    task instance when the retry looks again.
    """

    key: Any
    queued_by_job_id: Any  # the gone scheduler's job id: its pods still carry that label
    external_executor_id: str | None
    state: str | None
    executor_config: Any
    workload: Any  # rebuilt while the row was at hand (QUEUED only), to launch it if no pod exists
    backoff: Backoff
    not_before: float = 0.0


class AdoptionListing(CompletedPodCleanup):
    """Listing the worker pods of gone schedulers with complete evidence, in every namespace they may be in."""

    def _list_everywhere(self, label_selector: str, tis: list[Any], where: Where) -> list[dict[str, Any]]:
        """Every pod matching ``label_selector`` in every namespace a launch of ``tis`` could have used, or
        an exception: never a partial answer.

        One list across all namespaces when RBAC allows it (a ``pod_override``, a ``pod_mutation_hook`` or
        a template may have put a pod anywhere). Refused (401/403), the configured namespaces, those
        watched here, and each task instance's own: the namespace its ``pod_override`` names and the one
        its pod is built in today (template, override and hook).
        """
        from kubernetes.client.exceptions import ApiException

        if not where.cluster_refused:
            try:
                return self._list_pods(label_selector, namespaces=[None])
            except ApiException as err:
                if err.status not in (401, 403):
                    raise
                where.cluster_refused = True
                self.log.info(
                    "Listing worker pods across all namespaces is not allowed (%s %s); adoption lists the "
                    "configured namespaces and those each task instance's pod can be built in",
                    err.status,
                    err.reason,
                )
        namespaces: set[str | None] = set(self._namespaces())
        if self.supervisor is not None:
            namespaces.update(self.supervisor.namespaces())
        if None in namespaces:
            raise RuntimeError(
                "a list across all namespaces is needed ([kubernetes_executor] multi_namespace_mode)"
            )
        for ti in tis:
            namespaces.update(self._launch_namespaces(ti))
        return self._list_pods(label_selector, namespaces=sorted(namespaces, key=str))

    def _launch_namespaces(self, ti: Any) -> set[str]:
        """The namespaces a launch of ``ti`` may have used besides the configured ones: the one its
        ``pod_override`` names, and the one its pod is built in now (template, override, mutation hook)."""
        out: set[str] = set()
        try:
            override = (getattr(ti, "executor_config", None) or {}).get("pod_override")
            meta = getattr(override, "metadata", None)
            ns = getattr(meta, "namespace", None) if meta is not None else None
            if ns is None and isinstance(override, dict):
                ns = (override.get("metadata") or {}).get("namespace")
            if ns:
                out.add(str(ns))
        except Exception as err:
            self.log.debug("Could not read the executor_config of %s: %s", ti.key, err)
        workload = self._workload_of(ti)
        if workload is not None and self._pod_builder is not None:
            try:
                body = self._pod_builder.body(workload, pod_name="adoption-probe", launch_id="adoption-probe")
                out.add(str(body["metadata"]["namespace"]))
            except Exception as err:
                self.log.debug("Could not build the pod of %s to find its namespace: %s", ti.key, err)
        return out

    def _workload_of(self, ti: Any) -> Any:
        """The ExecuteTask of ``ti``, rebuilt from its row as the scheduler builds it (None if it cannot be)."""
        if isinstance(ti, Unresolved):
            return ti.workload
        try:
            from airflow.executors.workloads import ExecuteTask

            return ExecuteTask.make(ti, generator=self.jwt_generator)
        except Exception as err:
            self.log.debug("Could not rebuild the workload of %s (%s: %s)", ti.key, type(err).__name__, err)
            return None
