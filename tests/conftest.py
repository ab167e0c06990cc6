"""Settings every test file shares: one compilation cache per pytest process; the longest
tests first.

The tests run in parallel worker processes (pytest-xdist). JAX writes a persistent-cache entry
in place, so a worker could read an entry another worker is still writing; and the tests should
not fill the user's own cache. Each pytest process therefore points ``ESJAX_CACHE_DIR`` at a
fresh directory of its own, which the CLI processes it starts inherit, and removes it at exit.

Test order: xdist hands tests to its two workers in collection order, so a test of several
minutes collected last (the suite presets sort late) would run alone at the end while the
other worker idles. The files of the longest tests (``pytest --durations``) go first.
"""

from __future__ import annotations

import os
import shutil
import tempfile

_CACHE_DIR = "ESJAX_CACHE_DIR"  # esjax.cache.ENV_DIR, without importing esjax this early
# Longest first; every other file keeps its place after these.
_LONGEST_FILES = (
    "test_suite_presets.py",
    "test_examples.py",
    "test_distributed.py",
    "test_suite_render.py",
    "test_suite_brax.py",
    "test_suite_craftax.py",
)


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        name = item.path.name
        return _LONGEST_FILES.index(name) if name in _LONGEST_FILES else len(_LONGEST_FILES)

    items.sort(key=rank)  # stable: the order within a file and among the rest is kept


def pytest_configure(config):
    config._esjax_cache = tempfile.mkdtemp(prefix="esjax-test-xla-")
    config._esjax_saved = os.environ.get(_CACHE_DIR)
    os.environ[_CACHE_DIR] = config._esjax_cache


def pytest_unconfigure(config):
    saved = getattr(config, "_esjax_saved", None)
    if saved is None:
        os.environ.pop(_CACHE_DIR, None)
    else:
        os.environ[_CACHE_DIR] = saved
    if getattr(config, "_esjax_cache", None):
        shutil.rmtree(config._esjax_cache, ignore_errors=True)
