"""A shared watch is shared only between triggers with the same credential.

The sandbox's kubeconfigs all use the same cluster, context and user *names* ("sandbox"); only the
token differs, as with EKS ``update-kubeconfig --role-arn`` or generated kubeconfigs. Before the fix
the watch was keyed by those names, so a trigger joined whichever watch a trigger of another
credential had opened: it saw Jobs its own token may not read, or inherited an expired token.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from airflow_jobwatch.kube.cluster.client import ClusterConfig, async_api_client
from airflow_jobwatch.triggers.job import JobTrigger
from airflow_jobwatch.triggers.registry import get_registry

from .conftest import NS, create_job, job_manifest, wait_until

ALICE = "system:serviceaccount:default:alice"  # may read Jobs and pods
BOB = "system:serviceaccount:default:bob"  # may read pods, not Jobs


def _token_of(kubeconfig: Path) -> str:
    import yaml

    return str(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])


async def _admin(sandbox: Any, tmp_path: Path) -> Any:
    path = tmp_path / "admin-kubeconfig"
    sandbox.write_kubeconfig(path)
    return await async_api_client(ClusterConfig(config_file=str(path)))


async def _finished_job(admin: Any, sandbox: Any, name: str) -> dict[str, Any]:
    job = await create_job(admin, job_manifest(name, ["sh", "-c", "exit 0"]))

    def complete() -> bool:
        conditions = ((sandbox.get_object("jobs", NS, name) or {}).get("status") or {}).get("conditions")
        return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions or [])

    await wait_until(complete, what=f"Job {name} to complete")
    return job


async def test_same_names_other_token_gets_its_own_watch_and_its_own_refusal(
    sandbox: Any, rbac: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """(a) Alice's trigger waits in the namespace; Bob (no permission on Jobs, same kubeconfig names)
    waits for a Job that has already succeeded. Bob ends Forbidden, as he does alone: he never reads
    through Alice's watch."""
    caplog.set_level(logging.DEBUG)
    rbac.grant(ALICE, verbs=["get", "list", "watch"], resources=["jobs", "pods"], namespace=NS)
    rbac.grant(BOB, verbs=["get", "list", "watch"], resources=["pods"], namespace=NS)
    alice_kc, bob_kc = rbac.kubeconfig(ALICE), rbac.kubeconfig(BOB)
    assert (
        ClusterConfig(config_file=str(alice_kc)).identity()
        == ClusterConfig(config_file=str(bob_kc)).identity()
    )  # the names are the same: only the credential tells them apart
    admin = await _admin(sandbox, tmp_path)
    try:
        running = await create_job(admin, job_manifest("alice-running", ["sh", "-c", "sleep 600"]))
        done = await _finished_job(admin, sandbox, "secret-done")
        alice = JobTrigger(
            "alice-running",
            NS,
            config_file=str(alice_kc),
            job_uid=running["metadata"]["uid"],
            poll_interval=1.0,
        )
        alice_wait = asyncio.ensure_future(alice.wait())
        registry = get_registry()
        await wait_until(lambda: any(k.namespace == NS for k in registry.active()), what="Alice's watch")
        [alice_watch] = [registry._watches[k] for k in registry.active()]
        assert await alice_watch.wait_synced(20)

        bob = JobTrigger(
            "secret-done",
            NS,
            config_file=str(bob_kc),
            job_uid=done["metadata"]["uid"],
            poll_interval=1.0,
            api_failure_tolerance=300,  # far away: the 403 must end the wait by itself
        )
        payload = await asyncio.wait_for(bob.wait(), 30)
        assert payload["status"] == "error" and payload["reason"] == "Forbidden", payload
        assert payload["job"] is None and payload["pod_names"] == []  # nothing of the Job leaked
        assert "list jobs" in payload["message"] or "watch jobs" in payload["message"]
        assert not alice_wait.done()  # Alice still waits, on her own watch
        alice_wait.cancel()
        with pytest.raises(asyncio.CancelledError):
            await alice_wait
    finally:
        await admin.close()
        await get_registry().close()
    for token in (_token_of(alice_kc), _token_of(bob_kc)):
        assert token not in caplog.text  # neither the digest's input nor anything else shows a token


