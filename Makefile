# Two commands do all setup on a fresh machine: `make run` and `make test`.
PYTHON_BOOTSTRAP ?= $(shell scripts/find-python)
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: run test install services lint typecheck bench clean

$(VENV)/.installed: requirements.txt requirements-dev.txt
	scripts/install-system-deps
	$(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed

services: install
	scripts/start-services

run: services
	$(PY) manage.py runstack

# Tests use their own ports so they can run beside `make run`.
test: services
	SINKADMIN_KAFKA_PORT=$${SINKADMIN_KAFKA_PORT:-19092} SINKADMIN_SPARK_CONNECT_PORT=$${SINKADMIN_SPARK_CONNECT_PORT:-15012} \
		$(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy connectors workers sinkadmin

bench: services
	$(PY) bench/sink_throughput.py

clean:
	rm -rf $(VENV) var staticfiles
