# airflow-jobwatch developer entry points. Every target sets up what it needs.
# PYTHON: the first supported interpreter found (3.11, 3.12, 3.13; pyenv builds count), else python3.
PYTHON ?= $(shell for v in 3.11 3.12 3.13; do .ci/find-python $$v && exit 0; done; command -v python3)
VENV   ?= .venv
# CONSTRAINTS: the pins to install. constraints.txt pins Airflow 3.3 (the default venv runs the full suite on
# it); constraints/airflow-3.1.txt and constraints/airflow-3.2.txt pin the older supported minors.
CONSTRAINTS ?= constraints.txt
# The tests `make test-compat` runs.
COMPAT_TESTS ?= tests/unit tests/integration
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test lint typecheck unit docs demo bench provider-info clean venv test-compat

venv: $(STAMP)

# (Re)install when the pins or the project metadata change. Both distributions are installed editable: the
# provider (airflow_jobwatch) and the testing distribution (airflow_jobwatch_testing: the sandbox and the
# pytest plugin, which pytest loads through its entry point); each is its own top-level package, so
# neither hides the other. $(CONSTRAINTS) pins every distribution, so a fresh machine gets exactly what
# CI tested.
$(STAMP): pyproject.toml airflow-jobwatch-testing/pyproject.toml $(CONSTRAINTS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip==25.3"
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e ".[test,docs]" -e ./airflow-jobwatch-testing
	@touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python .ci/gen_provider_info.py --check
	$(BIN)/python .ci/check_test_modules.py tests

typecheck: $(STAMP)
	$(BIN)/mypy

# Unit, integration, docs and packaging tests in $(TEST_PROCESSES) processes (pytest-xdist; each test file in
# one process, so its fixtures are set up once); then the end-to-end tests one at a time, since each starts a
# whole Airflow (schedulers, triggerers, api-server) whose timings a second one on the same cores would
# disturb. Exit code 5 (no test selected, e.g. PYTEST_ARGS=tests/unit) is not a failure.
TEST_PROCESSES ?= 2

# Each step's wall time is printed (and recorded for .ci/run's summary: .ci/timed).
test: $(STAMP)
	@.ci/timed "lint" $(MAKE) -s lint
	@.ci/timed "typecheck" $(MAKE) -s typecheck
	@.ci/timed "docs build" $(MAKE) -s docs
	$(BIN)/python --version
	.ci/timed "unit, integration, docs, packaging tests" \
	  $(BIN)/pytest -q -ra --durations=25 -n $(TEST_PROCESSES) --dist loadfile -m "not e2e" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	.ci/timed "end-to-end tests" $(BIN)/pytest -q -ra --durations=25 -m e2e $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The unit and integration tests on another interpreter and/or Airflow minor, in its own venv:
#   make test-compat VENV=.venv-3.12 PYTHON=/path/to/python3.12 CONSTRAINTS=constraints/airflow-3.2.txt
test-compat: $(STAMP)
	$(BIN)/python --version
	$(BIN)/python -c 'import airflow, airflow.providers.cncf.kubernetes as k; print("Airflow", airflow.__version__, "cncf.kubernetes", k.__version__)'
	$(BIN)/pytest -q -ra -n $(TEST_PROCESSES) --dist loadfile $(COMPAT_TESTS) $(PYTEST_ARGS)

# The documentation site, warnings as errors (docs/_build/html/index.html).
docs: $(STAMP)
	$(BIN)/python -m sphinx -W --keep-going -q -b html docs docs/_build/html

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

demo: $(STAMP)
	PYTHONPATH=tests $(BIN)/python -m support.demo

bench: $(STAMP)
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

provider-info: $(STAMP)
	$(BIN)/python .ci/gen_provider_info.py

clean:
	rm -rf .venv .venv-3.* .venv-af* .venv-airflow-* .pytest_cache .mypy_cache .ruff_cache .hypothesis docs/_build dist build
