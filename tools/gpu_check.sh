#!/usr/bin/env bash
# Verifying the cuda vendor on a GPU machine that has torch with CUDA but no network.
#
#   tools/gpu_check.sh prepare     here, with the package index: a Python 3.12 wheelhouse of the
#                                  build and test tools, and the cuda vendor library built with
#                                  this machine's nvcc, in .gpu_carry/ (git-ignored; ~50 MB)
#   tools/gpu_check.sh build       there: installs the tools from .gpu_carry, builds torch_devx
#                                  against that machine's torch, probes DEVX_VENDOR=cuda
#   tools/gpu_check.sh tests       there: the cuda vendor's own tests, then the suite in-process
#                                  on the vendor
#   tools/gpu_check.sh bench       there: bench/bench_cuda.py (devx(cuda) / native cuda)
#
# Each stage writes its log to $OUT (the device tool brings that folder back) and fits in one
# 10-minute command; `build` must have run on the same (still warm) machine before the others.
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpu_carry
OUT=${OUT:-/tmp/gpu_check_out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"

stage=${1:-}
case "$stage" in
prepare)
  # Run with the project's virtualenv (make build), which has pip, cmake and ninja.
  PY=${PYTHON:-.venv/bin/python}
  CMAKE=$(dirname "$PY")/cmake
  mkdir -p "$CARRY"
  $PY -m pip download -q -d "$CARRY/wheels" --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    pyyaml pytest cmake ninja expecttest setuptools wheel numpy || exit 1
  # Built here too, in case the GPU machine has the CUDA runtime but no nvcc.
  "$CMAKE" -S csrc/vendor/cuda -B "$CARRY/cuda_build" -DCMAKE_BUILD_TYPE=Release > "$CARRY/cuda_build.log" 2>&1 &&
    "$CMAKE" --build "$CARRY/cuda_build" -j2 >> "$CARRY/cuda_build.log" 2>&1 || { tail -20 "$CARRY/cuda_build.log"; exit 1; }
  cp "$CARRY/cuda_build/libdevx_vendor_cuda.so" "$CARRY/"
  rm -rf "$CARRY/cuda_build"
  du -sh "$CARRY"
  echo "carry $CARRY in the device tool's run (carry: [\"$CARRY\"])"
  ;;
build)
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    $PY -c "import sys, torch; print(sys.version.split()[0], torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
    command -v nvcc && nvcc --version | tail -1 || echo "no nvcc: the cuda vendor comes prebuilt from $CARRY"
    if [ -d "$CARRY/wheels" ]; then
      $PY -m pip install -q --no-index --find-links "$CARRY/wheels" pyyaml pytest cmake ninja expecttest setuptools wheel numpy
    fi
    $PY -m pip install -q --no-build-isolation --no-deps -e . || exit 1
    if [ ! -e src/torch_devx/libdevx_vendor_cuda.so ] && [ -e "$CARRY/libdevx_vendor_cuda.so" ]; then
      cp "$CARRY/libdevx_vendor_cuda.so" src/torch_devx/
    fi
    ls -la src/torch_devx/*.so
    DEVX_VENDOR=cuda $PY -c "
import torch, torch_devx
print('vendor', torch_devx.vendor, 'routed', torch_devx._C._compute_allocations_routed())
x = torch.randn(256, 256, device='devx')
torch.testing.assert_close((x @ x).cpu(), x.cpu() @ x.cpu(), rtol=1e-3, atol=1e-3)
print('matmul on devx(cuda) matches the CPU')"
  } 2>&1 | tee "$OUT/build.log"
  ;;
tests)
  # The vendor's own tests, then the suite in-process on the vendor: tests that need two devices
  # skip on a one-GPU machine (the `devices` marker), and tests/conftest.py still starts its child
  # processes on cpu_sim.
  {
    timeout 150 $PY -m pytest -q -rs tests/test_cuda_vendor.py tests/test_cuda_compute.py
    DEVX_VENDOR=cuda timeout 400 $PY -m pytest -q -rs -p no:cacheprovider tests
  } 2>&1 | tee "$OUT/tests.log" | tail -80
  ;;
bench)
  $PY bench/bench_cuda.py --rounds 3 --json "$OUT/bench_cuda.json" 2>&1 | tee "$OUT/bench.log"
  ;;
*)
  sed -n '2,15p' "$0"
  exit 2
  ;;
esac
