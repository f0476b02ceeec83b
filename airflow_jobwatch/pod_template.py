"""Whether a worker pod template file can be used, in one line naming the file and the reason.

Upstream's ``PodGenerator.deserialize_model_file`` takes a path that does not exist for YAML text (it
logs one warning): the worker pod is then built from no template at all, and fails with the API server's
``spec.containers[0].image: Required value``, or runs without what the template held. So the file is
checked where the user will read the reason: when the executor starts (``[kubernetes_executor]
pod_template_file``), when a task's ``executor_config`` names one (the task fails with the same words),
by ``airflow jobwatch generate-pod-yaml``, and by KubernetesJobOperator before it builds its Job
(``job_template_file``, ``pod_template_file``: upstream reads a missing Job template the same way).
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml


def pod_template_problem(path: str | os.PathLike[str] | None, *, kind: str = "Pod") -> str | None:
    """One line saying why the template file at ``path`` cannot be used (missing, not YAML, not a
    mapping), naming the file and, for a YAML error, its line and column; ``None`` when it can be read
    (or no file is set).

    :param kind: the object the file holds: "Pod" (a pod template) or "Job" (a Job template).
    """
    if not path:
        return None
    what = f"the {kind.lower()} template file {path}"
    try:
        text = Path(path).read_text()
    except OSError as err:
        return f"{what} cannot be read: {err.strerror or err}"
    try:
        body = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        context, start = getattr(err, "context", None), getattr(err, "context_mark", None)
        if context and start is not None:
            context = f"{context} started at line {start.line + 1}, column {start.column + 1}"
        detail = f"{problem} ({context})" if context else problem
        return f"{what}{where} is not valid YAML: {detail}"
    if not isinstance(body, dict):
        return (
            f"{what} must hold one {kind} (a YAML mapping with apiVersion, kind, metadata and spec), "
            f"got {type(body).__name__}"
        )
    return None
