"""Worker pod bodies at launch rate: the provider's full build, made once per pod shape.

A full build (:func:`~airflow_jobwatch.executors.pods.build_worker_pod`, i.e. the provider's
``PodGenerator.construct_pod``, then serialization) costs 10-16 ms of CPU per pod, most of it the kubernetes
client's model objects each copying their client configuration. That cost is what bounds how many pods one
scheduler can launch per second. The tasks of a deployment mostly share the *shape* of their pod (the same
template, ``pod_override``, image and namespace) and differ only in the values ``construct_pod`` writes per
task: the pod name, the ``dag_id`` / ``task_id`` / ``run_id`` / ``try_number`` / ``map_index`` annotations and
labels, the command's args, and the launch id.

The rules this module keeps:

* A body it returns equals, value for value, the body of a full build of the same task.
* A shape is two full builds with different marker values in place of the per-task values; the places where
  the two differ are the per-task places, and each must hold exactly one marker (else the shape is not used).
  A task's body is a copy of the shape with its own values written at those places (label values made
  label-safe as the provider makes them; the args marker replaced by the task's args).
* A shape is made when the second task of that shape comes (a task whose shape is its own costs one full
  build, as before), and is checked against the first task's full build; a shape that does not reproduce it
  is never used, and those tasks keep getting full builds.
* With a ``pod_mutation_hook`` installed, every pod gets a full build: the hook sees each task's own pod.
* A pod name longer than the provider's limit gets a full build (``construct_pod`` shortens it).
* A pod template file edited while the scheduler runs is used for the pods launched from one second after
  the edit (a template's modification time is looked up at most once a second).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import POD_NAME_MAX_LENGTH
from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator, make_safe_label_value

from airflow_jobwatch.compat import policy_plugin_manager
from airflow_jobwatch.executors.pods import UPSTREAM_LABELS, LabelScheme, TaskValues, construct_worker_pod

if TYPE_CHECKING:
    from airflow.executors.workloads import ExecuteTask
    from airflow.providers.cncf.kubernetes.kube_config import KubeConfig

log = logging.getLogger(__name__)

Path = tuple[Any, ...]  # keys and list indexes from the body's root to one value
_ARGS = "args"
# Shapes kept, and first tasks of shapes not made yet (least recently used dropped first).
_MAX_SHAPES = 1024
_MAX_FIRST_SEEN = 256
# How long a pod template file's mtime is trusted before it is looked up again.
_TEMPLATE_RECHECK_S = 1.0


def pod_mutation_hook_installed() -> bool:
    """Whether a ``pod_mutation_hook`` is installed: a policy implementing it (``airflow_local_settings``
    or an ``airflow.policy`` plugin, as Airflow itself tells a no-op mutation hook), or Airflow's own
    ``settings.pod_mutation_hook`` replaced by another function."""
    try:
        from airflow import settings

        hook = settings.pod_mutation_hook
        if getattr(hook, "__module__", None) != "airflow.settings":
            return True
        return bool(policy_plugin_manager().hook.pod_mutation_hook.get_hookimpls())
    except Exception:  # an Airflow without the policy manager: assume a hook, so every pod is built in full
        return True


@dataclass
class _Shape:
    body: dict[str, Any]  # a full build's body with the first marker set's values
    places: list[tuple[Path, str, bool]]  # (where, which per-task field, under metadata.labels)


_UNUSABLE = object()  # a shape that did not reproduce a full build: always build those in full


class WorkerPodBuilder:
    """Builds the create body of each worker pod of one executor; see the module docstring.

    ``serialize`` is the API client's ``sanitize_for_serialization``. Safe to call from several threads.
    """

    def __init__(
        self,
        *,
        kube_config: KubeConfig,
        scheduler_job_id: str,
        labels: LabelScheme | None,
        serialize: Callable[[Any], Any],
    ) -> None:
        self._kube_config = kube_config
        self._scheduler_job_id = scheduler_job_id
        self._labels = labels or UPSTREAM_LABELS
        self._serialize = serialize
        self._lock = threading.Lock()
        self._shapes: OrderedDict[tuple[Any, ...], _Shape | object] = OrderedDict()
        self._first_seen: OrderedDict[tuple[Any, ...], tuple[TaskValues, dict[str, Any]]] = OrderedDict()
        self._template_versions: dict[str, tuple[float, int | None]] = {}  # path -> (checked at, mtime)
        self.full_builds = 0  # how many bodies were full builds (for tests and the benchmark)
        self.shaped_builds = 0

    def ready_body(self, workload: ExecuteTask, *, pod_name: str, launch_id: str) -> dict[str, Any] | None:
        """The body from this workload's shape if that shape is already made (a copy with the task's values:
        a fraction of a millisecond), else None, and then :meth:`body` must build it (up to tens of
        milliseconds). Never raises: on bad input it returns None, and :meth:`body` raises the error."""
        try:
            _, values, key = self._lookup(workload, pod_name, launch_id)
            if key is None:
                return None
            with self._lock:
                shape = self._shapes.get(key)
                if not isinstance(shape, _Shape):
                    return None
                self._shapes.move_to_end(key)
            body = _fill(shape, values)
        except Exception:
            return None
        self.shaped_builds += 1
        return body

    def body(self, workload: ExecuteTask, *, pod_name: str, launch_id: str) -> dict[str, Any]:
        """The create body of ``workload``'s pod. Raises as :func:`build_worker_pod` does on bad input."""
        executor_config, values, key = self._lookup(workload, pod_name, launch_id)
        if key is None:
            return self._full(executor_config, values)
        with self._lock:
            shape = self._shapes.get(key)
            if shape is not None:
                self._shapes.move_to_end(key)
            first = None if shape is not None else self._first_seen.pop(key, None)
        if isinstance(shape, _Shape):
            self.shaped_builds += 1
            return _fill(shape, values)
        if shape is not None:  # unusable
            return self._full(executor_config, values)
        if first is None:
            body = self._full(executor_config, values)
            with self._lock:
                self._first_seen[key] = (values, body)
                while len(self._first_seen) > _MAX_FIRST_SEEN:
                    self._first_seen.popitem(last=False)
            return body
        try:
            made = self._make_shape(executor_config, values, first)
        except Exception:  # a task whose full build works never fails for want of a shape
            log.warning("worker pods of this shape are built in full: making the shape failed", exc_info=True)
            made = _UNUSABLE
        with self._lock:
            self._shapes[key] = made
            while len(self._shapes) > _MAX_SHAPES:
                self._shapes.popitem(last=False)
        if isinstance(made, _Shape):
            self.shaped_builds += 1
            return _fill(made, values)
        return self._full(executor_config, values)

    def _lookup(
        self, workload: ExecuteTask, pod_name: str, launch_id: str
    ) -> tuple[dict[str, Any], TaskValues, tuple[Any, ...] | None]:
        """The task's executor_config and values, and its shape's key (None: build this pod in full)."""
        executor_config: dict[str, Any] = workload.ti.executor_config or {}
        values = TaskValues.of(workload, pod_name=pod_name, launch_id=launch_id)
        if len(pod_name) > POD_NAME_MAX_LENGTH or pod_mutation_hook_installed():
            return executor_config, values, None
        return executor_config, values, self._shape_key(executor_config, values)

    def _full(self, executor_config: dict[str, Any], values: TaskValues) -> dict[str, Any]:
        self.full_builds += 1
        pod = construct_worker_pod(
            values,
            executor_config=executor_config,
            kube_config=self._kube_config,
            scheduler_job_id=self._scheduler_job_id,
            labels=self._labels,
        )
        body: dict[str, Any] = self._serialize(pod)
        return body

    def _shape_key(self, executor_config: dict[str, Any], values: TaskValues) -> tuple[Any, ...] | None:
        """What decides a pod's shape besides the per-task values; None if it cannot be told (full build)."""
        template = executor_config.get("pod_template_file") or self._kube_config.pod_template_file
        if not template:
            return None  # the full build raises the error that names the missing setting
        mtime = self._template_version(str(template))
        if mtime is None:
            return None
        override = PodGenerator.from_obj(executor_config)
        try:
            override_key = json.dumps(self._serialize(override), sort_keys=True) if override else ""
        except (TypeError, ValueError):
            return None
        return (str(template), mtime, override_key, values.map_index >= 0, bool(values.run_id))

    def _template_version(self, path: str) -> int | None:
        """The template file's mtime (None if it cannot be read), looked up at most once per
        ``_TEMPLATE_RECHECK_S`` per file: a stat per pod made the scheduler thread wait for the GIL behind
        the API threads on every launch of a burst."""
        now = time.monotonic()
        with self._lock:
            seen = self._template_versions.get(path)
        if seen is not None and now - seen[0] < _TEMPLATE_RECHECK_S:
            return seen[1]
        try:
            mtime: int | None = os.stat(path).st_mtime_ns
        except OSError:
            mtime = None
        with self._lock:
            self._template_versions[path] = (now, mtime)
            if len(self._template_versions) > _MAX_SHAPES:
                self._template_versions.pop(next(iter(self._template_versions)))
        return mtime

    def _make_shape(
        self, executor_config: dict[str, Any], values: TaskValues, first: tuple[TaskValues, dict[str, Any]]
    ) -> _Shape | object:
        """Two full builds with marker values, compared; checked against the first task's full build."""
        one, two = _markers(values), _markers(values)
        body_one, body_two = self._full(executor_config, one), self._full(executor_config, two)
        places: list[tuple[Path, str, bool]] = []
        if not _differences(body_one, body_two, (), one.by_marker(), places):
            log.info("worker pods of this shape are built in full: the per-task values are not plain copies")
            return _UNUSABLE
        shape = _Shape(body=body_one, places=places)
        first_values, first_body = first
        if _fill(shape, first_values) != first_body:
            log.warning(
                "worker pods of the shape of %s.%s are built in full: a shaped build did not reproduce the "
                "provider's build",
                first_values.dag_id,
                first_values.task_id,
            )
            return _UNUSABLE
        return shape


