"""``python -m airflow_jobwatch_testing.sandbox.credential --key-file F --user U --ttl S``: an exec plugin.

Prints an ``ExecCredential`` (``client.authentication.k8s.io/v1``) with a token for user ``U`` that
the sandbox accepts for ``S`` seconds, and its ``expirationTimestamp`` (RFC 3339, UTC), the way
``aws eks get-token`` or ``gke-gcloud-auth-plugin`` do. Clients run it again once the credential is
near its expiry (the Python clients: within 5 minutes of it, so short TTLs mean a run per request)
or after a 401.

The key file is the sandbox's token-signing key (written by ``Sandbox.write_exec_kubeconfig``), so
this command mints the token itself and never talks to the server. Standard library only (the
sandbox package loads aiohttp lazily), so it starts fast.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .auth import mint_token
from .kubeconfig import EXEC_API_VERSION


def exec_credential(key: bytes, user: str, ttl: float, *, now: float | None = None) -> dict[str, object]:
    token, expires = mint_token(key, user, ttl=ttl, now=now)
    assert expires is not None
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires))
    return {
        "apiVersion": EXEC_API_VERSION,
        "kind": "ExecCredential",
        "spec": {"interactive": False},
        "status": {"token": token, "expirationTimestamp": stamp},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m airflow_jobwatch_testing.sandbox.credential", description=__doc__
    )
    p.add_argument("--key-file", required=True, help="the sandbox's token-signing key")
    p.add_argument("--user", required=True, help="user name the token is for")
    p.add_argument("--ttl", type=float, default=60.0, help="seconds the token is valid")
    args = p.parse_args(argv)
    if args.ttl <= 0:
        print(f"credential: --ttl must be > 0 seconds, got {args.ttl}", file=sys.stderr)
        return 2
    try:
        with open(args.key_file, "rb") as fh:
            key = fh.read()
    except OSError as exc:
        print(
            f"credential: cannot read the signing key file {args.key_file}: {exc.strerror}", file=sys.stderr
        )
        return 1
    json.dump(exec_credential(key, args.user, args.ttl), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
