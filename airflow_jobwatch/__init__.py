"""airflow-jobwatch: an Apache Airflow provider that runs work on Kubernetes and never loses track of it."""

__version__ = "0.1.0"
