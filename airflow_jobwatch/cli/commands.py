"""Implementations of the ``airflow jobwatch`` commands."""

from __future__ import annotations

import argparse
import os
import sys


def sandbox(args: argparse.Namespace) -> None:
    """Replace this process with ``python -m airflow_jobwatch_testing.sandbox`` so signals reach the sandbox directly."""
    import importlib.util

    # The sandbox ships in the testing distribution (its own import package), not in the provider that
    # schedulers and workers run; find_spec raises ModuleNotFoundError where that package is missing.
    try:
        found = importlib.util.find_spec("airflow_jobwatch_testing.sandbox") is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise SystemExit(
            "airflow jobwatch sandbox: the sandbox is not installed here; "
            'install it with: pip install "airflow-jobwatch[testing]"'
        )
    argv = [
        sys.executable,
        "-m",
        "airflow_jobwatch_testing.sandbox",
        "--port",
        str(args.port),
        "--kubeconfig",
        args.kubeconfig,
    ]
    if args.history_window is not None:
        argv += ["--history-window", str(args.history_window)]
    if args.bookmark_interval is not None:
        argv += ["--bookmark-interval", str(args.bookmark_interval)]
    if args.fail_images:
        argv += ["--fail-images", args.fail_images]
    if args.tls:
        argv.append("--tls")
    os.execv(sys.executable, argv)


def cleanup_pods(args: argparse.Namespace) -> None:
    """``airflow jobwatch cleanup-pods``: delete finished and long-pending worker pods (upstream's rules)."""
    from kubernetes.client import CoreV1Api

    from airflow_jobwatch import config
    from airflow_jobwatch.cli.cleanup import cleanup_pods as run
    from airflow_jobwatch.executors.jobwatch_executor import cluster_config_from_conf
    from airflow_jobwatch.executors.pods import label_scheme
    from airflow_jobwatch.kube.cluster.client import sync_api_client

    if args.verbose:
        print(
            "Loading Kubernetes configuration ([kubernetes_executor] in_cluster / config_file / cluster_context)"
        )
    from airflow.providers.common.compat.sdk import conf

    namespace = args.namespace or conf.get("kubernetes_executor", "namespace", fallback="default")
    api = sync_api_client(cluster_config_from_conf())
    try:
        deleted, failed = run(
            CoreV1Api(api),
            namespace,
            min_pending_minutes=args.min_pending_minutes,
            min_completed_minutes=args.min_completed_minutes,
            dry_run=args.dry_run,
            verbose=args.verbose,
            executor_label=label_scheme(config.get_str("worker_pod_labels")).executor,
        )
    finally:
        api.close()
    print(f"{'Would delete' if args.dry_run else 'Deleted'} {len(deleted)} pod(s) in {namespace}")
    if failed:
        sys.exit(f"Could not delete {len(failed)} pod(s): {', '.join(failed)}")


def status(args: argparse.Namespace) -> None:
    """``airflow jobwatch status``: exit 0 healthy, 1 unhealthy, 2 when no status file is configured."""
    import json

    from airflow_jobwatch import config
    from airflow_jobwatch.cli import status as st

    executor_file = args.executor_status_file or config.get_str("executor_status_file")
    triggerer_file = args.triggerer_status_file or config.get_str("triggerer_status_file")
    verdicts = []
    if executor_file and args.component in ("all", "executor"):
        verdicts.append(st.executor_verdict(executor_file, max_age=args.max_age))
    if triggerer_file and args.component in ("all", "triggerer"):
        verdicts.append(st.triggerer_verdict(triggerer_file, max_age=args.max_age))
    if not verdicts:
        print(
            "No status file to read: set [jobwatch] executor_status_file and/or triggerer_status_file "
            "(or pass --executor-status-file / --triggerer-status-file)",
            file=sys.stderr,
        )
        sys.exit(st.NOT_CONFIGURED)
    if args.output == "json":
        print(
            json.dumps(
                [
                    {
                        "component": v.component,
                        "path": v.path,
                        "healthy": v.healthy,
                        "problems": v.problems,
                        **v.summary,
                    }
                    for v in verdicts
                ],
                indent=2,
                default=str,
            )
        )
    else:
        print(st.render(verdicts))
    sys.exit(st.HEALTHY if all(v.healthy for v in verdicts) else st.UNHEALTHY)


def generate_pod_yaml(args: argparse.Namespace) -> None:
    """``airflow jobwatch generate-pod-yaml DAG_ID TASK_ID``: the worker pod JobWatchExecutor would create."""
    from airflow_jobwatch.cli.podyaml import worker_pod_yaml

    try:
        text = worker_pod_yaml(args.dag_id, args.task_id, subdir=args.subdir, map_index=args.map_index)
    except ValueError as err:  # no pod template, a bad pod_override, ...: a clear line, not a traceback
        raise SystemExit(
            f"airflow jobwatch generate-pod-yaml: cannot build the worker pod of "
            f"{args.dag_id}.{args.task_id}: {err}"
        ) from None
    if args.output_path:
        from pathlib import Path

        path = Path(args.output_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"Wrote the worker pod of {args.dag_id}.{args.task_id} to {path}")
    else:
        print(text, end="")
