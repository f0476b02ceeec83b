"""``airflow jobwatch ...`` commands, registered through the provider's ``cli`` metadata.

Layer 3 (docs/internals.md, "The map"): imports ``executors/``, ``kube/`` and the shared layer.
"""
