# Set-up and entry points. `make demo` and `make test` each do all set-up on a fresh machine:
# Debian packages (graphviz's dot, chromium for the browser tests), a .venv with torch (override
# with TORCH_SPEC=...), the JS bundles (esbuild from npm) and the package in editable mode.

PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
STAMP := $(VENV)/.torchlens_nb-installed
PYTEST := $(BIN)/python -m pytest

.PHONY: setup sysdeps bundle demo test lint payload-types bench docs clean wheel wheel-smoke

setup: sysdeps $(STAMP) bundle

sysdeps:
	@if ! command -v dot >/dev/null || ! command -v chromium >/dev/null; then \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q graphviz chromium fonts-dejavu-core; \
	fi

# constraints.txt pins torch to TORCH_SPEC for every install that follows: the dev extra pulls
# transformers, lightning and accelerate, and without the pin pip may replace the CPU torch with
# a multi-GB build of another version. Rewritten only when TORCH_SPEC changes (then the stamp
# below is stale and the venv is brought to the new pin).
constraints.txt: FORCE
	@echo "$(TORCH_SPEC)" | cmp -s - $@ || echo "$(TORCH_SPEC)" > $@

FORCE:

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

bundle: js/package-lock.json
	@test -d js/node_modules || (cd js && npm ci --no-audit --no-fund --loglevel=error)
	cd js && node build.mjs

demo: setup
	$(BIN)/python -m jupyter nbconvert --to notebook --execute notebooks/00_tour.ipynb \
	  --output-dir $${TMPDIR:-/tmp} --output tour_executed.ipynb
	@echo "tour executed: $${TMPDIR:-/tmp}/tour_executed.ipynb (open notebooks/00_tour.ipynb in JupyterLab to click through)"

# lint first: ruff, mypy and tsc (the panels' reads are checked against the payload types
# generated from the Python reports: js/shared/payload_types.d.ts, tests/test_payload_types.py).
test: setup lint
	$(PYTEST) -q tests
	$(PYTEST) -q -p nbval --nbval-lax --nbval-current-env notebooks
	$(MAKE) wheel-smoke

# The package as users install it. `wheel` builds the sdist and, from it, the wheel
# (`python -m build`) in a copy of the checkout's files with no panel bundles and no
# node_modules, so the build itself must make the bundles (hatch-jupyter-builder runs npm).
# It needs only `build` and `twine` (a small venv of their own, not the dev environment:
# the wheel is 0.7 MB and `python -m build` makes it in seconds); `wheel-smoke` installs that
# wheel alone into a fresh venv and runs tests/install against it (import, bundles, one panel
# per kind in headless chromium, to_html, a JupyterLab round trip) with the dev venv's pytest.
DIST := dist
WHEEL_SRC := build/wheel-src
BUILD_VENV := .venv-build
SMOKE_VENV := .venv-wheel
$(BUILD_VENV)/.ready:
	@test -x $(BUILD_VENV)/bin/python || $(PY) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/python -m pip install -q "build>=1.2" "twine>=6.1"
	touch $@

wheel: $(BUILD_VENV)/.ready
	rm -rf $(DIST) $(WHEEL_SRC) && mkdir -p $(WHEEL_SRC)
	git ls-files -z -co --exclude-standard | tar --null --ignore-failed-read -T - -cf - | tar -xf - -C $(WHEEL_SRC)
	cd $(WHEEL_SRC) && $(abspath $(BUILD_VENV))/bin/python -m build --outdir $(abspath $(DIST)) .
	$(BUILD_VENV)/bin/twine check --strict $(DIST)/*

wheel-smoke: wheel setup
	rm -rf $(SMOKE_VENV)
	$(PY) -m venv $(SMOKE_VENV)
	$(SMOKE_VENV)/bin/python -m pip install -q -c constraints.txt $(DIST)/*.whl ipykernel
	TORCHLENS_NB_DIST=$(abspath $(DIST)) TORCHLENS_NB_INSTALLED_PYTHON=$(abspath $(SMOKE_VENV))/bin/python \
	  $(PYTEST) -q tests/install

docs: setup
	$(BIN)/python -m sphinx -W --keep-going -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

# The habits that keep the house in order: lint + format check, types of the package, types of
# the panels' JS. Configuration lives in pyproject.toml ([tool.ruff], [tool.mypy]) and js/.
LINT_PATHS := torchlens_nb tests benchmarks docs notebooks/strip.py
lint: setup
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy
	cd js && node_modules/.bin/tsc -p jsconfig.json

# The bench extra (peers: TorchLens, torchviz, bertviz) installs under the same torch pin.
BENCH_STAMP := $(VENV)/.torchlens_nb-bench-installed
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[bench]"
	touch $(BENCH_STAMP)

# Regenerate the panels' payload types after changing a report dataclass (commit the result).
payload-types: $(STAMP)
	$(BIN)/python -m torchlens_nb.widgets._payload_types --write

bench: setup $(BENCH_STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) $(SMOKE_VENV) $(BUILD_VENV) $(DIST) build js/node_modules torchlens_nb/widgets/static constraints.txt
