# CPU path: a local .venv with torch==2.13.0 (CPU). GPU machines: see environment.yml.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install run run-real test test-slurm gpu-check lint clean

install: $(STAMP)

# setup.py compiles the native ops (csrc/) into cherry/_C at install: a changed source reinstalls
$(STAMP): pyproject.toml setup.py workflow/scripts/install_pyg_sampling.sh $(wildcard csrc/*.* csrc/*/*.*)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip "setuptools>=68"  # setup.py builds the native ops (a 3.12 venv has no setuptools)
	@# Keep a CUDA torch if one is importable; otherwise the CPU build that lies on disk.
	$(PY) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null \
	  || $(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet --no-build-isolation -e ".[test,dgl,slurm]"
	@# PyG's NeighborLoader backend: wheels cached outside the repo, built from source on a miss.
	bash workflow/scripts/install_pyg_sampling.sh $(PY) \
	  || echo "WARNING: PyG's sampling backend is not installed; pyg runs will be recorded as skipped"
	rm -f $(VENV)/.installed-*
	touch $@

run: install
	$(VENV)/bin/snakemake --cores all

# The real-graph study (config/real.yaml: the gnn-benchmark graphs of ../shared/graphs), its outputs in
# results/real/results/ beside the default run's results/ (about 20 minutes on 2 cores).
run-real: install
	$(VENV)/bin/snakemake --cores all --configfile $(CURDIR)/config/real.yaml --directory results/real

test: install
	$(PY) -m pytest -q

# A one-node SLURM on this machine (root, Debian: apt-get), then the workflow through the SLURM
# profile (tests/workflow/test_slurm.py; `make test` runs it too where a SLURM answers, else skips it).
test-slurm: install
	bash workflow/scripts/slurm_local.sh || echo "SLURM did not start here: the SLURM test will skip"
	$(PY) -m pytest -q -m slurm tests/workflow/test_slurm.py

gpu-check:
	bash workflow/scripts/gpu_check.sh

lint: install
	$(VENV)/bin/snakemake --lint

clean:
	rm -rf $(VENV) .snakemake
