"""The module paths kept for what still names them after a move: each warns once and gives the new objects.

(old-module-paths: on purpose: this file names the deprecated paths it tests.)
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import subprocess
import sys
import warnings

import pytest

from airflow_jobwatch.kube.cluster import client as new_client
from airflow_jobwatch.kube.cluster import credhelper as new_credhelper

#: Deprecated path -> the module it now lives in.
DEPRECATED = {
    "airflow_jobwatch.kube.client": new_client,
    "airflow_jobwatch.kube.credhelper": new_credhelper,
}


@pytest.mark.parametrize("old", sorted(DEPRECATED))
def test_an_old_path_warns_once_and_gives_the_new_objects(old, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated: import {DEPRECATED[old].__name__}"):
        module = importlib.import_module(old)
    new = DEPRECATED[old]
    for name in ("main", "export") if new is new_credhelper else ("ClusterConfig", "ClusterConfigError"):
        assert getattr(module, name) is getattr(new, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module(old) is module  # imported again: no second warning


def test_the_old_credential_helper_answers_a_scheduler_started_before_the_move(tmp_path):
    """A scheduler started before an in-place upgrade runs ``python -m airflow_jobwatch.kube.credhelper`` and
    pickles its ClusterConfig under the old module name: the helper still answers, with nothing on stderr
    (the parent reads stderr as the helper's error message)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    cfg = new_client.ClusterConfig(config_file=str(kubeconfig))
    # Protocol 0 names a class as "module\nname\n", so the old module name can be put in its place.
    as_before = pickle.dumps((list(sys.path), cfg), protocol=0).replace(
        b"airflow_jobwatch.kube.cluster.client\n", b"airflow_jobwatch.kube.client\n"
    )
    assert b"airflow_jobwatch.kube.client\n" in as_before
    done = subprocess.run(
        [sys.executable, "-m", "airflow_jobwatch.kube.credhelper", str(os.getpid())],
        input=as_before,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr.decode()) == (0, "")
    answer = json.loads(done.stdout)
    assert answer["host"] == "https://127.0.0.1:1"
