"""The one [jobwatch] reader (airflow_jobwatch.config): defaults from provider.yaml, Airflow's
environment overrides, and errors that name the option."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from airflow_jobwatch import config

ROOT = Path(__file__).resolve().parents[2]


def _declared() -> dict:
    return yaml.safe_load((ROOT / "provider.yaml").read_text())["config"]["jobwatch"]["options"]


def test_defaults_are_provider_yaml_defaults():
    for option, spec in _declared().items():
        assert config.default(option) == (spec["default"] or "")
    cfg = config.informer_config()
    assert cfg.watch_timeout_seconds == float(_declared()["watch_timeout_seconds"]["default"])
    assert cfg.stall_timeout_seconds == float(_declared()["watch_stall_timeout_seconds"]["default"])
    assert cfg.resync_interval_seconds == float(_declared()["resync_interval_seconds"]["default"])


def test_environment_overrides_apply_on_the_next_read(monkeypatch):
    monkeypatch.setenv("AIRFLOW__JOBWATCH__BACKOFF_MAX_SECONDS", "7.5")
    monkeypatch.setenv("AIRFLOW__JOBWATCH__RESYNC_INTERVAL_SECONDS", "0")
    cfg = config.informer_config()
    assert cfg.backoff_max_seconds == 7.5
    assert cfg.resync_interval_seconds is None  # 0 disables it
    assert config.informer_config(resync_interval_seconds=15).resync_interval_seconds == 15


def test_executor_and_trigger_read_the_same_options(monkeypatch):
    from airflow_jobwatch.executors.jobwatch_executor import informer_config_from_conf
    from airflow_jobwatch.triggers.job import informer_config_from_airflow

    monkeypatch.setenv("AIRFLOW__JOBWATCH__WATCH_STALL_TIMEOUT_SECONDS", "42")
    assert informer_config_from_conf() == informer_config_from_airflow() == config.informer_config()
    assert config.informer_config().stall_timeout_seconds == 42


def test_a_value_that_is_not_a_number_names_the_option(monkeypatch):
    monkeypatch.setenv("AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS", "five minutes")
    with pytest.raises(config.JobwatchConfigError) as err:
        config.informer_config()
    message = str(err.value)
    assert "[jobwatch] watch_timeout_seconds" in message
    assert "'five minutes'" in message
    assert "AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS" in message


def test_inconsistent_values_are_a_config_error(monkeypatch):
    monkeypatch.setenv("AIRFLOW__JOBWATCH__BACKOFF_INITIAL_SECONDS", "10")
    monkeypatch.setenv("AIRFLOW__JOBWATCH__BACKOFF_MAX_SECONDS", "1")
    with pytest.raises(config.JobwatchConfigError, match="backoff_max_seconds"):
        config.informer_config()


def test_below_minimum_is_refused(monkeypatch):
    monkeypatch.setenv("AIRFLOW__JOBWATCH__RESYNC_INTERVAL_SECONDS", "-5")
    with pytest.raises(
        config.JobwatchConfigError, match=r"resync_interval_seconds = '-5' must be a number >= 0"
    ):
        config.informer_config()


def test_unknown_option_is_a_programming_error():
    with pytest.raises(KeyError, match="not an option"):
        config.get_float("no_such_option")


def test_string_options(monkeypatch):
    assert config.get_str("executor_status_file") == ""
    monkeypatch.setenv("AIRFLOW__JOBWATCH__EXECUTOR_STATUS_FILE", " /tmp/x.json ")
    assert config.get_str("executor_status_file") == "/tmp/x.json"


def test_a_negative_watch_timeout_names_the_option_value_and_range_not_a_class(monkeypatch):
    monkeypatch.setenv("AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS", "-5")
    with pytest.raises(config.JobwatchConfigError) as err:
        config.informer_config()
    message = str(err.value)
    assert "[jobwatch] watch_timeout_seconds = '-5' must be a number > 0" in message
    assert "AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS" in message
    assert "InformerConfig" not in message


@pytest.mark.parametrize("option", sorted(config.RANGES))
def test_every_numeric_option_refuses_a_value_below_its_range(monkeypatch, option):
    bounds = config.RANGES[option]
    bad = bounds.low - 1 if bounds.inclusive else bounds.low
    monkeypatch.setenv(f"AIRFLOW__JOBWATCH__{option.upper()}", str(bad))
    with pytest.raises(config.JobwatchConfigError, match=rf"\[jobwatch\] {option} = '{bad}' must be"):
        config.check_options()


@pytest.mark.parametrize("option", sorted(o for o, b in config.RANGES.items() if b.high is not None))
def test_an_option_with_an_upper_bound_refuses_a_value_above_it_and_says_so(monkeypatch, option):
    high = config.RANGES[option].high
    assert high is not None
    monkeypatch.setenv(f"AIRFLOW__JOBWATCH__{option.upper()}", str(int(high)))
    config.check_options([option])
    monkeypatch.setenv(f"AIRFLOW__JOBWATCH__{option.upper()}", str(int(high) + 1))
    with pytest.raises(config.JobwatchConfigError, match=rf"{option} = '{int(high) + 1}' must be"):
        config.check_options([option])
    # the option's documentation states the same range as the check
    assert str(config.RANGES[option]) in " ".join(_declared()[option]["description"].split())


@pytest.mark.parametrize("value", ["1023", "1024", "16777216", "16777217", "2048.0"])
def test_the_triggers_log_limit_has_the_configs_bounds_and_warns_outside_them(monkeypatch, value):
    from airflow_jobwatch.ending import pod_logs

    monkeypatch.setenv("AIRFLOW__JOBWATCH__TRIGGER_LOG_MAX_BYTES", value)
    limit, problem = pod_logs.max_bytes()
    if value in ("1024", "16777216"):
        assert (limit, problem) == (int(value), None)
    else:  # a warning naming the range, and the default: never an error that fails the task
        assert limit == 1048576
        assert problem == (
            f"[jobwatch] trigger_log_max_bytes = '{value}' must be a whole number of bytes from 1024 to "
            "16777216; using the default 1048576"
        )


def test_every_numeric_option_has_a_range():
    numeric = {o for o, spec in _declared().items() if spec["type"] in ("float", "integer")}
    assert numeric == set(config.RANGES)


def test_whole_numbers_and_choices(monkeypatch):
    config.check_options()  # the defaults pass
    monkeypatch.setenv("AIRFLOW__JOBWATCH__POD_CREATION_CONCURRENCY", "2.5")
    with pytest.raises(config.JobwatchConfigError, match=r"pod_creation_concurrency must be a whole number"):
        config.check_options()
    monkeypatch.delenv("AIRFLOW__JOBWATCH__POD_CREATION_CONCURRENCY")
    monkeypatch.setenv("AIRFLOW__JOBWATCH__WORKER_POD_LABELS", "mine")
    with pytest.raises(
        config.JobwatchConfigError, match=r"worker_pod_labels = 'mine' is not one of upstream"
    ):
        config.check_options()
    config.check_options(config.TRIGGER_OPTIONS)  # the worker's options do not include it
