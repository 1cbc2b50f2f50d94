# A thin front door: everything real lives in CMakeLists.txt.
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

FUZZ_SECONDS ?= 600
# Installs the Debian packages the build (and, with --test, the tests) need; idempotent, quiet
# when all are there. DEPS=true skips it.
DEPS ?= tools/dev/install-deps.sh
.PHONY: all demo test asan emu fuzz clean
CONFIGURE = cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
all:
	@$(DEPS)
	$(CONFIGURE)
	cmake --build $(BUILD) -j $(JOBS)

# Build the CLI (not the tests), then the demo: the built-in TinyStories model (tools/cli/demo)
# continues a prompt.
demo:
	@$(DEPS)
	$(CONFIGURE)
	cmake --build $(BUILD) -j $(JOBS) --target kestrel_cli
	./$(BUILD)/kestrel run --color -p "Once upon a time" -n 96 --temp 0

test:
	@$(DEPS) --test
	$(MAKE) all DEPS=true
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own build folder,
# with the CUDA backend's kernels on the SIMT emulator (so out-of-bounds device accesses show).
# Tests, server and CLI compile at -O1 there (CMakeLists.txt); the costliest oracle loops sample.
asan:
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DKESTREL_SANITIZE=ON -DKESTREL_CUDA_EMULATE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo"

# The CUDA backend without a GPU: the .cu sources compiled as host C++ over the SIMT emulator
# (backends/cuda/emu); the tests labelled cuda run it against the reference.
emu:
	@$(DEPS) --test
	cmake -S . -B build-emu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA_EMULATE=ON $(CMAKE_FLAGS)
	cmake --build build-emu -j $(JOBS)
	cd build-emu && ctest --output-on-failure -j $(JOBS) -L cuda

# The libFuzzer targets (tools/dev/fuzz: clang, ASan + UBSan, build-fuzz), FUZZ_SECONDS each.
fuzz:
	tools/dev/fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf build build-asan build-emu build-fuzz
