# Two entry points for people (make run, make test); the rest are their steps.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-$(shell cat setup.cfg pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test bench soak clean system-packages cluster cluster-stop

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/pip install -q -e '.[test,pipeline]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/twistd -n mqksbridge

test: $(STAMP) system-packages
	$(BIN)/python -m pytest -q

# Debian packages some tests use, installed when missing and run as root (CI): headless
# Chromium for the dashboard test, libczmq for the zrex differential test against czmq,
# jq for a docs/cli.md example (tests/test_docs_examples.py), strace to make a disk slow
# (tests/spill/test_spill_twistd.py), rabbitmq-server for the
# cluster engine's tests. The tests start RabbitMQ nodes of their own (bridge/cluster/
# local.py): the system service the package may start is stopped again at once.
RABBITMQ = /usr/lib/rabbitmq/bin/rabbitmq-server
system-packages:
	@if [ "$$(id -u)" = 0 ] && ! { command -v chromium && command -v chromedriver \
			&& command -v jq && command -v strace && ldconfig -p | grep -q 'libczmq\.so\.4' \
			&& test -x $(RABBITMQ); } >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq chromium chromium-driver libczmq4 jq strace rabbitmq-server >/dev/null \
		&& { service rabbitmq-server stop || true; } >/dev/null 2>&1; fi

# A local 3-node RabbitMQ cluster under ./var/cluster and two gateways on it, to try the
# cluster engine (docs/cluster.md); `make cluster-stop` stops them all.
cluster: $(STAMP) system-packages
	$(BIN)/python -m mqksbridge.bridge.cluster.sandbox start var/cluster

cluster-stop: $(STAMP)
	$(BIN)/python -m mqksbridge.bridge.cluster.sandbox stop var/cluster

bench: $(STAMP)
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.twino_bench
	$(BIN)/python -m bench.malamute_bench
	$(BIN)/python -m bench.malamute_service_bench
	$(BIN)/python -m bench.interop_bench
	$(BIN)/python -m bench.admin_overhead
	$(BIN)/python -m bench.textqueue_codec
	$(BIN)/python -m bench.zrex_bench
	$(BIN)/python -m bench.pipeline_bench
	$(BIN)/python -m bench.textqueue_door
	$(BIN)/python -m bench.durability_bench
	$(BIN)/python -m bench.recovery_bench
	$(BIN)/python -m bench.outside

# Minutes of every door under load and hostile clients (bench/soak.py); not part of bench.
soak: $(STAMP)
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python -m bench.soak

clean:
	rm -rf $(VENV) build *.egg-info
