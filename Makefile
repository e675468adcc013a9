# Everything sets itself up: a virtualenv in .venv with torch (2.13.0 unless TORCH_VERSION is
# given), the build tools, and torch_devx built in place against that torch.
PYTHON ?= python3
TORCH_VERSION ?= 2.13.0
VENV ?= .venv
PY := $(VENV)/bin/python
# The stamp names the dependency set: a venv made for an older set installs the new one.
DEPS := $(VENV)/.deps-2-$(TORCH_VERSION)

.PHONY: all build demo test bench profile clean

all: build

$(PY):
	$(PYTHON) -m venv $(VENV)

$(DEPS): | $(PY)
	$(PY) -m pip install --quiet "torch==$(TORCH_VERSION)" numpy pyyaml pytest expecttest setuptools wheel cmake ninja scipy-openblas32
	touch $@

# Re-run every time: the CMake build underneath is incremental, so this costs seconds when
# nothing changed.
build: $(DEPS)
	$(PY) -m pip install --quiet --no-build-isolation --no-deps -e .

demo: build
	$(PY) examples/train_cuda_style.py

# The suite runs twice: with synchronous streams, and with asynchronous ones (DEVX_SIM_ASYNC=1:
# ops return before their kernels run), where missing synchronisation would show as wrong data.
test: build
	$(PY) -m pytest -q tests
	DEVX_SIM_ASYNC=1 $(PY) -m pytest -q tests
	DEVX_MOCK_CUDA=0 $(PY) -m pytest -q tests/test_tensors.py

bench: build
	$(PY) bench/bench.py

profile: build
	$(PY) examples/profile_resnet.py

clean:
	rm -rf build $(VENV) src/torch_devx/*.so src/torch_devx/include *.egg-info src/*.egg-info
