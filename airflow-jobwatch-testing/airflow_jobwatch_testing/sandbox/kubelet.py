"""The sandbox kubelet: binds pods to the one node and runs each container's command as a local process.

What it reproduces, because watch-based clients depend on it:

* the sequence of pod status updates a real kubelet posts (each one a new resourceVersion and a
  watch event): scheduled -> (ContainerCreating) -> Running -> Succeeded/Failed, with
  ``containerStatuses`` (waiting / running / terminated with exit code, reason, timestamps,
  ``containerID``), the four pod conditions and ``startTime``;
* ``restartPolicy`` Never / OnFailure (restart in place, ``restartCount``, ``lastState``,
  CrashLoopBackOff) / Always;
* pod ``activeDeadlineSeconds`` (Failed, DeadlineExceeded), graceful deletion (SIGTERM to the
  container's process group, SIGKILL after the grace period, then the final delete), commands that
  cannot be executed (StartError, exit code 128), a container that fails to start on demand
  (:data:`START_FAILURE_ANNOTATION`: StartError or ContainerCannotRun), image pull failures
  (ErrImagePull / ImagePullBackOff, as a fault), eviction and node loss (as faults);
* a container that ends when its process exits, whatever that process left running in its process
  group (killed then, as the kernel kills the rest of a container's PID namespace), even a child that
  holds its output open;
* container logs (stdout and stderr interleaved, as a container runtime captures them) for the
  ``pods/log`` subresource, including ``follow``;
* native sidecars (Kubernetes 1.29+, KEP-753): an init container with ``restartPolicy: Always`` is
  started in its turn among the init containers and the next one starts once it runs; it runs beside
  the main containers, is restarted whenever it exits while they run, and once every main container has
  ended it gets SIGTERM (sidecars in reverse order, SIGKILL after the pod's grace period). The pod stays
  ``Running`` until its sidecars have ended, and its phase is decided by the main containers alone
  (pkg/kubelet/kuberuntime/kuberuntime_manager.go computePodActions, pkg/kubelet/kubelet_pods.go
  getPhase). Its status is in ``initContainerStatuses``: running, ``started`` and ``ready`` while it runs.

Images are recorded, never pulled. One asyncio task runs per pod, and two per running container (its
run and the reader of its output); no task polls.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from . import events, simulated
from .errors import ApiError
from .images import cannot_pull
from .store import Event, clone, now_rfc3339
from .volumes import VolumeRoot, host_path, rewrite

log = logging.getLogger(__name__)

NODE_NAME = "sandbox-node"
HOST_IP = "127.0.0.1"
# Bytes of log kept per container; older output is dropped first, as the real kubelet rotates a
# container's log at containerLogMaxSize (10 MiB by default) and serves only the current file. Memory
# is spent only by containers that print that much.
LOG_BUFFER_BYTES = 10 * 1024 * 1024
# Restart back-off for OnFailure/Always containers: the real kubelet starts at 10 s and doubles to
# 5 min; the sandbox starts at 1 s and doubles to 10 s so restart tests stay short.
RESTART_BACKOFF_INITIAL = 1.0
RESTART_BACKOFF_MAX = 10.0
# Seconds between ErrImagePull and ImagePullBackOff (the kubelet's first image back-off step is 10 s).
IMAGE_PULL_BACKOFF_SECONDS = 1.0
# The kubelet's termination-message limits (pkg/kubelet/container/runtime.go):
# MaxContainerTerminationMessageLength: the LAST 4 KiB of the file at terminationMessagePath
# (tail.ReadAtMost in kuberuntime_container.go getTerminationMessage);
TERMINATION_MESSAGE_MAX_BYTES = 4096
# MaxContainerTerminationMessageLogLines / ...LogLength: with FallbackToLogsOnError, when the file is
# empty and the container failed, the last 80 lines of its log, at most 2 KiB;
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048
# MaxPodTerminationMessageLogLength: 12 KiB per pod, split evenly between its containers (init
# containers included); the status manager keeps the FIRST bytes of each message (status_manager.go
# normalizeStatus: Message[:bytesPerStatus]).
POD_TERMINATION_MESSAGE_MAX_BYTES = 12 * 1024
EVICTION_MESSAGE = "The node was low on resource: memory."
# The kubelet's own stops (status.reason, status.message, DisruptionTarget message or None):
# eviction under node pressure (pkg/kubelet/eviction/eviction_manager.go evictPod),
# graceful node shutdown (pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go: "Terminated" for a
# pod it killed; "NodeShutdown" for one it refused to admit, with no condition), and preemption of a
# pod to admit a critical one (pkg/kubelet/preemption/preemption.go).
KUBELET_EVICTION = ("Evicted", EVICTION_MESSAGE, EVICTION_MESSAGE)
KUBELET_NODE_SHUTDOWN = (
    "Terminated",
    "Pod was terminated in response to imminent node shutdown.",
    "Pod was terminated in response to imminent node shutdown.",
)
KUBELET_NODE_SHUTDOWN_REJECTED = (
    "NodeShutdown",
    "Pod was rejected: Pod was rejected as the node is shutting down.",
    None,
)
KUBELET_PREEMPTION = (
    "Preempting",
    "Preempted in order to admit critical pod",
    "Pod was preempted by Kubelet to accommodate a critical pod.",
)
# A container that fails to start on demand, without running its command. The annotation's value is the
# reason the container runtime reports, optionally followed by ":<container name>" to fail that container
# only (init containers included); without a name every container of the pod fails to start:
# * "StartError": containerd / CRI-O (the CRI runtimes of Kubernetes 1.24+). Terminated, exit code 128,
#   startedAt the zero time (1970-01-01T00:00:00Z), finishedAt now, the runtime's message; a Warning
#   "Failed" event "Error: <message>" (pkg/kubelet/kuberuntime/kuberuntime_container.go startContainer).
# * "ContainerCannotRun": dockershim (Kubernetes 1.23 and earlier), which reads docker's inspect: a
#   container that exited without a finishedAt has "failed to start", reason ContainerCannotRun, exit code
#   docker's (128 for an OCI runtime error), message docker's State.Error, and startedAt = finishedAt =
#   the container's creation time (pkg/kubelet/dockershim/docker_container.go ContainerStatus). The event
#   is "Error: failed to start container <id>: Error response from daemon: <message>".
# Each start attempt fails again, so restartPolicy applies as to any container that cannot start.
START_FAILURE_ANNOTATION = "sandbox.jobwatch.io/start-failure"
START_FAILURE_REASONS = ("StartError", "ContainerCannotRun")
_REQUESTED = f"sandbox: start failure requested by annotation {START_FAILURE_ANNOTATION}"
START_FAILURE_MESSAGES = {
    "StartError": "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    f"runc create failed: unable to start container process: {_REQUESTED}: unknown",
    "ContainerCannotRun": "OCI runtime create failed: container_linux.go:380: starting container process "
    f"caused: {_REQUESTED}: unknown",
}
# How long to wait for a SIGKILLed container process to be reaped, and for the rest of a container's output
# once its process has exited (both are immediate in practice).
REAP_TIMEOUT_SECONDS = 5.0
# Bytes read from a container's output at once (asyncio's stream buffer size).
OUTPUT_READ_BYTES = 65536
# Kubelet.stop(): rounds of kill + cancel, each followed by a wait of at most this long.
STOP_ROUNDS = 3
STOP_ROUND_SECONDS = 6.0


class LogBuffer:
    """A container's captured output as (timestamp, line) pairs, with followers woken on new data."""

    def __init__(self) -> None:
        self.lines: collections.deque[tuple[float, bytes]] = collections.deque()
        self.size = 0
        self.partial = b""
        self.closed = False
        self.changed = asyncio.Event()
        self.appended = 0  # lines ever appended (followers track their position with it)

    def feed(self, data: bytes) -> None:
        data = self.partial + data
        *complete, self.partial = data.split(b"\n")
        now = time.time()
        for line in complete:
            self._append(now, line + b"\n")
        self.changed.set()

    def _append(self, ts: float, line: bytes) -> None:
        self.lines.append((ts, line))
        self.appended += 1
        self.size += len(line)
        while self.size > LOG_BUFFER_BYTES and self.lines:
            self.size -= len(self.lines.popleft()[1])

    def close(self) -> None:
        if self.partial:
            self._append(time.time(), self.partial)
            self.partial = b""
        self.closed = True
        self.changed.set()

    def reopen(self) -> None:
        self.closed = False

    def tail_text(self, max_lines: int, max_bytes: int) -> str:
        chunk = b"".join(line for _ts, line in list(self.lines)[-max_lines:])
        return chunk[-max_bytes:].decode(errors="replace")


