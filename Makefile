# The two commands of the README: `make run` and `make test`. Both bootstrap .venv on a fresh machine.
# `make serve` is the web side in production (gunicorn, gunicorn.conf.py); docs/production.md says what runs beside it.
PYTHON ?= python3
# CI builds a second one with the GPU workers' libraries (VENV=.venv-gpu) beside the README's.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run serve test lint gpu-deps gpu-bench client-wheel

$(VENV)/.requirements: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed; set PYTHON=python3.11")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.requirements-dev: $(VENV)/.requirements requirements-dev.txt
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# GPU worker machines: the libraries of embed-text (torch, sentence-transformers, the model's package),
# and where an NVIDIA driver answers, onnxruntime-gpu in place of onnxruntime (both install the same
# module, so one must go) for onnx-infer's CUDA provider.
ONNXRUNTIME_GPU := onnxruntime-gpu==1.31.1
$(VENV)/.requirements-gpu: $(VENV)/.requirements requirements-gpu.txt
	$(PY) -m pip install --quiet -r requirements-gpu.txt
	if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then \
	  $(PY) -m pip uninstall --quiet --yes onnxruntime && $(PY) -m pip install --quiet $(ONNXRUNTIME_GPU); fi
	touch $@

gpu-deps: $(VENV)/.requirements-gpu

# Every GPU path once (NVML, each GPU work kind against its bare loop, staging), into bench-gpu.txt: one call
# for a GPU host lent for a few minutes. Without a GPU it runs on CPU slots and says so.
gpu-bench: $(VENV)/.requirements-gpu
	$(PY) bench/gpu.py --out bench-gpu.txt

# The e31 client's wheel, which the design-partner and API tokens pages offer to download (static/downloads/).
client-wheel: $(VENV)/.requirements
	rm -f static/downloads/e31-*.whl
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir static/downloads ./client

run: $(VENV)/.requirements client-wheel
	$(PY) manage.py migrate --noinput
	$(PY) manage.py bootstrap_demo
	$(PY) manage.py runportal

# Static files collected (compressed) into $$E31_VAR_DIR/static and served from there by whitenoise.
# Migrations are not run here: in production the tables' owner runs them (docs/production.md).
serve: $(VENV)/.requirements client-wheel
	$(PY) manage.py collectstatic --noinput --verbosity 0
	E31_STATIC_FINDERS=false $(PY) -m gunicorn --config gunicorn.conf.py

# The suite in TEST_RUNNERS runners at once (pytest-xdist): its tests wait on workers, servers and a browser, and
# runners overlap their waits until the CPU is full (docs/benchmarks.md). `pytest` alone runs it in one. The
# slowest 25 tests are listed at the end: where to look first when the suite grows slower. The suite starts a few
# hundred processes, so it writes the portal's bytecode (__pycache__/, ignored by git) even where the shell says
# not to (PYTHONDONTWRITEBYTECODE): else each of them compiles every module it imports from source again.
TEST_RUNNERS ?= 3
test: $(VENV)/.requirements-dev
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n $(TEST_RUNNERS) --dist loadgroup --durations=25

lint: $(VENV)/.requirements-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
