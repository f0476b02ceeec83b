"""The keys that sign and check a finished Job's stored result, derived from Airflow's ``[core] fernet_key``.

A task ended from the triggerer writes its Job's result onto the Job (the ``jobwatch.io/result``
annotation) before it deletes the pods the result was read from, so that a second run of the same
trigger reports the same result. Anyone allowed to ``patch`` a Job can write that annotation too, so a
reader uses it only when it is signed (``kube/meaning/result.py``) with a key that:

* **every component that writes or reads it holds.** The triggerer writes it and reads it; a worker
  reads it when the operator waits in the worker (``deferrable=False``). Airflow's ``[core] fernet_key``
  is on both: the triggerer needs it to decrypt the trigger arguments and connections Airflow stores
  encrypted, and Airflow's deployments (the official Helm chart, its docker-compose file) give the same
  key to every component. A per-process secret would not do: the second run is another process,
  often on another machine.
* **a user with only Kubernetes rights does not.** It lives in Airflow's configuration (or its secrets
  backend), not in the cluster's Jobs; whoever can read it can already decrypt every connection.
* **cannot be turned back into the Fernet key, nor used as one.** The signing key is derived with
  HKDF-SHA256 under a label of its own (:data:`HKDF_INFO`), so it is a different key for a different
  use, and a signature reveals nothing about it.

A key rotation (``fernet_key = new,old``, as ``airflow rotate-fernet-key`` expects) signs with the first
key and accepts every listed one, so results written before the rotation still count until the old key
is removed. With no ``fernet_key`` there is no key: nothing is signed (the pods that hold the result are
kept instead), and no stored result counts.
"""

from __future__ import annotations

import functools

__all__ = ["HKDF_INFO", "result_keys"]

#: The HKDF label: the derived key signs results and nothing else.
HKDF_INFO = b"airflow-jobwatch/job-result-annotation/v1"


@functools.lru_cache(maxsize=8)
def _derive(fernet_key: str) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=HKDF_INFO).derive(fernet_key.encode())


def _fernet_key_setting() -> str:
    """``[core] fernet_key`` as this process's Airflow configuration resolves it (``_cmd`` and ``_secret``
    variants included); empty when it is not set or there is no Airflow configuration to read."""
    try:
        from airflow.configuration import conf
    except ImportError:  # pragma: no cover - a process without Airflow core (benchmarks, tests)
        return ""
    return str(conf.get("core", "fernet_key", fallback="") or "")


def result_keys() -> tuple[bytes, ...]:
    """The keys a stored result may be signed with, the signing key first; empty without a
    ``[core] fernet_key``. Read each time (an environment override applies at once); derived once per key."""
    return tuple(_derive(key.strip()) for key in _fernet_key_setting().split(",") if key.strip())
