"""kube/cluster/kubeconfig.py parses each kubeconfig file once while it is unchanged, and again once it changes.

Thousands of JobTriggers in one triggerer each name their shared watch from the kubeconfig; the cache
must never hide a rewritten or replaced file (credential rotation, a context switched by an operator).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_jobwatch.kube.cluster import kubeconfig
from airflow_jobwatch.kube.cluster.client import ClusterConfig

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "{server}"}}
users:
- name: u
  user: {{token: not-a-real-token}}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
"""


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = kubeconfig._parse_kubeconfig_file

    def counting(path: str):  # type: ignore[no-untyped-def]
        seen.append(path)
        return real(path)

    monkeypatch.setattr(kubeconfig, "_parse_kubeconfig_file", counting)
    monkeypatch.setattr(kubeconfig, "_PARSED_KUBECONFIGS", {})
    return seen


def test_unchanged_file_is_parsed_once(tmp_path: Path, parses: list[str]) -> None:
    path = tmp_path / "config"
    path.write_text(KUBECONFIG.format(server="https://10.0.0.1:6443"))
    cfg = ClusterConfig(config_file=str(path))
    identities = {cfg.identity() for _ in range(50)}
    assert identities == {"server=https://10.0.0.1:6443 context=x user=u"}
    assert parses == [str(path)]


def test_rewritten_file_is_read_again(tmp_path: Path, parses: list[str]) -> None:
    path = tmp_path / "config"
    path.write_text(KUBECONFIG.format(server="https://10.0.0.1:6443"))
    cfg = ClusterConfig(config_file=str(path))
    assert "10.0.0.1" in cfg.identity()
    # Same size, same mtime second: only the nanosecond mtime (or the inode, for a replaced file) differs.
    path.write_text(KUBECONFIG.format(server="https://10.0.0.2:6443"))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert "10.0.0.2" in cfg.identity()
    replacement = tmp_path / "config.new"
    replacement.write_text(KUBECONFIG.format(server="https://10.0.0.3:6443"))
    os.replace(replacement, path)
    assert "10.0.0.3" in cfg.identity()
    assert len(parses) == 3


def test_a_file_that_disappears_is_an_error_not_a_cached_answer(tmp_path: Path, parses: list[str]) -> None:
    path = tmp_path / "config"
    path.write_text(KUBECONFIG.format(server="https://10.0.0.1:6443"))
    cfg = ClusterConfig(config_file=str(path))
    cfg.identity()
    path.unlink()
    with pytest.raises(kubeconfig.ClusterConfigError, match="config"):
        cfg.identity()
