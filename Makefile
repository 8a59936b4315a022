# Two entry points for people (make run, make test); the rest are their steps.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-$(shell cat setup.cfg pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test bench clean browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/twistd -n mqksbridge

test: $(STAMP) browser
	$(BIN)/python -m pytest -q

# The dashboard test drives Debian's headless Chromium; as root (CI) install it if missing.
browser:
	@if [ "$$(id -u)" = 0 ] && ! { command -v chromium && command -v chromedriver; } >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq chromium chromium-driver >/dev/null; fi

bench: $(STAMP)
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.twino_bench
	$(BIN)/python -m bench.malamute_bench
	$(BIN)/python -m bench.interop_bench
	$(BIN)/python -m bench.admin_overhead
	$(BIN)/python -m bench.textqueue_codec
	$(BIN)/python -m bench.zrex_bench

clean:
	rm -rf $(VENV) build *.egg-info
