"""The triggerer's read of the results that a Job's pods printed from their XCom sidecar.

A Job that ends in the triggerer returns its value from there (``ending.end_from_triggerer``): the
succeeded pods are listed, and each one that ran the sidecar has its result read from the sidecar's
log, streaming and at most :data:`~airflow_jobwatch.kube.meaning.xcom_sidecar.READ_CONCURRENCY` at once in the
process (:func:`~airflow_jobwatch.kube.meaning.xcom_sidecar.read_result`), so that the triggerer holds few
results at a time however many Jobs end together.
"""

from __future__ import annotations

from typing import Any

from airflow_jobwatch.ending.interface import EndingTrigger
from airflow_jobwatch.kube.meaning import xcom_sidecar
from airflow_jobwatch.kube.meaning.result import EMPTY_XCOM_RESULT, JobResult, XComResultError

__all__ = ["TRIGGERER_RESULT_BYTES", "ResultTooLargeHere", "payload_with", "with_sidecar_results"]

#: The most of one Job's XCom results (decoded bytes, its pods together) that the triggerer reads to end the
#: task itself. The end holds that much of the process's memory budget (``pod_logs.budget()``, which the
#: pod logs' tails share) from before the first byte is read until the value is parsed, so results and
#: tails together stay within it. A larger result is read by a worker: the task resumes there, where the
#: limit is ``MAX_RESULT_BYTES`` and the memory the task's own.
TRIGGERER_RESULT_BYTES = 16 * 1024 * 1024


class ResultTooLargeHere(Exception):
    """The Job's results are larger than :data:`TRIGGERER_RESULT_BYTES`: a worker reads them."""


async def with_sidecar_results(
    trigger: EndingTrigger,
    payload: dict[str, Any],
    result: JobResult,
    *,
    limit: int = xcom_sidecar.MAX_RESULT_BYTES,
) -> JobResult:
    """``result`` with each sidecar pod's result read from its log; unchanged when no pod of the Job
    ran the sidecar (a cluster without native sidecars, or pods already cleaned up after the result
    was written onto the Job).

    :param limit: the most of the results' decoded bytes read, the pods together.
    :raises ResultTooLargeHere: the results are larger than ``limit``, which is less than the largest accepted.
    :raises XComResultError: the pods or a log could not be read, or a log holds no whole result.
    """
    uid = payload.get("uid")
    if not uid or not result.xcom_result:
        return result
    from kubernetes_asyncio.client import CoreV1Api

    ns = trigger.namespace
    try:
        # the shared watch's client where the trigger holds one, as the end's other reads: an
        # exec-plugin credential (EKS, GKE) then runs no plugin for this read
        api, release = await trigger.end_client()
    except Exception as e:
        raise XComResultError(
            f"Could not read the XCom results of Job {ns}/{trigger.job_name}: {e}"
        ) from None
    try:
        core = CoreV1Api(api)
        try:
            listed = await core.list_namespaced_pod(
                ns, label_selector=f"controller-uid={uid}", _request_timeout=xcom_sidecar.READ_TIMEOUT
            )
            names = xcom_sidecar.sidecar_pods(listed.items)
            if not any(names):
                return result
            texts: dict[str, str] = {}
            left = limit
            for name in names:
                if name is not None:
                    data = await xcom_sidecar.read_result(core, name, ns, limit=left)
                    texts[name] = (
                        EMPTY_XCOM_RESULT if data is None else data.decode("utf-8", errors="replace")
                    )
                    left -= len(data or b"")
                    del data  # the text is the one copy kept
        except xcom_sidecar.ResultTooLarge as e:
            if limit < xcom_sidecar.MAX_RESULT_BYTES:
                raise ResultTooLargeHere(
                    f"the XCom results of Job {ns}/{trigger.job_name} are larger than the {limit} bytes the "
                    "triggerer reads"
                ) from None
            raise XComResultError(xcom_sidecar.too_large_hint(str(e))) from None
        except xcom_sidecar.SidecarResultError as e:
            raise XComResultError(xcom_sidecar.too_large_hint(str(e))) from None
        except XComResultError:
            raise
        except Exception as e:
            raise XComResultError(
                f"Could not read the XCom results of Job {ns}/{trigger.job_name} from the "
                f"{xcom_sidecar.SIDECAR_NAME} containers' logs: {e}"
            ) from None
        return xcom_sidecar.results_from_sidecars(result, names, texts)
    finally:
        await release()


def payload_with(payload: dict[str, Any], result: JobResult) -> dict[str, Any]:
    """``payload`` carrying ``result``'s XCom texts (for writing the result onto the Job)."""
    return {**payload, "xcom_result": list(result.xcom_result) if result.xcom_result is not None else None}
