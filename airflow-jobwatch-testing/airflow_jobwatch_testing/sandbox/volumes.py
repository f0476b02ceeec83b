"""Per-pod volumes for the sandbox's kubelet.

The sandbox runs container commands as host processes, so a container path has to become a host
path. The rule:

* every ``emptyDir`` volume a container mounts, and the folder of its ``terminationMessagePath``
  (which the real kubelet bind-mounts, creating the folder; the operator's XCom file
  ``/airflow/xcom/return.json`` is one), maps to a folder of that pod under the sandbox's own
  temporary folder (``<root>/<pod uid>/<volume name>``; the termination folder is per container);
* the mapping reaches the process by rewriting every occurrence of a mapped container path, as a
  whole path prefix, in the container's ``command``, ``args``, ``env`` values and ``workingDir``;
* the folders are the sandbox user's own (no root needed), removed with the pod and with the sandbox.

Limits: a path the process builds at run time (``d=/airflow; echo > $d/xcom/x``) or reads from a file
is not rewritten; other volume types (``hostPath``, ``configMap``, ``secret``, PVCs) are not mapped.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

__all__ = ["VolumeRoot", "host_path", "rewrite"]

DEFAULT_TERMINATION_PATH = "/dev/termination-log"


class VolumeRoot:
    """The sandbox's folder of pod volumes, created on first use and removed by :meth:`close`."""

    def __init__(self) -> None:
        self._root: str | None = None

    def _base(self) -> str:
        if self._root is None:
            self._root = tempfile.mkdtemp(prefix="jobwatch-sandbox-volumes-")
        return self._root

    def mounts(self, uid: str, pod_spec: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
        """Container path -> host folder for one container of the pod ``uid``; creates the folders."""
        empty_dirs = {
            str(v.get("name")): v
            for v in pod_spec.get("volumes") or []
            if isinstance(v, dict) and "emptyDir" in v
        }
        pod_dir = os.path.join(self._base(), _safe(uid))
        mapping: dict[str, str] = {}
        for m in container.get("volumeMounts") or []:
            if not isinstance(m, dict) or m.get("name") not in empty_dirs:
                continue
            path = _norm(m.get("mountPath"))
            if path:
                mapping[path] = os.path.join(pod_dir, "volumes", _safe(str(m["name"])))
        term = container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH
        folder = _norm(posixpath.dirname(str(term)))
        if term != DEFAULT_TERMINATION_PATH and folder and not _covered(folder, mapping):
            mapping[folder] = os.path.join(pod_dir, "termination", _safe(str(container.get("name", ""))))
        for host in mapping.values():
            os.makedirs(host, mode=0o700, exist_ok=True)
        return mapping

    def remove(self, uid: str) -> None:
        """Remove one pod's folders (its emptyDir volumes end with the pod)."""
        if self._root is not None:
            shutil.rmtree(os.path.join(self._root, _safe(uid)), ignore_errors=True)

    def close(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


def rewrite(text: str, mapping: Mapping[str, str]) -> str:
    """``text`` with each mapped container path replaced by its host folder, where the path stands as a
    whole prefix: preceded by nothing or a non-path character, followed by ``/``, end or a non-path
    character (so ``/airflow/xcom`` is rewritten in ``/airflow/xcom/return.json`` but not in
    ``/airflow/xcomfoo``)."""
    if not mapping or not text:
        return text
    # longest first, so that /a/b wins over /a
    paths = sorted(mapping, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(p) for p in paths) + r")(?![\w.-])")
    return pattern.sub(lambda m: mapping[m.group(1)], text)


def host_path(path: str, mapping: Mapping[str, str]) -> str:
    """The host path of a container path (unchanged when no mapped folder holds it)."""
    for prefix in sorted(mapping, key=len, reverse=True):
        if path == prefix or path.startswith(prefix + "/"):
            return mapping[prefix] + path[len(prefix) :]
    return path


def _norm(path: Any) -> str:
    if not isinstance(path, str) or not path.startswith("/"):
        return ""
    out = posixpath.normpath(path)
    return "" if out == "/" else out


def _covered(path: str, mapping: Mapping[str, str]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in mapping)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"
