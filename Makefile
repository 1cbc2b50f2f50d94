# A thin front door: everything real lives in CMakeLists.txt.
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

TESTDATA ?= ../shared/testdata
FUZZ_SECONDS ?= 600
.PHONY: all demo test asan fuzz clean
all:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# Build, then the default demo: the tiny TinyStories model continues a prompt.
demo: all
	./$(BUILD)/kestrel run -m $(TESTDATA)/models/stories260K-f32.gguf -p "Once upon a time" -n 96 --temp 0

test: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own build folder.
asan:
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DKESTREL_SANITIZE=ON -DKESTREL_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo"

# The libFuzzer targets (tools/dev/fuzz: clang, ASan + UBSan, build-fuzz), FUZZ_SECONDS each.
fuzz:
	tools/dev/fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf build build-asan build-fuzz
