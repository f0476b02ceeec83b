"""``airflow jobwatch ...`` commands, registered through the provider's ``cli`` metadata."""
