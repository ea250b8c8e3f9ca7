# Two commands for a fresh machine: `make book` and `make test`. Both build their own venv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: book test unit notebooks build lab bench clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

## The web book, every notebook executed: _build/html/index.html
book: $(STAMP)
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going

## Everything CI runs: helpers' unit tests, every notebook through nbval, the book build.
test: unit notebooks build

unit: $(STAMP)
	$(BIN)/python -m pytest tests -q

# nbval executes each notebook once; tests/book_cache.py hands its outputs to the book build.
notebooks: $(STAMP)
	PYTHONPATH=tests $(BIN)/python -m pytest -p book_cache --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=600 notebooks -q

build: book

## The notebooks, live, in JupyterLab.
lab: $(STAMP)
	$(BIN)/jupyter lab notebooks

bench: $(STAMP)
	$(BIN)/python bench/launch.py
	$(BIN)/python bench/scaling.py
	$(BIN)/python bench/communication.py

clean:
	rm -rf _build
