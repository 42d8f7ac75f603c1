# Two commands do all setup on a fresh machine: `make run` and `make test`.
# `make test-fast` runs only the tests that need no server (marked `unit`, see pytest.ini), without
# starting any: a few minutes, for the edit-test loop; `make test` stays the whole suite.
PYTHON_BOOTSTRAP ?= $(shell scripts/find-python)
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: run test test-fast install services lint typecheck config-reference bench clean

$(VENV)/.installed: requirements.txt requirements-dev.txt
	scripts/install-system-deps
	$(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# Front-end libraries come from the npm registry at install time (pinned in
# package-lock.json) and are copied to the git-ignored static/vendor/.
static/vendor/htmx.min.js: package.json package-lock.json
	npm ci --ignore-scripts --no-audit --no-fund --silent
	npm run --silent vendor

# JVM artifacts come from Maven Central at install time, pinned in
# jvm/<name>/pom.xml, into the git-ignored var/jars/<name>/: Apache Kafka's
# broker (kafka), and what Spark loads beside pyspark's jars (spark: the Spark
# Connect server, Iceberg's runtime, Hudi's bundle, the PostgreSQL JDBC driver);
# MirrorMaker 2's client library, the tests' reader of the mirror's checkpoints
# (mirror-client); the Kafka Connect plugins whose work the sinks do (Kafka's,
# Debezium's and the Iceberg sink's transformations, the Iceberg sink's record
# converter), the tests' oracles for ours
# (connect-plugins).
var/jars/%/.resolved: jvm/%/pom.xml
	scripts/resolve-jars $*

# Our own interceptor, built from source by `mvn package` (connect-guard: the Spark Connect server answers
# only this machine), again when its Java changes.
var/jars/connect-guard/.resolved: $(shell find jvm/connect-guard/src -type f)
# And Hudi's conflict check with the sink's rule (hudi-fence: a table holds each commit in one instant).
var/jars/hudi-fence/.resolved: $(shell find jvm/hudi-fence/src -type f)

install: $(VENV)/.installed static/vendor/htmx.min.js var/jars/kafka/.resolved var/jars/spark/.resolved \
	var/jars/mirror-client/.resolved var/jars/connect-plugins/.resolved \
	var/jars/connect-guard/.resolved var/jars/hudi-fence/.resolved

services: install
	scripts/start-services

run: services
	$(PY) manage.py runstack

# Tests use their own ports so they can run beside `make run`; those that need no data-plane server run
# beside the others (scripts/run-tests).
test: services
	scripts/run-tests $(PYTEST_ARGS)

# tests/conftest.py marks what each test needs; neither the broker, Spark, Redis nor PostgreSQL here.
FAST_TESTS := not integration and not database
test-fast: install
	$(PY) -m pytest -m "$(FAST_TESTS)" $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py config_reference --check

# docs/configuration.md, generated from the plugins' key definitions; `make lint` checks it is current.
config-reference: install
	$(PY) manage.py config_reference

typecheck: install
	$(VENV)/bin/mypy connectors workers sinkadmin sinks bench

bench: services
	$(PY) bench/spark_decoding.py
	$(PY) bench/spark_tasks.py
	$(PY) bench/spark_job_floor.py
	$(PY) bench/staging_costs.py
	$(PY) bench/table_lookup.py
	$(PY) bench/sink_throughput.py --repeat 3
	$(PY) bench/sink_throughput.py --sinks iceberg,hudi-upsert,hudi-upsert-mor --writers spark --modes make-run --repeat 3 \
		--output bench/results/sink_throughput-hudi-upserts.json
	$(PY) bench/sink_throughput.py --sinks iceberg,iceberg-upsert,iceberg-upsert-cow --writers spark --modes make-run \
		--repeat 3 --output bench/results/sink_throughput-iceberg-upserts.json
	$(PY) bench/sink_throughput.py --sinks iceberg-cdc,iceberg-cdc-append --modes make-run --repeat 2 \
		--output bench/results/sink_throughput-cdc-1M.json
	$(PY) bench/transform_cost.py
	$(PY) bench/routing_cost.py
	$(PY) bench/typed_columns_cost.py
	$(PY) bench/upsert_scale.py
	$(PY) bench/upsert_scale.py --sink iceberg
	$(PY) bench/upsert_scale.py --sink iceberg --key-type uuid
	$(PY) bench/upsert_scale.py --sink iceberg --merge-mode copy-on-write --waves 2
	$(PY) bench/maintenance.py
	$(PY) bench/mirror_throughput.py
	$(PY) bench/first_connector.py --rounds 3

clean:
	rm -rf $(VENV) var staticfiles
