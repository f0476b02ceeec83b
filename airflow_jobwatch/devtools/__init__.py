"""Development tools: run real Airflow processes against the embedded Kubernetes sandbox.

Used by the end-to-end tests, ``make demo`` and the benchmarks; not imported by the provider itself.
"""