@dataclass(eq=False)
class ContainerRuntime:
    spec: dict[str, Any]
    logs: LogBuffer = field(default_factory=LogBuffer)
    proc: asyncio.subprocess.Process | None = None
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    restart_count: int = 0
    started: bool = False
    final: bool = False  # terminated and will not be restarted
    launched: bool = False  # the first start attempt happened (spawned or StartError)
    init: bool = False  # an init container: runs to completion before the main containers
    launched_event: asyncio.Event = field(default_factory=asyncio.Event)  # set by _launched
    previous_logs: LogBuffer | None = None
    mounts: dict[str, str] = field(default_factory=dict)  # container path -> host folder (volumes.py)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def sidecar(self) -> bool:
        """A native sidecar: an init container with ``restartPolicy: Always``."""
        return self.init and self.spec.get("restartPolicy") == "Always"


@dataclass(eq=False)
class PodRuntime:
    namespace: str
    name: str
    uid: str
    containers: list[ContainerRuntime]
    restart_policy: str
    start_time: str = ""
    started: float = 0.0  # time.monotonic() when start_time was set
    # spec.activeDeadlineSeconds as last read, and the timer that fails the pod when it is reached.
    deadline: int | None = None
    deadline_timer: asyncio.TimerHandle | None = None
    stopping: asyncio.Event = field(default_factory=asyncio.Event)  # deletion/deadline/eviction
    stop_reason: str = ""  # "", "deleted", "deadline", "evicted", "killed"
    # With stop_reason "evicted": (status.reason, status.message, DisruptionTarget message or None).
    kubelet_stop: tuple[str, str, str | None] = KUBELET_EVICTION
    task: asyncio.Task[None] | None = None
    phase: str = "Pending"
    init_containers: list[ContainerRuntime] = field(default_factory=list)
    initialized: bool = True  # all init containers succeeded (or there are none)
    init_failed: bool = False  # an init container failed and will not be restarted
    sidecar_runners: list[asyncio.Task[None]] = field(default_factory=list)
    sidecars_stopping: bool = False  # the main containers have ended: sidecars are being stopped

    def sidecars(self) -> list[ContainerRuntime]:
        return [c for c in self.init_containers if c.sidecar]

    def container(self, name: str) -> ContainerRuntime | None:
        return next((c for c in [*self.init_containers, *self.containers] if c.name == name), None)

    def all_containers(self) -> list[ContainerRuntime]:
        return [*self.init_containers, *self.containers]


