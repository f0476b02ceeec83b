"""``python -m airflow_jobwatch.kube.cluster.credhelper``: resolve a :class:`ClusterConfig` into what a client needs
to talk to the API server, for :class:`~airflow_jobwatch.kube.cluster.direct.DirectApiClient`.

Why a process of its own: resolving credentials is ``kubernetes_asyncio``'s job (kubeconfig merging, exec
plugins, OIDC and other auth providers, in-cluster files), and importing it costs about 38 MiB of private
memory (its package imports every model class). The executor's watcher child keeps running for the life
of the scheduler and needs credentials only now and then (at start, when an exec-plugin token expires,
after a 401): it runs this helper then, as kubectl runs an exec credential plugin, and never imports the
library itself.

Lifetime: the caller starts it in a session of its own, with a private temporary folder as ``TMPDIR``,
and ends the whole process group when it is done (see :func:`~airflow_jobwatch.kube.cluster.direct.
fetch_credentials`). The helper ends its group (itself and every exec plugin it started) on SIGTERM, and,
on Linux, when the process that started it dies (its argument: that process's pid).

Protocol: stdin is a pickle of ``(sys.path, ClusterConfig)`` (the caller's, so that the same
``airflow_jobwatch`` is imported); stdout is one JSON object (:func:`export`). On a configuration error
the exit code is 78 (EX_CONFIG) and stderr's last line is the :class:`ClusterConfigError` message, which
names the kubeconfig and context and never holds a credential. The JSON holds credentials: the caller
reads it from a pipe and never logs it.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import sys
from typing import Any

#: Exit code of a helper whose configuration cannot be loaded (sysexits.h EX_CONFIG).
CONFIG_ERROR_EXIT_CODE = 78


def _read(path: str | None) -> str | None:
    if not path:
        return None
    with open(path, encoding="utf-8") as handle:
        return handle.read()


async def export(cfg: Any) -> dict[str, Any]:
    """Load ``cfg`` with ``kubernetes_asyncio`` and return what a client needs, as plain JSON values.

    ``authorization`` is the whole header value (``Bearer ...``) after the library's refresh hook ran (an
    expired exec-plugin token is fetched again here); ``expires_at`` is the exec plugin's
    ``expirationTimestamp`` (epoch seconds) when it gave one; ``token_file`` is set in-cluster, where the
    caller re-reads the rotating token itself. Certificate material is inlined (the library may have
    written it to temporary files that it removes when this process exits).
    """
    import kubernetes_asyncio.client

    from airflow_jobwatch.kube.cluster.client import load_async

    configuration = kubernetes_asyncio.client.Configuration()
    loader = await load_async(cfg, configuration)
    # Runs the refresh hook first (an expired exec-plugin token is fetched again; in-cluster, the file read).
    authorization = await configuration.get_api_key_with_prefix("BearerToken")
    expiry = getattr(loader, "exec_plugin_expiry", None) if loader is not None else None
    return {
        "host": configuration.host,
        "verify_ssl": bool(configuration.verify_ssl),
        "disable_strict_ssl_verification": bool(
            getattr(configuration, "disable_strict_ssl_verification", False)
        ),
        "ca": _read(configuration.ssl_ca_cert),
        "cert": _read(configuration.cert_file),
        "key": _read(configuration.key_file),
        "tls_server_name": getattr(configuration, "tls_server_name", None),
        "proxy": configuration.proxy,
        "proxy_headers": dict(getattr(configuration, "proxy_headers", None) or {}) or None,
        "connection_pool_maxsize": configuration.connection_pool_maxsize,
        "authorization": authorization or None,
        "expires_at": expiry.timestamp() if expiry is not None else None,
        "token_file": cfg.service_account_files()[0] if cfg.in_cluster else None,
    }


#: Names the private temporary folder its caller made for this run: the helper removes it when its parent
#: dies (the caller can no longer do it).
PRIVATE_TMPDIR_ENV = "JOBWATCH_CREDHELPER_TMPDIR"

#: prctl(2) option: the signal this process gets when the thread that started it ends.
_PR_SET_PDEATHSIG = 1


def _end_group(signum: int = signal.SIGKILL, frame: Any = None) -> None:
    """Kill this process's group: the helper and every exec plugin it started. Only a group this helper
    leads (its caller started it in a new session): never the group of whoever ran it by hand. The
    private temporary folder goes first (key material ``kubernetes_asyncio`` wrote there)."""
    private = os.environ.get(PRIVATE_TMPDIR_ENV)
    if private:
        import shutil

        shutil.rmtree(private, ignore_errors=True)
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def die_with_parent(parent: int | None) -> None:
    """End this helper's group on SIGTERM and, on Linux, when ``parent`` dies.

    PR_SET_PDEATHSIG sends SIGTERM (SIGKILL could not be caught, and the exec plugins, which a kernel
    parent-death signal cannot reach because their parent is this helper, would be left running): its
    handler kills the whole group. ``getppid()`` is checked after the prctl call, for a parent that
    died before it.
    """
    signal.signal(signal.SIGTERM, _end_group)
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        _end_group()


#: Environment variables whose values are kept out of the helper's error message (an exec plugin that
#: fails may print its whole environment on stderr, and the library puts that stderr in its error).
_SECRET_NAME_PARTS = ("SECRET", "TOKEN", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "SESSION", "AUTH")
_MIN_SECRET_LEN = 8


def scrub_environment(text: str) -> str:
    """``text`` with the value of every credential-looking environment variable replaced by
    ``<redacted>``."""
    secrets = {
        value
        for name, value in os.environ.items()
        if len(value) >= _MIN_SECRET_LEN and any(part in name.upper() for part in _SECRET_NAME_PARTS)
    }
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "<redacted>")
    return text


def main() -> int:
    import json

    die_with_parent(int(sys.argv[1]) if len(sys.argv) > 1 else None)

    parent_path, cfg = pickle.load(sys.stdin.buffer)
    sys.path[:] = [p for p in parent_path if p not in sys.path] + sys.path
    from airflow_jobwatch.kube.cluster.client import ClusterConfigError

    try:
        bundle = asyncio.run(export(cfg))
    except ClusterConfigError as exc:
        print(scrub_environment(str(exc)).replace("\n", " "), file=sys.stderr)
        return CONFIG_ERROR_EXIT_CODE
    except OSError as exc:  # a certificate file named by the kubeconfig cannot be read
        print(f"{cfg.describe()}: cannot read a file it names: {exc}", file=sys.stderr)
        return CONFIG_ERROR_EXIT_CODE
    sys.stdout.write(json.dumps(bundle))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
