"""Time and memory of reading a large XCom result from a pod's native XCom sidecar, on the sandbox.

    .venv/bin/python bench/bench_xcom_result.py [--sizes 1 10]

For each size (MiB of JSON: a list of small records), one pod runs the base container that writes
the result and the XCom sidecar exactly as KubernetesJobOperator builds it; once the pod has succeeded,
each reader runs in a fresh Python process (so its peak RSS is its own) and reports the wall time of
the read and parse, and how much its peak RSS grew over what it held before the read:

* ``worker (streamed)``: what a worker does (``kubernetes`` client, ``read_result_sync``), decoded
  chunk by chunk as the body arrives, then ``json.loads``;
* ``triggerer (streamed)``: what the triggerer does (``kubernetes_asyncio``, ``read_result``);
* ``whole log, then decode``: the same log read whole first (``_preload_content``), then decoded: what
  a reader that does not stream would hold.

Upstream's KubernetesPodOperator reads the file through ``pods/exec`` (a websocket running ``cat``),
which the sandbox does not serve, so it has no row here; its termination-message path cannot return
more than 4096 bytes at all.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READER = r"""
import asyncio, json, resource, sys, time
variant, kubeconfig, pod, resultfile = sys.argv[1:5]
from airflow_jobwatch.kube.meaning import xcom_sidecar

def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

LIMIT = xcom_sidecar.MAX_RESULT_BYTES
if variant == "triggerer (streamed)":
    from kubernetes_asyncio import client as aclient, config as aconfig
    async def main():
        cfg = aclient.Configuration()
        await aconfig.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        async with aclient.ApiClient(cfg) as api:
            core = aclient.CoreV1Api(api)
            await core.list_namespaced_pod("default", limit=1)  # connection and imports warm
            before = rss_mb(); t0 = time.perf_counter()
            data = await xcom_sidecar.read_result(core, pod, "default", limit=LIMIT)
            value = json.loads(data); del data
            return before, time.perf_counter() - t0, value
    before, seconds, value = asyncio.run(main())
else:
    from kubernetes import client, config
    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    core.list_namespaced_pod("default", limit=1)
    before = rss_mb(); t0 = time.perf_counter()
    if variant == "worker (streamed)":
        data = xcom_sidecar.read_result_sync(core, pod, "default", limit=LIMIT)
    else:
        whole = core.read_namespaced_pod_log(pod, "default", container=xcom_sidecar.SIDECAR_NAME, _preload_content=False).data
        data = xcom_sidecar.decode_log([whole], limit=LIMIT)
    value = json.loads(data); del data
    seconds = time.perf_counter() - t0
after = rss_mb()
with open(resultfile, "w") as out:
    json.dump({"variant": variant, "seconds": seconds, "rss_before_mb": before, "rss_peak_mb": after, "items": len(value)}, out)
"""

VARIANTS = ("worker (streamed)", "triggerer (streamed)", "whole log, then decode")


def _pod(name: str, mib: int) -> dict:
    from airflow_jobwatch.kube.meaning import xcom_sidecar

    rows = mib * 1024 * 1024 // 60 + 1  # each record is ~60 bytes of JSON
    writer = (
        "import json, sys; json.dump([{'id': i, 'name': 'row-%08d' % i, 'hex': format(i * 2654435761 % 2**32, '08x')} "
        f"for i in range({rows})], open('/airflow/xcom/return.json', 'w'))"
    )
    mount = {"name": xcom_sidecar.VOLUME_NAME, "mountPath": "/airflow/xcom"}
    sidecar = {
        "name": xcom_sidecar.SIDECAR_NAME,
        "image": xcom_sidecar.DEFAULT_IMAGE,
        "restartPolicy": "Always",
        "command": xcom_sidecar.sidecar_command("/airflow/xcom/return.json"),
        "volumeMounts": [mount],
    }
    base = {
        "name": "base",
        "image": "python:3.12-slim",
        "command": ["python", "-c", writer],
        "volumeMounts": [mount],
    }
    spec = {
        "restartPolicy": "Never",
        "volumes": [{"name": xcom_sidecar.VOLUME_NAME, "emptyDir": {}}],
        "initContainers": [sidecar],
        "containers": [base],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10], help="result sizes in MiB")
    parser.add_argument("--quick", action="store_true", help="1 MiB only (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.sizes = [1]
    from kubernetes import client, config

    from airflow_jobwatch.kube.meaning import xcom_sidecar
    from airflow_jobwatch_testing.sandbox.process import SandboxProcess

    workdir = Path(tempfile.mkdtemp(prefix="bench-xcom-"))
    rows = []
    with SandboxProcess(workdir / "kubeconfig", log=workdir / "sandbox.log") as sandbox:
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(sandbox.kubeconfig)))
        for mib in args.sizes:
            name = f"result-{mib}mib"
            core.create_namespaced_pod("default", _pod(name, mib))
            deadline = time.monotonic() + 300
            while core.read_namespaced_pod(name, "default").status.phase not in ("Succeeded", "Failed"):
                if time.monotonic() > deadline:
                    raise SystemExit(f"pod {name} did not end")
                time.sleep(0.2)
            log = core.read_namespaced_pod_log(
                name, "default", container=xcom_sidecar.SIDECAR_NAME, _preload_content=False
            ).data
            for variant in VARIANTS:
                resultfile = workdir / "result.json"
                argv = [sys.executable, "-c", READER, variant, str(sandbox.kubeconfig), name, str(resultfile)]
                reader = subprocess.run(argv, capture_output=True, text=True, timeout=600)
                if reader.returncode:
                    raise SystemExit(f"{variant} failed: {reader.stderr[-3000:]}")
                row = json.loads(resultfile.read_text())
                row.update(mib=mib, log_mib=len(log) / 1024 / 1024)
                rows.append(row)
    header = ("result", "sidecar log", "reader", "seconds", "RSS growth", "peak RSS")
    print("{:>7} {:>11}  {:24} {:>8} {:>11} {:>9}".format(*header))
    for r in rows:
        growth = r["rss_peak_mb"] - r["rss_before_mb"]
        cells = (
            f"{r['mib']}Mi",
            f"{r['log_mib']:.2f}Mi",
            r["variant"],
            f"{r['seconds']:.3f}",
            f"{growth:.1f}MB",
        )
        print("{:>7} {:>11}  {:24} {:>8} {:>11} {:>7.0f}MB".format(*cells, r["rss_peak_mb"]))
    _write_fragment(rows)


def _write_fragment(rows: list[dict]) -> None:
    """docs/benchmarks/xcom_result.md: its table replaced by these rows, its text kept."""
    path = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "xcom_result.md"
    text = path.read_text()
    start, end = text.find("| result |"), text.find("\n\nWhat the figures say")
    if start < 0 or end < 0:
        print(f"not written: {path} has no table to replace", file=sys.stderr)
        return
    lines = [
        "| result | sidecar log (gzip + base64) | reader | seconds | RSS growth | peak RSS |",
        "|--------|-----------------------------|--------|---------|------------|----------|",
    ]
    for r in rows:
        growth = r["rss_peak_mb"] - r["rss_before_mb"]
        lines.append(
            f"| {r['mib']} MiB | {r['log_mib']:.2f} MiB | {r['variant']} | {r['seconds']:.2f} | "
            f"{growth:.1f} MB | {r['rss_peak_mb']:.0f} MB |"
        )
    path.write_text(text[:start] + "\n".join(lines) + text[end:])
    print(f"wrote {path}")


if __name__ == "__main__":
    t0 = time.monotonic()
    main()
    print(f"total {time.monotonic() - t0:.0f} s")