async def test_expired_token_watch_does_not_serve_a_valid_token(
    sandbox: Any, rbac: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(b) The first trigger's token has expired: it ends Unauthorized. A second trigger of the same
    user, same kubeconfig names, with a valid token, then waits for a finished Job: it succeeds (before
    the fix it joined the first one's lingering watch, whose reload re-read the expired kubeconfig)."""
    monkeypatch.setenv("AIRFLOW__JOBWATCH__NAMESPACE_WATCH_LINGER_SECONDS", "60")
    rbac.grant(ALICE, verbs=["get", "list", "watch"], resources=["jobs", "pods"], namespace=NS)
    expired_kc = rbac.kubeconfig(ALICE)
    sandbox.expire_token(_token_of(expired_kc))
    admin = await _admin(sandbox, tmp_path)
    try:
        done = await _finished_job(admin, sandbox, "done")
        first = JobTrigger(
            "done", NS, config_file=str(expired_kc), job_uid=done["metadata"]["uid"], poll_interval=1.0
        )
        payload = await asyncio.wait_for(first.wait(), 30)
        assert payload["status"] == "error" and payload["reason"] == "Unauthorized", payload

        valid_kc = rbac.kubeconfig(ALICE)
        second = JobTrigger(
            "done", NS, config_file=str(valid_kc), job_uid=done["metadata"]["uid"], poll_interval=1.0
        )
        payload = await asyncio.wait_for(second.wait(), 30)
        assert payload["status"] == "success", payload
    finally:
        await admin.close()
        await get_registry().close()


async def test_same_credential_still_shares_one_watch(sandbox: Any, rbac: Any, tmp_path: Path) -> None:
    """Two triggers of one kubeconfig share one watch (the point of the registry), and a copy of that
    kubeconfig under another path is another credential source: its own watch."""
    rbac.grant(ALICE, verbs=["get", "list", "watch"], resources=["jobs", "pods"], namespace=NS)
    kc = rbac.kubeconfig(ALICE)
    copy = tmp_path / "copy-kubeconfig"
    copy.write_text(kc.read_text())
    admin = await _admin(sandbox, tmp_path)
    try:
        uids = {}
        for name in ("a", "b", "c"):
            uids[name] = (await create_job(admin, job_manifest(name, ["sh", "-c", "sleep 600"])))["metadata"][
                "uid"
            ]
        waits = [
            asyncio.ensure_future(JobTrigger(n, NS, config_file=str(p), job_uid=uids[n]).wait())
            for n, p in (("a", kc), ("b", kc), ("c", copy))
        ]
        registry = get_registry()
        await wait_until(lambda: sum(registry.active().values()) == 3, what="three subscriptions")
        assert sorted(registry.active().values()) == [1, 2]
        from airflow_jobwatch import metrics

        assert metrics.triggerer_status()["shared_watches"] == 2  # two watches in one namespace
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
    finally:
        await admin.close()
        await get_registry().close()


async def test_inline_exec_kubeconfigs_differing_only_in_the_role_get_their_own_watches(
    sandbox: Any, rbac: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EKS ``update-kubeconfig --role-arn``: the same names, the same command, one argument apart. Two
    connections with such inline ``kube_config`` extras: the one whose role may not read Jobs ends
    Forbidden while the other's trigger waits in the namespace."""
    import json

    import yaml

    rbac.grant(ALICE, verbs=["get", "list", "watch"], resources=["jobs", "pods"], namespace=NS)
    rbac.grant(BOB, verbs=["get", "list", "watch"], resources=["pods"], namespace=NS)
    key_file = tmp_path / "signing-key"
    texts = {}
    for who, user in (("alice", ALICE), ("bob", BOB)):
        path = tmp_path / f"exec-{who}"
        sandbox.write_exec_kubeconfig(path, user=user, key_file=key_file)
        texts[who] = path.read_text()
        monkeypatch.setenv(
            f"AIRFLOW_CONN_K8S_{who.upper()}",
            json.dumps({"conn_type": "kubernetes", "extra": {"kube_config": texts[who]}}),
        )
    alice_user, bob_user = (yaml.safe_load(texts[w])["users"][0] for w in ("alice", "bob"))
    assert alice_user["name"] == bob_user["name"]  # the same names; the exec args differ in --user only
    assert [a for a in alice_user["user"]["exec"]["args"] if a not in bob_user["user"]["exec"]["args"]] == [
        ALICE
    ]
    admin = await _admin(sandbox, tmp_path)
    try:
        running = await create_job(admin, job_manifest("alice-running", ["sh", "-c", "sleep 600"]))
        done = await _finished_job(admin, sandbox, "secret-done")
        alice_wait = asyncio.ensure_future(
            JobTrigger(
                "alice-running", NS, kubernetes_conn_id="k8s_alice", job_uid=running["metadata"]["uid"]
            ).wait()
        )
        registry = get_registry()
        await wait_until(lambda: bool(registry.active()), what="Alice's watch")
        [alice_watch] = [registry._watches[k] for k in registry.active()]
        assert await alice_watch.wait_synced(30)
        bob = JobTrigger(
            "secret-done",
            NS,
            kubernetes_conn_id="k8s_bob",
            job_uid=done["metadata"]["uid"],
            poll_interval=1.0,
            api_failure_tolerance=300,
        )
        payload = await asyncio.wait_for(bob.wait(), 60)
        assert payload["status"] == "error" and payload["reason"] == "Forbidden", payload
        assert not alice_wait.done()
        alice_wait.cancel()
        await asyncio.gather(alice_wait, return_exceptions=True)
    finally:
        await admin.close()
        await get_registry().close()
