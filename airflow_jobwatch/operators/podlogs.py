"""The pods' container logs, copied into the task log: which containers were asked for, and one
container's log streamed line by line (followed while the in-worker wait runs, read whole after the
Job's end for what was not followed)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kubernetes.client.rest import ApiException

from airflow_jobwatch.operators.request import api_error_message

if TYPE_CHECKING:
    from kubernetes.client import models as k8s

    from airflow_jobwatch.operators.taskjob import TaskJob

#: Bytes read from the log stream at a time; a line longer than _MAX_LINE_BYTES is cut into pieces, so
#: memory stays bounded whatever the container writes.
_LOG_CHUNK_BYTES = 64 * 1024
_MAX_LINE_BYTES = 1024 * 1024


def log_containers(tj: TaskJob, pod: k8s.V1Pod) -> list[str]:
    spec = pod.spec
    return requested_containers(
        tj,
        pod.metadata.name,
        [c.name for c in (spec.init_containers or [])] if spec else [],
        [c.name for c in (spec.containers or [])] if spec else [],
    )


def requested_containers(tj: TaskJob, pod_name: str, init_names: list[str], names: list[str]) -> list[str]:
    """Init containers named by ``init_container_logs``, then containers named by
    ``container_logs`` (``True``: all), in the pod's order."""
    chosen: list[str] = []
    for requested, present in ((tj.init_container_logs, init_names), (tj.container_logs, names)):
        if not requested:
            continue
        if requested is True:
            chosen.extend(present)
            continue
        wanted = [requested] if isinstance(requested, str) else list(requested)
        for name in wanted:
            if name in present:
                chosen.append(name)
            else:
                tj.log.warning("Container %s whose logs were requested is not in pod %s", name, pod_name)
    return chosen


def write_pod_logs(tj: TaskJob, pod: k8s.V1Pod) -> None:
    """Write the logs of the pod's requested containers, but those the in-worker wait streamed
    already. A pod the followers never saw (its events reached the watch after the Job's end was
    decided) is read here whole, so no pod's log is missing from the task log."""
    name = pod.metadata.name
    if name in tj.logs_wanted:  # the followers saw it, and warned about containers not there
        containers = [c for c in tj.logs_wanted[name] if (name, c) not in tj.logs_streamed]
    else:
        containers = log_containers(tj, pod)
    for container in containers:
        write_container_log(tj, name, pod.metadata.namespace, container, follow=False)


def write_container_log(
    tj: TaskJob,
    pod_name: str,
    namespace: str,
    container: str,
    *,
    follow: bool,
    opened: Callable[[Any], None] | None = None,
    stopped: threading.Event | None = None,
) -> None:
    """Stream one container's log into the task log, line by line, decoded; never held whole.

    :param follow: keep reading until the container ends (the in-worker wait streams this way).
    :param opened: called with the open response, so that a follower can be closed from outside.
    :param stopped: set when the stream was ended on purpose (then its end is no warning).
    """
    try:
        response = tj.client.read_namespaced_pod_log(
            name=pod_name,
            namespace=namespace,
            container=container,
            follow=follow,
            _preload_content=False,
        )
    except ApiException as e:
        tj.log.warning(
            "Could not read the log of container %s of pod %s: %s",
            container,
            pod_name,
            api_error_message(e),
        )
        return
    if opened is not None:
        opened(response)
    try:
        for line in decoded_lines(response.stream(_LOG_CHUNK_BYTES)):
            tj.log.info("[%s] [%s] %s", pod_name, container, line)
    except Exception as e:  # a log is a nice-to-have; never fail the task for it
        if stopped is not None and stopped.is_set():
            tj.log.debug("Stopped following the log of container %s of pod %s", container, pod_name)
        else:
            tj.log.warning("Reading the log of container %s of pod %s stopped: %s", container, pod_name, e)
    finally:
        response.release_conn()


def decoded_lines(chunks: Iterable[bytes]) -> Iterable[str]:
    """Split a byte stream into decoded lines (UTF-8, undecodable bytes escaped, as upstream does)."""
    partial = b""
    for chunk in chunks:
        partial += chunk
        *complete, partial = partial.split(b"\n")
        for line in complete:
            yield line.rstrip(b"\r").decode("utf-8", errors="backslashreplace")
        while len(partial) > _MAX_LINE_BYTES:
            yield partial[:_MAX_LINE_BYTES].decode("utf-8", errors="backslashreplace")
            partial = partial[_MAX_LINE_BYTES:]
    if partial:
        yield partial.rstrip(b"\r").decode("utf-8", errors="backslashreplace")