class Kubelet:
    def __init__(self, sandbox: Any) -> None:
        self.sb = sandbox
        self.pods: dict[str, PodRuntime] = {}  # by uid
        self.volumes = VolumeRoot()
        self._started = False

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._started = True
        self.sb.store.listeners.append(self._on_event)
        for entry in list(self.sb.store.iter("pods")):
            self._consider(entry.obj)

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self.sb.store.listeners.remove(self._on_event)
        runtimes = list(self.pods.values())
        # Stopping is bounded: each round kills the pods' processes and cancels their tasks again (a
        # cancellation can be lost, e.g. by asyncio.wait_for on Python 3.11 when its inner future
        # finishes at the same moment), then waits a little for them.
        for _ in range(STOP_ROUNDS):
            running = [rt for rt in runtimes if rt.task is not None and not rt.task.done()]
            if not running:
                break
            for rt in running:
                self._kill(rt, signal.SIGKILL)
                assert rt.task is not None
                rt.task.cancel()
            await asyncio.wait([rt.task for rt in running if rt.task is not None], timeout=STOP_ROUND_SECONDS)
        else:
            left = [
                f"{rt.namespace}/{rt.name}" for rt in runtimes if rt.task is not None and not rt.task.done()
            ]
            if left:
                log.warning(
                    "sandbox kubelet: pods still stopping when the sandbox stopped: %s", ", ".join(left)
                )
        for rt in runtimes:
            if rt.task is not None and rt.task.done() and not rt.task.cancelled():
                rt.task.exception()  # retrieved, so that asyncio does not log it as never retrieved
        self.pods.clear()
        self.volumes.close()

    # ---- events from the store -------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        if event.resource != "pods":
            return
        uid = event.obj["metadata"].get("uid", "")
        if event.type == "DELETED":
            rt = self.pods.get(uid)
            if rt is not None and rt.task is not None and not rt.task.done():
                # Gone from the API server (force delete / node loss): stop without reporting.
                self._kill(rt, signal.SIGKILL)
                rt.stop_reason = rt.stop_reason or "killed"
                rt.task.cancel()
            self.pods.pop(uid, None)
            self.volumes.remove(uid)
            return
        meta = event.obj["metadata"]
        rt = self.pods.get(uid)
        if rt is not None:
            if meta.get("deletionTimestamp") and not rt.stopping.is_set():
                rt.stop_reason = "deleted"
                rt.stopping.set()
            elif rt.start_time:
                self._arm_deadline(rt, event.obj.get("spec") or {})
            return
        asyncio.get_running_loop().call_soon(
            self._consider_current, meta.get("namespace", ""), meta["name"], uid
        )

    def _consider_current(self, namespace: str, name: str, uid: str) -> None:
        entry = self.sb.store.get("pods", namespace, name)
        if entry is not None and entry.obj["metadata"].get("uid") == uid:
            self._consider(entry.obj)

    def _consider(self, pod: dict[str, Any]) -> None:
        """Take on a pod that is not terminal and not yet run by this kubelet."""
        meta = pod["metadata"]
        uid = meta["uid"]
        if uid in self.pods or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return
        if meta.get("deletionTimestamp"):
            # Deleted before it ever ran: nothing to stop, finish the deletion.
            self._final_delete(meta.get("namespace", ""), meta["name"], uid)
            return
        node = pod.get("spec", {}).get("nodeName")
        if node and node != NODE_NAME:
            return
        spec = pod.get("spec", {})
        rt = PodRuntime(
            namespace=meta.get("namespace", ""),
            name=meta["name"],
            uid=uid,
            containers=[ContainerRuntime(clone(c)) for c in spec.get("containers") or []],
            restart_policy=spec.get("restartPolicy", "Always"),
            init_containers=[ContainerRuntime(clone(c), init=True) for c in spec.get("initContainers") or []],
        )
        for c in rt.all_containers():
            c.mounts = self.volumes.mounts(uid, spec, c.spec)
        if rt.init_containers:
            rt.initialized = False
            for c in rt.containers:
                c.state = {"waiting": {"reason": "PodInitializing"}}
        self.pods[uid] = rt
        if not node:
            self._bind(rt)
        rt.task = asyncio.get_running_loop().create_task(
            self._run_pod(rt), name=f"pod {rt.namespace}/{rt.name}"
        )

    # ---- status updates --------------------------------------------------------------------------
    def _current(self, rt: PodRuntime) -> dict[str, Any] | None:
        entry = self.sb.store.get("pods", rt.namespace, rt.name)
        if entry is None or entry.obj["metadata"].get("uid") != rt.uid:
            return None
        obj: dict[str, Any] = entry.obj
        return obj

    def _bind(self, rt: PodRuntime) -> None:
        """The scheduler's binding: spec.nodeName and the PodScheduled condition (one update)."""
        old = self._current(rt)
        if old is None:
            return
        new = clone(old)
        new["spec"]["nodeName"] = NODE_NAME
        status = new.setdefault("status", {})
        status["phase"] = "Pending"
        status["conditions"] = [self._condition("PodScheduled", "True")]
        qos = status.pop("qosClass", "BestEffort")
        status["qosClass"] = qos
        self.sb.store.commit("pods", "MODIFIED", new, old)
        events.record(
            self.sb,
            "pods",
            new,
            "Scheduled",
            f"Successfully assigned {rt.namespace}/{rt.name} to {NODE_NAME}",
            component="default-scheduler",
        )

    def _event(
        self,
        rt: PodRuntime,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        container: str | None = None,
    ) -> None:
        pod = self._current(rt)
        if pod is not None:
            events.record(
                self.sb,
                "pods",
                pod,
                reason,
                message,
                type_="Warning" if warning else "Normal",
                field_path=f"spec.containers{{{container}}}" if container else None,
            )

    @staticmethod
    def _condition(
        type_: str, status: str, reason: str | None = None, message: str | None = None
    ) -> dict[str, Any]:
        cond: dict[str, Any] = {
            "type": type_,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": now_rfc3339(),
        }
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        return cond

    def _publish(self, rt: PodRuntime, *, reason: str | None = None, message: str | None = None) -> None:
        """Post the pod's status as the kubelet sees it now (one store revision, one watch event)."""
        old = self._current(rt)
        if old is None:
            return
        new = clone(old)
        status = new.setdefault("status", {})
        previous_conditions = {c.get("type"): c for c in status.get("conditions") or []}
        phase = self._phase(rt)
        rt.phase = phase
        if not rt.start_time:
            rt.start_time, rt.started = now_rfc3339(), time.monotonic()
        terminal = phase in ("Succeeded", "Failed")
        all_ready = bool(rt.containers) and all("running" in c.state for c in rt.containers)
        not_ready = [c.name for c in rt.containers if "running" not in c.state]

        def cond(type_: str, value: str, why: str | None = None, msg: str | None = None) -> dict[str, Any]:
            prev = previous_conditions.get(type_)
            if prev is not None and prev.get("status") == value and prev.get("reason") == why:
                return dict(prev)
            return self._condition(type_, value, why, msg)

        if rt.initialized:
            initialized = cond("Initialized", "True")
        else:
            pending = [
                c.name
                for c in rt.init_containers
                if c.state.get("terminated", {}).get("exitCode") != 0 and not (c.sidecar and c.started)
            ]
            initialized = cond(
                "Initialized",
                "False",
                "ContainersNotInitialized",
                f"containers with incomplete status: [{' '.join(pending)}]",
            )
        conditions = [cond("PodScheduled", "True"), initialized]
        if terminal:
            conditions += [
                cond("ContainersReady", "False", "PodCompleted"),
                cond("Ready", "False", "PodCompleted"),
            ]
        elif all_ready:
            conditions += [cond("ContainersReady", "True"), cond("Ready", "True")]
        else:
            msg = f"containers with unready status: [{' '.join(not_ready)}]"
            conditions += [
                cond("ContainersReady", "False", "ContainersNotReady", msg),
                cond("Ready", "False", "ContainersNotReady", msg),
            ]
        if "DisruptionTarget" in previous_conditions:
            conditions.append(previous_conditions["DisruptionTarget"])
        if (
            rt.stop_reason == "evicted"
            and rt.kubelet_stop[2] is not None
            and "DisruptionTarget" not in previous_conditions
        ):
            conditions.append(
                self._condition("DisruptionTarget", "True", "TerminationByKubelet", rt.kubelet_stop[2])
            )
        out: dict[str, Any] = {"phase": phase, "conditions": conditions}
        if reason:
            out["message"] = message or ""
            out["reason"] = reason
        elif status.get("reason") and terminal:
            out["message"] = status.get("message", "")
            out["reason"] = status["reason"]
        out.update(
            {
                "hostIP": HOST_IP,
                "hostIPs": [{"ip": HOST_IP}],
                "podIP": HOST_IP,
                "podIPs": [{"ip": HOST_IP}],
                "startTime": rt.start_time,
            }
        )
        per_container = POD_TERMINATION_MESSAGE_MAX_BYTES // max(
            1, len(rt.containers) + len(rt.init_containers)
        )
        if rt.init_containers:
            out["initContainerStatuses"] = [
                self._container_status(rt, c, init=True, message_budget=per_container)
                for c in rt.init_containers
            ]
        out.update(
            {
                "containerStatuses": [
                    self._container_status(rt, c, message_budget=per_container) for c in rt.containers
                ],
                "qosClass": status.get("qosClass", "BestEffort"),
            }
        )
        if out == status:
            return  # nothing changed: a real kubelet skips no-op status updates too
        new["status"] = out
        self.sb.store.commit("pods", "MODIFIED", new, old)

    def _container_status(
        self,
        rt: PodRuntime,
        c: ContainerRuntime,
        *,
        init: bool = False,
        message_budget: int = POD_TERMINATION_MESSAGE_MAX_BYTES,
    ) -> dict[str, Any]:
        image = str(c.spec.get("image", ""))
        succeeded = c.state.get("terminated", {}).get("exitCode") == 0
        state = clone(c.state)
        last_state = clone(c.last_state)
        for st in (state, last_state):
            terminated = st.get("terminated")
            if terminated and isinstance(terminated.get("message"), str):
                raw = terminated["message"].encode()
                if len(raw) > message_budget:
                    terminated["message"] = raw[:message_budget].decode(errors="replace")
        out: dict[str, Any] = {
            "name": c.name,
            "state": state,
            "lastState": last_state,
            # An init container is "ready" once it completed successfully; a sidecar while it runs.
            "ready": succeeded if init and not c.sidecar else "running" in c.state,
            "restartCount": c.restart_count,
            "image": image,
            "imageID": f"sandbox://{image}" if c.started or "terminated" in c.state else "",
        }
        if c.started or "terminated" in c.state:
            out["containerID"] = f"sandbox://{rt.uid}/{c.name}"
        out["started"] = "running" in c.state
        return out

    @staticmethod
    def _phase(rt: PodRuntime) -> str:
        if rt.init_failed:
            return "Failed"
        if not rt.initialized:
            return "Pending"
        if rt.containers and all(c.final for c in rt.containers):
            if any(not c.final for c in rt.sidecars()):
                return "Running"  # the kubelet is still stopping the sidecars
            if rt.stop_reason in ("evicted", "deadline"):
                return "Failed"
            ok = all(c.state.get("terminated", {}).get("exitCode") == 0 for c in rt.containers)
            if rt.restart_policy == "Always" and rt.stop_reason != "deleted":
                return "Failed"
            return "Succeeded" if ok else "Failed"
        if any(c.started or "terminated" in c.state or c.restart_count for c in rt.containers):
            return "Running"
        return "Pending"

    # ---- running a pod ---------------------------------------------------------------------------
    async def _run_pod(self, rt: PodRuntime) -> None:
        try:
            await self._run_pod_inner(rt)
        except asyncio.CancelledError:
            self._kill(rt, signal.SIGKILL)
            raise
        except Exception:  # a kubelet bug must not take the sandbox down; the pod stays as it is
            log.exception("sandbox kubelet: pod %s/%s crashed", rt.namespace, rt.name)

    async def _run_pod_inner(self, rt: PodRuntime) -> None:
        pod = self._current(rt)
        if pod is None:
            return
        spec = pod.get("spec", {})
        if not rt.start_time:  # the kubelet has taken the pod on: the deadline counts from now
            rt.start_time, rt.started = now_rfc3339(), time.monotonic()
        self._arm_deadline(rt, spec)
        delay = self.sb.pod_start_delay
        pattern = self.sb.image_pull_failure
        failing_image = next(
            (
                str(c.spec.get("image", ""))
                for c in rt.containers
                if cannot_pull(str(c.spec.get("image", "")), pattern)
            ),
            None,
        )
        if delay > 0 or failing_image is not None:
            self._publish(rt)  # Pending, containers waiting: ContainerCreating
        if delay > 0 and await self._wait_stopping(rt, delay):
            await self._finish(rt)
            return
        if failing_image is not None:
            await self._image_pull_failure(rt, failing_image)
            await self._finish(rt)
            return
        if self._config_errors(rt):
            # A container that cannot be configured never starts; the pod stays Pending (the
            # kubelet keeps retrying) until it is deleted.
            for c in rt.all_containers():
                waiting = c.state.get("waiting", {})
                if waiting.get("reason") in ("InvalidImageName", "CreateContainerConfigError"):
                    reason = "InspectFailed" if waiting["reason"] == "InvalidImageName" else "Failed"
                    self._event(rt, reason, waiting.get("message", ""), warning=True, container=c.name)
            self._publish(rt)
            await self._wait_stopping(rt, None)
            await self._finish(rt)
            return

        stopper = asyncio.create_task(self._watch_stopping(rt))
        runners: list[asyncio.Task[None]] = []
        try:
            if await self._run_init_containers(rt):
                runners = [asyncio.create_task(self._run_container(rt, c)) for c in rt.containers]
                await asyncio.gather(*runners)
            await self._stop_sidecars(rt, spec)
        finally:
            stopper.cancel()
            for task in [*runners, *rt.sidecar_runners]:
                task.cancel()
        await self._finish(rt)

    async def _run_init_containers(self, rt: PodRuntime) -> bool:
        """Run the init containers one after the other, each until it succeeds (restarted with
        back-off unless restartPolicy is Never). False if the pod must not go on."""
        for c in rt.init_containers:
            if c.sidecar:
                # started in its turn; the next init container waits until it runs (no startupProbe here)
                runner = asyncio.create_task(self._run_container(rt, c), name=f"sidecar {rt.name}/{c.name}")
                rt.sidecar_runners.append(runner)
                launched = asyncio.create_task(c.launched_event.wait())
                try:
                    await asyncio.wait({runner, launched}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    launched.cancel()
                if rt.stopping.is_set():
                    return False
                continue
            await self._run_container(rt, c)
            if c.state.get("terminated", {}).get("exitCode") != 0:
                if not rt.stopping.is_set():
                    rt.init_failed = True  # restartPolicy Never: the pod fails
                return False
        if rt.init_containers:
            rt.initialized = True
            for c in rt.containers:
                c.state = {"waiting": {"reason": "ContainerCreating"}}
        return True

    async def _stop_sidecars(self, rt: PodRuntime, spec: dict[str, Any]) -> None:
        """Once the main containers have ended: SIGTERM each running sidecar, the last started first,
        and wait for it; SIGKILL what still runs after the pod's terminationGracePeriodSeconds."""
        if not rt.sidecar_runners:
            return
        rt.sidecars_stopping = True
        grace = spec.get("terminationGracePeriodSeconds", 30)
        deadline = time.monotonic() + max(0, grace if isinstance(grace, int | float) else 30)
        for c, runner in reversed(list(zip(rt.sidecars(), rt.sidecar_runners, strict=False))):
            if runner.done():
                continue
            if c.proc is None and c.last_state:  # waiting to restart (back-off): it is not started again
                runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await runner
                c.state, c.final = c.last_state, True
                continue
            if c.proc is not None and c.proc.returncode is None:
                self._event(rt, "Killing", f"Stopping container {c.name}", container=c.name)
                simulated.signal_group(c.proc, signal.SIGTERM)
            _done, pending = await asyncio.wait({runner}, timeout=max(0.0, deadline - time.monotonic()))
            if pending and c.proc is not None:  # the grace period is over: whatever still runs is killed
                simulated.signal_group(c.proc, signal.SIGKILL)
                await asyncio.wait({runner}, timeout=REAP_TIMEOUT_SECONDS)

    async def _finish(self, rt: PodRuntime) -> None:
        """After all containers ended: the final status, then (if being deleted) the final delete."""
        if not rt.initialized and rt.stop_reason in ("deadline", "evicted"):
            rt.init_failed = True  # stopped while initializing: the pod failed
        for c in rt.containers if rt.initialized else []:  # never-started ones stay PodInitializing
            if not c.final:
                c.final = True
                if "terminated" not in c.state:
                    c.state = {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "ContainerStatusUnknown",
                            "message": "The container could not be located when the pod was terminated",
                            "startedAt": None,
                            "finishedAt": now_rfc3339(),
                        }
                    }
        if rt.stop_reason == "deadline":
            self._publish(
                rt,
                reason="DeadlineExceeded",
                message="Pod was active on the node longer than the specified deadline",
            )
        elif rt.stop_reason == "evicted":
            self._publish(rt, reason=rt.kubelet_stop[0], message=rt.kubelet_stop[1])
        else:
            self._publish(rt)
        pod = self._current(rt)
        if pod is not None and pod["metadata"].get("deletionTimestamp"):
            self._final_delete(rt.namespace, rt.name, rt.uid)

    def _final_delete(self, namespace: str, name: str, uid: str) -> None:
        entry = self.sb.store.get("pods", namespace, name)
        if entry is None or entry.obj["metadata"].get("uid") != uid:
            return
        with contextlib.suppress(ApiError):
            self.sb.api.delete("pods", namespace, name, grace=0, preconditions={"uid": uid})

    def _config_errors(self, rt: PodRuntime) -> bool:
        """Set the waiting state of containers the kubelet could not create, as it reports them:

        * an image name that is not a valid reference -> ``InvalidImageName``;
        * ``env[].valueFrom`` / ``envFrom`` referring to a Secret or ConfigMap -> the sandbox has
          none, so ``CreateContainerConfigError`` (unless the reference is ``optional``).
        """
        found = False
        for c in rt.all_containers():
            image = str(c.spec.get("image", ""))
            if not _IMAGE_REFERENCE.match(image):
                c.state = {
                    "waiting": {
                        "reason": "InvalidImageName",
                        "message": f'Failed to apply default image tag "{image}": couldn\'t parse image name '
                        f'"{image}": invalid reference format',
                    }
                }
                found = True
                continue
            missing = _missing_reference(c.spec)
            if missing is not None:
                c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": missing}}
                found = True
        return found

    async def _wait_stopping(self, rt: PodRuntime, seconds: float | None) -> bool:
        """Wait ``seconds`` (None = forever) unless the pod is told to stop; True if it was."""
        try:
            async with asyncio.timeout(seconds):
                await rt.stopping.wait()
            return True
        except TimeoutError:
            return False

    async def _image_pull_failure(self, rt: PodRuntime, image: str) -> None:
        for c in rt.containers:
            if c.spec.get("image") == image:
                c.state = {
                    "waiting": {
                        "reason": "ErrImagePull",
                        "message": f'failed to pull and unpack image "{image}": failed to resolve reference '
                        f'"{image}": pull access denied, repository does not exist or may require authorization',
                    }
                }
                message = c.state["waiting"]["message"]
                self._event(
                    rt, "Failed", f'Failed to pull image "{image}": {message}', warning=True, container=c.name
                )
                self._event(rt, "Failed", "Error: ErrImagePull", warning=True, container=c.name)
        self._publish(rt)
        if await self._wait_stopping(rt, IMAGE_PULL_BACKOFF_SECONDS):
            return
        for c in rt.containers:
            if c.spec.get("image") == image:
                c.state = {
                    "waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
                }
                self._event(rt, "BackOff", f'Back-off pulling image "{image}"', container=c.name)
                self._event(rt, "Failed", "Error: ImagePullBackOff", warning=True, container=c.name)
        self._publish(rt)
        await self._wait_stopping(rt, None)

    def _environment(self, rt: PodRuntime, c: ContainerRuntime) -> dict[str, str]:
        env: dict[str, str] = dict(os.environ) if self.sb.inherit_env else {}
        bindir = os.path.dirname(sys.executable)
        path = env.get("PATH", os.defpath)
        env["PATH"] = f"{bindir}{os.pathsep}{path}" if path else bindir
        env["HOSTNAME"] = rt.name
        pod = self._current(rt) or {}
        # Read defensively: whatever the API server stored must start (or fail as a container
        # fails), never crash the kubelet. A Go string the body left null is "".
        for item in c.spec.get("env") or []:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                continue
            source = item.get("valueFrom")
            field_ref = source.get("fieldRef") if isinstance(source, dict) else None
            if isinstance(field_ref, dict):
                value: Any = pod
                for part in str(field_ref.get("fieldPath") or "").split("."):
                    value = value.get(part) if isinstance(value, dict) else None
                env[item["name"]] = "" if value is None else str(value)
            elif source is None:
                env[item["name"]] = str(item.get("value") or "")
        return env

    async def _run_container(self, rt: PodRuntime, c: ContainerRuntime) -> None:
        backoff = RESTART_BACKOFF_INITIAL
        while True:
            await self._run_once(rt, c)
            if c.final:
                return
            # Restart in place after a back-off, like the kubelet's CrashLoopBackOff.
            c.last_state = c.state
            c.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {backoff:g}s restarting failed container={c.name} pod={rt.name}_{rt.namespace}({rt.uid})",
                }
            }
            c.restart_count += 1
            self._publish(rt)
            self._event(
                rt,
                "BackOff",
                f"Back-off restarting failed container {c.name} in pod {rt.name}_{rt.namespace}({rt.uid})",
                warning=True,
                container=c.name,
            )
            if await self._wait_stopping(rt, backoff):
                c.state = c.last_state
                c.final = True
                return
            backoff = min(backoff * 2, RESTART_BACKOFF_MAX)

    async def _run_once(self, rt: PodRuntime, c: ContainerRuntime) -> int:
        argv = [_arg(a) for key in ("command", "args") for a in _listed(c.spec.get(key))]
        argv = [rewrite(a, c.mounts) for a in argv]
        if rt.stopping.is_set() or (c.sidecar and rt.sidecars_stopping):
            c.final = True
            return 137
        if c.restart_count:
            c.previous_logs = c.logs
            c.logs = LogBuffer()
        started_at = now_rfc3339()
        pod = self._current(rt)  # read once: nothing below yields before the process starts
        try:
            forced = start_failure(pod or {}, c.name)
        except ValueError as exc:  # a bad annotation: reported where the user looks, the pod's status
            return self._start_error(rt, c, started_at, str(exc))
        if forced is not None:
            return self._start_error(rt, c, started_at, START_FAILURE_MESSAGES[forced], reason=forced)
        if not argv and not simulated.is_simulated(self.sb, pod or {}):
            return self._start_error(
                rt,
                c,
                started_at,
                'the sandbox runs container commands on the host and cannot use image entrypoints: set "command"',
            )
        try:
            # A simulated container (no host process) or the container's process: same status path.
            proc = simulated.start(self.sb, pod, argv) or await _spawn(
                argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env={k: rewrite(v, c.mounts) for k, v in self._environment(rt, c).items()},
                cwd=rewrite(str(c.spec.get("workingDir") or ""), c.mounts) or None,
                start_new_session=True,  # own process group: signals reach the whole container
            )
        except (OSError, ValueError) as exc:
            reason = "executable file not found in $PATH" if isinstance(exc, FileNotFoundError) else str(exc)
            return self._start_error(
                rt,
                c,
                started_at,
                "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
                f'runc create failed: unable to start container process: exec: "{argv[0]}": {reason}: unknown',
            )
        c.proc = proc
        c.started = True
        c.state = {"running": {"startedAt": started_at}}
        image = c.spec.get("image", "")
        self._event(rt, "Pulled", f'Container image "{image}" already present on machine', container=c.name)
        self._event(rt, "Created", f"Created container: {c.name}", container=c.name)
        self._event(rt, "Started", f"Started container {c.name}", container=c.name)
        self._launched(rt, c)
        assert proc.stdout is not None
        output = asyncio.create_task(_read_output(proc.stdout, c.logs), name=f"output {rt.name}/{c.name}")
        try:
            exit_code = await proc.exited()
            # The container ends when its process does, as in Kubernetes: the kernel kills every other
            # process of the container's PID namespace once its first process exits (and the runtime
            # the rest of its cgroup). Here its process group stands for both. A child left behind
            # (a background job started after its parent's SIGTERM was sent) would otherwise hold the
            # output pipe open and keep the container, and its pod, running for ever. The group is
            # signalled only while the pipe is still open (a member may still hold it); Linux hands out
            # process ids in turn, so its id names no other group this soon after its leader exited.
            if not output.done():
                simulated.signal_group(proc, signal.SIGKILL)
            await asyncio.wait({output}, timeout=REAP_TIMEOUT_SECONDS)  # what it wrote before it ended
        except asyncio.CancelledError:
            # Pod gone from the API (force delete, node loss) or sandbox stopping: kill and reap the
            # process so that no child outlives the sandbox and its transport is closed in this loop.
            simulated.signal_group(proc, signal.SIGKILL)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(proc.exited()), REAP_TIMEOUT_SECONDS)
            c.proc = None
            c.logs.close()  # ends `follow` readers
            raise
        finally:
            output.cancel()
        c.logs.close()
        c.proc = None
        c.started = False
        if exit_code < 0:  # killed by a signal: report it like a container runtime (128 + signal)
            exit_code = 128 - exit_code
        terminated: dict[str, Any] = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
        }
        message = self._termination_message(c, exit_code)
        if message:
            terminated["message"] = message
        terminated.update(
            {
                "startedAt": started_at,
                "finishedAt": now_rfc3339(),
                "containerID": f"sandbox://{rt.uid}/{c.name}",
            }
        )
        c.state = {"terminated": terminated}
        c.final = not self._restarts(rt, c, exit_code)
        if not all(o.final for o in [*rt.containers, *rt.sidecars()]):
            self._publish(rt)  # otherwise _finish publishes the pod's final status
        return exit_code

    @staticmethod
    def _restarts(rt: PodRuntime, c: ContainerRuntime, exit_code: int) -> bool:
        if rt.stopping.is_set():
            return False
        if c.sidecar:  # restarted whatever its exit code, until the main containers have ended
            return not rt.sidecars_stopping
        if c.init:  # init containers run until they succeed, unless the policy is Never
            return exit_code != 0 and rt.restart_policy != "Never"
        return rt.restart_policy == "Always" or (rt.restart_policy == "OnFailure" and exit_code != 0)

    def _launched(self, rt: PodRuntime, c: ContainerRuntime) -> None:
        """Publish once every container made its first start attempt (Running, or Failed when
        none could start), and on every restart; with no await in between, so that a container that
        exits at once is still seen Running first, as the kubelet reports it."""
        first = not c.launched
        c.launched = True
        c.launched_event.set()
        if c.init or not first or all(o.launched for o in rt.containers):
            self._publish(rt)

    def _start_error(
        self,
        rt: PodRuntime,
        c: ContainerRuntime,
        started_at: str,
        message: str,
        *,
        reason: str = "StartError",
    ) -> int:
        """A container that was created but could not start: terminated with exit code 128 and ``reason``
        as the container runtime reports it (see :data:`START_FAILURE_ANNOTATION` for the two shapes)."""
        container_id = f"sandbox://{rt.uid}/{c.name}"
        if reason == "ContainerCannotRun":
            # dockershim: startedAt and finishedAt both the container's creation time.
            times = {"startedAt": started_at, "finishedAt": started_at}
            event = (
                f'Error: failed to start container "{container_id.removeprefix("sandbox://")}": '
                f"Error response from daemon: {message}"
            )
        else:
            # CRI: the zero start time (the container never started), finished now.
            times = {"startedAt": "1970-01-01T00:00:00Z", "finishedAt": now_rfc3339()}
            event = f"Error: {message}"
        c.state = {
            "terminated": {
                "exitCode": 128,
                "reason": reason,
                "message": message,
                **times,
                "containerID": container_id,
            }
        }
        c.logs.close()
        c.final = not self._restarts(rt, c, 128)
        self._event(rt, "Failed", event, warning=True, container=c.name)
        self._launched(rt, c)
        return 128

    @staticmethod
    def _termination_message(c: ContainerRuntime, exit_code: int) -> str:
        """The container's termination message: the file at terminationMessagePath (when it is a host
        path the process could write; /dev/termination-log is not), else with FallbackToLogsOnError
        the tail of the log on failure."""
        path = c.spec.get("terminationMessagePath") or "/dev/termination-log"
        if path != "/dev/termination-log":
            with contextlib.suppress(OSError):
                with open(host_path(path, c.mounts), "rb") as fh:
                    fh.seek(0, os.SEEK_END)
                    size = fh.tell()
                    fh.seek(max(0, size - TERMINATION_MESSAGE_MAX_BYTES))
                    text = fh.read(TERMINATION_MESSAGE_MAX_BYTES).decode(errors="replace")
                if text:
                    return text
        if exit_code != 0 and c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            return c.logs.tail_text(FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES)
        return ""

    # ---- stopping --------------------------------------------------------------------------------
    def _kill(self, rt: PodRuntime, sig: int) -> None:
        for c in rt.all_containers():
            proc = c.proc
            if proc is not None and proc.returncode is None:
                simulated.signal_group(proc, sig)

    def _arm_deadline(self, rt: PodRuntime, spec: dict[str, Any]) -> None:
        """Fail the pod ``spec.activeDeadlineSeconds`` after ``status.startTime``. The kubelet reads the field
        at every sync, so a deadline set or lowered on a pod that already runs (or waits on its image) is
        seen at once, and one already past stops the pod now."""
        deadline = spec.get("activeDeadlineSeconds")
        if not isinstance(deadline, int) or deadline < 0 or deadline == rt.deadline:
            return
        if rt.task is not None and rt.task.done():
            return
        if rt.deadline_timer is not None:
            rt.deadline_timer.cancel()
        rt.deadline = deadline
        delay = max(0.0, rt.started + deadline - time.monotonic())
        rt.deadline_timer = asyncio.get_running_loop().call_later(delay, self._deadline_exceeded, rt)

    def _deadline_exceeded(self, rt: PodRuntime) -> None:
        if rt.stopping.is_set() or rt.task is None or rt.task.done():
            return
        rt.stop_reason = "deadline"
        rt.stopping.set()
        self._event(
            rt,
            "DeadlineExceeded",
            "Pod was active on the node longer than the specified deadline",
            warning=True,
        )

    def evict(self, namespace: str, name: str) -> None:
        """Evict under memory pressure: Failed, reason Evicted, DisruptionTarget TerminationByKubelet."""
        self.stop_pod(namespace, name, KUBELET_EVICTION, event_reason="Evicted")

    def stop_pod(
        self,
        namespace: str,
        name: str,
        how: tuple[str, str, str | None],
        *,
        event_reason: str,
        before_start: tuple[str, str, str | None] | None = None,
    ) -> str:
        """Stop a pod the way the kubelet does on its own (eviction, node shutdown, preemption):
        SIGKILL its containers and report phase Failed with ``how`` = (status.reason, status.message,
        DisruptionTarget message or None). ``before_start``, when given, is used instead for a pod none
        of whose containers started yet. Returns the status.reason reported."""
        entry = self.sb.store.get("pods", namespace, name)
        if entry is None:
            raise LookupError(f"pod {namespace}/{name} not found")
        rt = self.pods.get(entry.obj["metadata"]["uid"])
        if rt is None or rt.task is None or rt.task.done():
            raise RuntimeError(f"pod {namespace}/{name} is not running on the sandbox node")
        if before_start is not None and not any(c.started or c.launched for c in rt.all_containers()):
            how = before_start
        rt.kubelet_stop = how
        rt.stop_reason = "evicted"
        rt.stopping.set()
        self._kill(rt, signal.SIGKILL)
        self._event(rt, event_reason, how[1], warning=True)
        return how[0]

    def kill_silently(self, namespace: str, name: str) -> None:
        entry = self.sb.store.get("pods", namespace, name)
        if entry is None:
            return
        rt = self.pods.get(entry.obj["metadata"]["uid"])
        if rt is None:
            return
        rt.stop_reason = "killed"
        self._kill(rt, signal.SIGKILL)
        if rt.task is not None:
            rt.task.cancel()

    async def _watch_stopping(self, rt: PodRuntime) -> None:
        """On deletion/deadline: SIGTERM every container, SIGKILL after the grace period."""
        await rt.stopping.wait()
        if rt.stop_reason == "evicted":
            self._kill(rt, signal.SIGKILL)
            return
        for c in rt.all_containers():
            if c.proc is not None:
                self._event(rt, "Killing", f"Stopping container {c.name}", container=c.name)
        self._kill(rt, signal.SIGTERM)
        pod = self._current(rt)
        grace = 30
        if pod is not None:
            meta = pod["metadata"]
            grace = meta.get(
                "deletionGracePeriodSeconds", pod.get("spec", {}).get("terminationGracePeriodSeconds", 30)
            )
        await asyncio.sleep(max(0, grace))
        self._kill(rt, signal.SIGKILL)

    # ---- logs ------------------------------------------------------------------------------------
    async def serve_logs(self, request: web.BaseRequest, pod: dict[str, Any]) -> web.StreamResponse:
        meta = pod["metadata"]
        name = meta["name"]
        names = [c.get("name") for c in pod.get("spec", {}).get("containers") or []]
        init_names = [c.get("name") for c in pod.get("spec", {}).get("initContainers") or []]
        query = request.query
        container = query.get("container")
        if not container:
            if len(names) != 1:  # the real check counts regular containers only
                choice = f"choose one of: [{' '.join(names)}]"
                if init_names:
                    choice += f" or one of the init containers: [{' '.join(init_names)}]"
                raise ApiError(400, f"a container name must be specified for pod {name}, {choice}")
            container = names[0]
        if container not in names and container not in init_names:
            raise ApiError(400, f"container {container} is not valid for pod {name}")
        rt = self.pods.get(meta["uid"])
        c = rt.container(container) if rt is not None else None
        if c is None or (not c.started and "terminated" not in c.state and not c.restart_count):
            waiting = (c.state.get("waiting", {}).get("reason") if c else None) or "ContainerCreating"
            raise ApiError(400, f'container "{container}" in pod "{name}" is waiting to start: {waiting}')
        buffer = c.logs
        if _truthy(query.get("previous")):
            if c.previous_logs is None:
                raise ApiError(400, f'previous terminated container "{container}" in pod "{name}" not found')
            buffer = c.previous_logs
        timestamps = _truthy(query.get("timestamps"))
        follow = _truthy(query.get("follow"))
        lines = list(buffer.lines)
        tail = query.get("tailLines")
        if tail is not None and tail.lstrip("-").isdigit() and int(tail) >= 0:
            lines = lines[len(lines) - int(tail) :] if int(tail) else []
        since = query.get("sinceSeconds")
        if since and since.isdigit():
            cutoff = time.time() - int(since)
            lines = [(ts, line) for ts, line in lines if ts >= cutoff]
        limit_bytes = query.get("limitBytes")
        limit = int(limit_bytes) if limit_bytes and limit_bytes.isdigit() else None

        def render(items: list[tuple[float, bytes]]) -> bytes:
            if not timestamps:
                return b"".join(line for _ts, line in items)
            return b"".join(
                time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)).encode()
                + f".{int((ts % 1) * 1e9):09d}Z ".encode()
                + line
                for ts, line in items
            )

        if not follow:
            body = render(lines)
            if limit is not None:
                body = body[:limit]
            return web.Response(body=body, content_type="text/plain")
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        try:
            await self._follow(resp, request, buffer, lines, render, limit, meta["uid"])
        except ConnectionError:
            pass  # the client stopped following
        return resp

    async def _follow(
        self,
        resp: web.StreamResponse,
        request: web.BaseRequest,
        buffer: LogBuffer,
        lines: list[tuple[float, bytes]],
        render: Any,
        limit: int | None,
        uid: str,
    ) -> None:
        await resp.prepare(request)
        sent = buffer.appended  # lines of the buffer already covered by the first answer
        first = render(lines)
        total = len(first)
        if first:
            await resp.write(first)
        while True:
            if limit is not None and total >= limit:
                break
            if buffer.appended > sent:
                fresh = min(buffer.appended - sent, len(buffer.lines))
                items = list(buffer.lines)[len(buffer.lines) - fresh :]
                sent = buffer.appended
                data = render(items)
                total += len(data)
                await resp.write(data)
                continue
            if buffer.closed or self.pods.get(uid) is None:
                break
            buffer.changed.clear()
            await buffer.changed.wait()
        await resp.write_eof()