def _markers(like: TaskValues) -> TaskValues:
    """Per-task values no template or override can hold: label-safe and DNS-safe, ints where ints are needed."""
    token = secrets.token_hex(6)
    # >= 0 (so a mapped shape stays mapped), and never a real small number
    number = int(token[:6], 16) + 1_000_000
    return TaskValues(
        pod_name=f"jwmark{token}name",
        dag_id=f"jwmark{token}dag",
        task_id=f"jwmark{token}task",
        run_id=f"jwmark{token}run" if like.run_id else like.run_id,
        try_number=number + 1,
        map_index=number + 2 if like.map_index >= 0 else like.map_index,
        args=[f"jwmark{token}args"],
        launch_id=f"jwmark{token}launch",
    )


def _differences(
    one: Any, two: Any, path: Path, by_marker: dict[str, str], out: list[tuple[Path, str, bool]]
) -> bool:
    """Append to ``out`` every place where ``one`` and ``two`` differ; False if a difference is not a marker
    of ``one`` (the provider derived something else from a per-task value) or the structures differ."""
    if isinstance(one, dict):
        if not isinstance(two, dict) or one.keys() != two.keys():
            return False
        return all(_differences(one[k], two[k], (*path, k), by_marker, out) for k in one)
    if isinstance(one, list):
        if not isinstance(two, list) or len(one) != len(two):
            return False
        return all(
            _differences(a, b, (*path, i), by_marker, out)
            for i, (a, b) in enumerate(zip(one, two, strict=True))
        )
    if one == two:
        return True
    field = by_marker.get(one) if isinstance(one, str) else None
    if field is None:
        return False
    out.append((path, field, path[:2] == ("metadata", "labels")))
    return True


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _fill(shape: _Shape, values: TaskValues) -> dict[str, Any]:
    body: dict[str, Any] = _copy(shape.body)
    splices: list[tuple[list[Any], int]] = []
    for path, field, label in shape.places:
        parent: Any = body
        for step in path[:-1]:
            parent = parent[step]
        if field == _ARGS:
            splices.append((parent, path[-1]))
            continue
        text = values.text(field)
        parent[path[-1]] = make_safe_label_value(text) if label else text
    # Later positions first, so that an earlier splice does not move a later one.
    for parent, index in sorted(splices, key=lambda s: s[1], reverse=True):
        parent[index : index + 1] = list(values.args)
    return body
