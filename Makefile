# The two commands of the README, plus the GPU and sanitizer runs. Each target does its own
# set-up on a fresh machine (system packages through scripts/setup.sh).
#   make run        build, then `sparse-mla bench` (default DeepSeek V4 suite) on the best back end
#   make test       build, then every test this machine can run (C++ via ctest, Python via pytest)
#   make test-asan  the CPU tests under AddressSanitizer + UBSan
#   make gpu-check  on a GPU machine: build, GPU tests, random recipe cases, sanitizers, benchmarks (scripts/gpu_check.sh)
JOBS ?= $(shell nproc)
PRESET ?= release
BUILD_DIR := $(if $(filter release,$(PRESET)),build,build-$(PRESET))

.PHONY: setup build run test test-cpp test-python test-asan gpu-check clean

setup:
	@bash scripts/setup.sh

build: setup
	cmake --preset $(PRESET) >/dev/null
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	./$(BUILD_DIR)/sparse-mla bench

test-cpp: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

test-python: setup
	bash scripts/python_test.sh

test: test-cpp test-python

test-asan: setup
	cmake --preset asan >/dev/null
	cmake --build build-asan -j $(JOBS)
	ctest --test-dir build-asan --output-on-failure -L cpu -j $(JOBS)

gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf build build-cpu build-asan build-gpu build-gpu-sm80