# Docker/OCI image references: lowercase repository path, optional registry port, tag, digest.
_IMAGE_REFERENCE = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@[a-z0-9]+:[a-fA-F0-9]{32,})?$"
)


class _ContainerProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's stream protocol for a subprocess, which also sets :attr:`exited` when the process has
    exited, whether or not its pipes are still open."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


class ContainerProcess(asyncio.subprocess.Process):
    """A container's process: asyncio's :class:`~asyncio.subprocess.Process`, with :meth:`exited`.

    ``Process.wait()`` returns once the process has exited *and* each of its pipes is closed (asyncio
    wakes its waiters when the transport's connection is lost), so a child that inherited the output
    pipe keeps it waiting after the process itself has ended; :meth:`exited` does not wait for pipes.
    """

    def __init__(
        self,
        transport: asyncio.SubprocessTransport,
        protocol: _ContainerProtocol,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(transport, protocol, loop)
        self._exited = protocol.exited

    async def exited(self) -> int:
        """The exit status once the process has exited (minus the signal number if a signal ended it)."""
        await self._exited.wait()
        code = self.returncode
        assert code is not None
        return code


async def _spawn(argv: list[str], **options: Any) -> ContainerProcess:
    """Start ``argv`` as ``asyncio.create_subprocess_exec`` does (same options), as a
    :class:`ContainerProcess`."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_exec(
        lambda: _ContainerProtocol(limit=OUTPUT_READ_BYTES, loop=loop), *argv, **options
    )
    return ContainerProcess(transport, protocol, loop)


async def _read_output(stdout: asyncio.StreamReader, logs: LogBuffer) -> None:
    """Feed a container's output into its log until the end of the pipe."""
    while chunk := await stdout.read(OUTPUT_READ_BYTES):
        logs.feed(chunk)


def _missing_reference(container: dict[str, Any]) -> str | None:
    """The kubelet's message for the first Secret/ConfigMap a container needs (none exist here)."""
    for item in _dicts(container.get("env")):
        source = item.get("valueFrom")
        for key, kind in (("secretKeyRef", "secret"), ("configMapKeyRef", "configmap")):
            ref = source.get(key) if isinstance(source, dict) else None
            if isinstance(ref, dict) and not ref.get("optional"):
                return f'{kind} "{ref.get("name", "")}" not found'
    for item in _dicts(container.get("envFrom")):
        for key, kind in (("secretRef", "secret"), ("configMapRef", "configmap")):
            ref = item.get(key)
            if isinstance(ref, dict) and not ref.get("optional"):
                return f'{kind} "{ref.get("name", "")}" not found'
    return None


def start_failure(pod: dict[str, Any], container: str) -> str | None:
    """The reason container ``container`` of ``pod`` must fail to start with, from the pod's annotation
    :data:`START_FAILURE_ANNOTATION`, or None (no annotation, or it names another container).

    :raises ValueError: the annotation's value is not one of :data:`START_FAILURE_REASONS`, optionally
        followed by ``:`` and the name of one of the pod's containers (the message names the annotation,
        the value and what is expected).
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if START_FAILURE_ANNOTATION not in annotations:
        return None
    raw = str(annotations[START_FAILURE_ANNOTATION])
    reason, _, target = raw.strip().partition(":")
    reason, target = reason.strip(), target.strip()
    spec = pod.get("spec") or {}
    names = [
        str(x.get("name")) for x in [*_dicts(spec.get("initContainers")), *_dicts(spec.get("containers"))]
    ]
    if reason not in START_FAILURE_REASONS or (target and target not in names):
        raise ValueError(
            f"sandbox: annotation {START_FAILURE_ANNOTATION}={raw!r}: expected "
            f"{' or '.join(START_FAILURE_REASONS)}, optionally followed by ':' and the name of one of the "
            f"pod's containers ({', '.join(names)})"
        )
    return reason if not target or target == container else None


def _listed(value: Any) -> list[Any]:
    """A container's ``command`` or ``args`` as stored (a list, or absent)."""
    return value if isinstance(value, list) else []


def _arg(value: Any) -> str:
    """One argument: a null element of a Go ``[]string`` decodes to the empty string."""
    return "" if value is None else str(value)


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a stored list (``env``, ``envFrom``, containers), anything else skipped."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")


__all__ = ["NODE_NAME", "START_FAILURE_ANNOTATION", "Kubelet", "LogBuffer", "start_failure"]
