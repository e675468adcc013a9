# Everything sets itself up: a virtualenv in .venv with torch (2.13.0 unless TORCH_VERSION is
# given), the build tools, and torch_devx built in place against that torch.
PYTHON ?= python3
TORCH_VERSION ?= 2.13.0
VENV ?= .venv
PY := $(VENV)/bin/python
# What the venv holds. The stamp records the set it was installed for: when TORCH_VERSION (or the
# set) differs, this set is installed over it, and a build made against another torch is removed
# (CMake would notice the new torch too; this keeps no object of the old one).
DEPS_SPEC := torch==$(TORCH_VERSION) numpy pyyaml pytest expecttest setuptools wheel cmake ninja scipy-openblas32
DEPS := $(VENV)/.devx-deps
ifneq ($(file < $(DEPS)),$(DEPS_SPEC))
.PHONY: $(DEPS)
endif

.PHONY: all build demo test tsan bench profile clean

all: build

$(PY):
	$(PYTHON) -m venv $(VENV)

$(DEPS): | $(PY)
	$(PY) -m pip install $(DEPS_SPEC)
	@if [ "$$(cut -d' ' -f1 $@ 2>/dev/null)" != "torch==$(TORCH_VERSION)" ]; then \
		echo "torch is now $(TORCH_VERSION): removing the build made against another"; \
		rm -rf build src/torch_devx/*.so; \
	fi
	printf '%s\n' '$(DEPS_SPEC)' > $@

# Re-run every time: the CMake build underneath is incremental, so this costs seconds when
# nothing changed. -v shows CMake's and ninja's progress.
build: $(DEPS)
	$(PY) -m pip install -v --no-build-isolation --no-deps -e .

demo: build
	$(PY) examples/train_cuda_style.py

# GoogleTest for the C++ unit tests: Debian's libgtest-dev (headers, libraries, CMake config),
# installed where it is missing.
GTEST_HEADER := /usr/include/gtest/gtest.h
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
$(GTEST_HEADER):
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgtest-dev

# The passes (scripts/test_passes.py): the C++ unit tests of the core, the suite with synchronous
# streams, again with asynchronous ones, and the tensor tests with CUDA mocking off; each runs even
# when one before it failed, and each gets a summary line.
test: build $(GTEST_HEADER)
	$(PY) scripts/test_passes.py

# The threaded tests under ThreadSanitizer, against a build of their own (build-tsan/).
tsan: build
	$(PY) scripts/tsan.py

bench: build
	$(PY) bench/bench.py

profile: build
	$(PY) examples/profile_resnet.py

clean:
	rm -rf build build-tsan $(VENV) src/torch_devx/*.so src/torch_devx/include *.egg-info src/*.egg-info
