"""Implementations of the ``airflow jobwatch`` commands."""

from __future__ import annotations

import argparse
import os
import sys


def sandbox(args: argparse.Namespace) -> None:
    """Replace this process with ``python -m airflow_jobwatch.sandbox`` so signals reach the sandbox directly."""
    argv = [
        sys.executable,
        "-m",
        "airflow_jobwatch.sandbox",
        "--port",
        str(args.port),
        "--kubeconfig",
        args.kubeconfig,
    ]
    if args.history_window is not None:
        argv += ["--history-window", str(args.history_window)]
    if args.bookmark_interval is not None:
        argv += ["--bookmark-interval", str(args.bookmark_interval)]
    if args.tls:
        argv.append("--tls")
    os.execv(sys.executable, argv)
