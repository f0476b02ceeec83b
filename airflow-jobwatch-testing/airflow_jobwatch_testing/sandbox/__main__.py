"""``python -m airflow_jobwatch_testing.sandbox --port PORT --kubeconfig PATH [...]``

Runs the sandbox on 127.0.0.1, writes the kubeconfig once it listens, prints exactly one line
``ready <url>`` to stdout, and stops cleanly (killing its pod processes) on SIGINT or SIGTERM.
Faults are switched at run time through ``/_sandbox/fault`` (see :class:`~.admin.AdminClient`).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from .sandbox import Sandbox


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m airflow_jobwatch_testing.sandbox", description=__doc__.split("\n\n")[1]
    )
    p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = any free port)")
    p.add_argument("--kubeconfig", required=True, help="where to write the kubeconfig (mode 0600)")
    p.add_argument("--history-window", type=int, default=10000, help="changes kept for watch replay")
    p.add_argument(
        "--bookmark-interval", type=float, default=5.0, help="seconds between BOOKMARKs (0 = never)"
    )
    p.add_argument("--pod-start-delay", type=float, default=0.0, help="seconds a pod stays Pending")
    p.add_argument(
        "--pod-creation-rate",
        type=float,
        default=None,
        metavar="PODS_PER_SECOND",
        help="the Job controller creates at most this many pods per second (default: at once)",
    )
    p.add_argument(
        "--fail-images",
        default=None,
        metavar="PATTERN",
        help="regex: matching images fail with ErrImagePull (registry.invalid/... always does)",
    )
    p.add_argument("--error-rate", type=float, default=0.0, help="share (0..1) of API requests to fail")
    p.add_argument("--error-status", type=int, default=503, help="HTTP status of injected errors")
    p.add_argument("--no-kubelet", action="store_true", help="do not run pods")
    p.add_argument("--no-job-controller", action="store_true", help="do not run the Job controller")
    p.add_argument("--token", default=None, help="bearer token (random by default)")
    p.add_argument("--tls", action="store_true", help="serve HTTPS (self-signed; needed for kubectl)")
    g = p.add_argument_group("in-cluster mode (implies --tls)")
    g.add_argument(
        "--in-cluster-dir",
        default=None,
        help="write a service-account volume (token, ca.crt, namespace) here, "
        "like /var/run/secrets/kubernetes.io/serviceaccount",
    )
    g.add_argument(
        "--service-account",
        default="default:default",
        help="namespace:name of the in-cluster service account",
    )
    g.add_argument(
        "--token-ttl",
        type=float,
        default=None,
        help="seconds the in-cluster token is valid (default: forever)",
    )
    g.add_argument(
        "--no-token-rotation",
        action="store_true",
        help="do not rewrite the token file at 80%% of --token-ttl (the token then just expires: 401)",
    )
    g.add_argument(
        "--in-cluster-env",
        default=None,
        help="write `export KUBERNETES_SERVICE_HOST=...` / `..._PORT=...` lines to this file",
    )
    e = p.add_argument_group("exec-plugin credentials")
    e.add_argument(
        "--exec-kubeconfig",
        default=None,
        help="also write a kubeconfig whose user is the exec plugin `python -m airflow_jobwatch_testing.sandbox.credential`",
    )
    e.add_argument("--exec-user", default="sandbox-exec-user", help="user of the exec plugin's tokens")
    e.add_argument(
        "--exec-token-ttl", type=float, default=60.0, help="seconds each exec-plugin token is valid"
    )
    r = p.add_argument_group("RBAC")
    r.add_argument(
        "--rbac",
        action="store_true",
        help="authorize requests with RBAC (403 without a rule; admin token exempt)",
    )
    r.add_argument(
        "--rbac-manifests",
        action="append",
        default=[],
        metavar="FILE",
        help="load Role/ClusterRole/RoleBinding/ClusterRoleBinding YAML (repeatable; implies --rbac)",
    )
    c = p.add_argument_group("watch cache (stale reads)")
    c.add_argument(
        "--watch-cache-lag",
        type=int,
        default=0,
        metavar="N",
        help="resourceVersion=0 / NotOlderThan lists show the state of N changes ago (implies --watch-cache)",
    )
    c.add_argument(
        "--watch-cache",
        action="store_true",
        help="answer resourceVersion=0 lists from the watch cache, whole (limit ignored), as a real server; "
        "default: every list is a consistent read that pages",
    )
    s = p.add_argument_group("simulated pods (no host process)")
    s.add_argument("--simulate-pods", action="store_true", help="run every pod simulated")
    s.add_argument(
        "--simulated-namespace",
        action="append",
        default=[],
        metavar="NS",
        help="run this namespace's pods simulated (repeatable)",
    )
    s.add_argument(
        "--simulated-default-seconds",
        type=float,
        default=60.0,
        help="how long a simulated container whose command cannot be read runs",
    )
    return p


async def _main(args: argparse.Namespace) -> None:
    sb = Sandbox(
        port=args.port,
        history_window=args.history_window,
        bookmark_interval=args.bookmark_interval or None,
        pod_start_delay=args.pod_start_delay,
        pod_creation_rate=args.pod_creation_rate,
        kubelet=not args.no_kubelet,
        job_controller=not args.no_job_controller,
        token=args.token,
        tls=args.tls,
        in_cluster_dir=args.in_cluster_dir,
        service_account=args.service_account,
        token_ttl=args.token_ttl,
        rotate_tokens=not args.no_token_rotation,
        rbac=args.rbac,
        watch_cache=args.watch_cache,
        watch_cache_lag=args.watch_cache_lag,
        simulate_pods=args.simulate_pods,
        simulated_namespaces=args.simulated_namespace,
        simulated_default_seconds=args.simulated_default_seconds,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await sb.start()
    try:
        if args.fail_images:
            sb.set_image_pull_failure(args.fail_images)
        if args.error_rate:
            sb.set_error_rate(args.error_rate, status=args.error_status)
        for manifest in args.rbac_manifests:
            sb.load_rbac_manifests(Path(manifest).read_text())  # noqa: ASYNC240 - start-up
        if args.exec_kubeconfig:
            sb.write_exec_kubeconfig(args.exec_kubeconfig, user=args.exec_user, token_ttl=args.exec_token_ttl)
        if args.in_cluster_env:
            env = "".join(f"export {k}={v}\n" for k, v in sb.in_cluster_env().items())
            Path(args.in_cluster_env).write_text(env)  # noqa: ASYNC240 - start-up, nothing else runs yet
        sb.write_kubeconfig(args.kubeconfig)  # last: SandboxProcess reads it after `ready`
        print(f"ready {sb.url}", flush=True)
        await stop.wait()
    finally:
        await sb.stop()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        asyncio.run(_main(args))
    except ValueError as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sandbox: cannot start on 127.0.0.1:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
