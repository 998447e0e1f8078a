# txbook: two commands on a fresh machine (Python 3.11):
#   make book   installs everything into .venv and builds the executed site into _build/html
#   make test   installs everything into .venv and runs all the tests (the Colab simulation included)
# and a few narrower ones: make fast (the tests that run in seconds, under a minute in all), make pdf (the whole
# book as one PDF, after make book), make colab (only the Colab simulation), make dist (sdist + wheel in dist/)
VENV   ?= .venv
PYTHON ?= python3
BIN    := $(VENV)/bin
# The CPU wheel on these machines; any other torch request pulls gigabytes of CUDA packages.
TORCH  ?= torch==2.13.0
# tests/test_colab.py and tests/test_packaging.py install the same torch into their fresh venvs
export TORCH
# The datasets: the project's `shared/data` folder beside the repository, named to txbook.data (which never searches)
# unless the caller chose another; without it the chapters read the download cache (tools/fetch_data.py).
TXBOOK_DATA ?= $(wildcard $(abspath $(CURDIR)/../shared/data))
export TXBOOK_DATA
# The executed chapters need the notebook's inline backend: an inherited MPLBACKEND (Agg, say) would drop every figure.
unexport MPLBACKEND
# Byte code: Python compiles a module on its first import, writes the result to __pycache__ and reads that
# afterwards (pip installs with --no-compile, below). An inherited PYTHONDONTWRITEBYTECODE (set on this CI
# machine) makes every process compile again, from source, every module it imports: each notebook kernel,
# torchrun worker and fresh venv. `python -c "import torch, torch._dynamo, matplotlib.pyplot"` took 9.3 to
# 10.4 s of CPU that way and 2.9 to 3.3 s once the byte code was written (twice and three times, on this 2-core
# machine under load); a fresh-clone CI run used 29.4 min of CPU against 39.9 the run before (ci21, ci20), on
# a machine about 13 % faster by the CI's machine reference (4.30 s against 4.95 s).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install book pdf test fast colab dist clean

install: $(VENV)/.installed

# --no-compile: Python byte-compiles a module when it is first imported; pip would compile every
# module of every package ahead of time (torch, transformers, sphinx: most never imported here).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --no-compile "$(TORCH)"
	$(BIN)/python -m pip install -q --no-compile -e ".[dev]"
	# timm, for bench/bench_vit_vs_timm.py: without its dependencies, since its torchvision would replace the
	# CPU wheel of torch by a CUDA build (the bench stands in for torchvision, which timm's ViT does not use)
	$(BIN)/python -m pip install -q --no-compile --no-deps "timm==1.0.31"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name python3 >/dev/null
	touch $@

# The site, every chapter executed; warnings are errors, so a chapter that fails to run or render fails.
# Then the static checks, and every page in headless Chromium from 127.0.0.1 with no other host reachable
# (tests/check_browser.py, through tools/chromium.py, installs Debian's chromium with apt-get when it is missing
# and it runs as root; Playwright drives that binary and never downloads a browser).
book: install
	$(BIN)/jupyter-book build . --all --warningiserror --keep-going
	$(BIN)/python tests/check_site.py _build/html
	$(BIN)/python tests/check_browser.py _build/html
	@echo "site: _build/html/index.html"

# The whole book as one PDF, printed by the same headless Chromium from the built site (make book first; it is
# built here when missing): equations typeset, figures, code wrapped, chapters in _toc.yml's order with their
# numbers, a contents and an outline (tools/book_pdf.py); copied into the site, where the introduction links to
# it, then checked against the site (tests/check_pdf.py).
pdf: install
	@test -f _build/html/index.html || $(MAKE) book
	$(BIN)/python tools/book_pdf.py _build/html -o _build/pdf/txbook.pdf
	cp _build/pdf/txbook.pdf _build/html/txbook.pdf
	$(BIN)/python tests/check_pdf.py _build/pdf/txbook.pdf --site _build/html
	@echo "pdf: _build/pdf/txbook.pdf (and _build/html/txbook.pdf)"

# Clean notebooks, package in sync with nbs/, every notebook at quick size (saved for make book), the
# Colab simulation at smoke size (full shapes, cut budgets),
# the packaging checks, and the rest of the pytest suite; in two workers, a file at a time but the quick
# pass a page at a time, the longest files first (tests/conftest.py says why).
test: install
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder

# The fast path, for a change to the package or the tools: every test not marked slow (no notebook executions, no
# fresh venvs or wheels, no torchrun jobs, no site build; pyproject.toml lists the markers), in under a minute
fast: install
	$(BIN)/python -m pytest -m "not slow" -q

# Every chapter in a simulated fresh Colab runtime, from the wheel (also part of `make test`)
colab: install
	$(BIN)/python -m pytest tests/test_colab.py

# What a release uploads: sdist and wheel, checked
dist: install
	rm -rf dist
	$(BIN)/python -m build
	$(BIN)/python -m twine check --strict dist/*
	$(BIN)/python tools/check_version.py "" dist

clean:
	rm -rf _build $(VENV) dist build
