# Quick start: `make demo` and `make test` (each sets up, builds and runs). Plain `make` builds into build/.
BUILD       ?= build
ASAN_BUILD  ?= build-asan
FUZZ_BUILD  ?= build-fuzz
FUZZ_SECONDS ?= 60
JOBS        ?= $(shell nproc)
DATA        ?= data/internvl_sft_1.2M.json
DEMO_SIM    := --model internvl-chat-1.5 --cluster a100:256 --gbs 1024 --mbs 4 --pp 8 --encoder-placement spread \
               --recompute full --distributed-optimizer --data $(DATA) --steps 20

.PHONY: all setup configure demo test test-asan fuzz bench clean

all: setup configure
	cmake --build $(BUILD) -j $(JOBS)

configure:
	@test -f $(BUILD)/build.ninja || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

setup:
	scripts/setup

demo: setup all
	$(BUILD)/fulcrum stats --data $(DATA)
	$(BUILD)/fulcrum batch --data $(DATA) --dp 8 --compare --search
	$(BUILD)/fulcrum batch --data $(DATA) --dp 64 --compare --search
	@echo "== InternVL-Chat-1.5 on 256 A100s (PP 8, encoder spread over the stages): random batches, then balanced"
	$(BUILD)/fulcrum simulate $(DEMO_SIM) --batcher random
	$(BUILD)/fulcrum simulate $(DEMO_SIM) --batcher fulcrum
	@echo "== The fastest plan for InternVL-Chat-1.5 on 256 A100s, against ZeRO-3 and Megatron-LM's rules"
	$(BUILD)/fulcrum plan --model internvl-chat-1.5 --cluster a100:256 --gbs 1024 --data $(DATA)
	@echo "== The fastest plan Megatron-LM's pipeline layout can express, as Megatron-LM arguments"
	$(BUILD)/fulcrum plan --model internvl-chat-1.5 --cluster a100:256 --gbs 1024 --data $(DATA) --no-baselines \
	  --megatron-layout --export megatron
	@echo "== A report of the fulcrum plan beside zero3, megatron and omnibal (open it in a browser)"
	scripts/demo-report $(BUILD)/fulcrum $(BUILD)/demo $(DATA)

test: setup all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: setup
	@test -f $(ASAN_BUILD)/build.ninja || cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DFULCRUM_SANITIZE=ON -DFULCRUM_BENCH=OFF
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS)

# libFuzzer targets, each run for FUZZ_SECONDS from the corpus seeded with the bundled files.
fuzz: setup
	@test -f $(FUZZ_BUILD)/build.ninja || CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFULCRUM_FUZZ=ON -DBUILD_TESTING=OFF -DFULCRUM_BENCH=OFF
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	scripts/run-fuzz $(FUZZ_BUILD)/fuzz $(FUZZ_SECONDS)

bench: setup all
	bench/run-benchmarks $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
