"""Settings every test file shares: one compilation cache per pytest process; the longest
files first; every file whole on one worker.

The tests run in parallel worker processes (pytest-xdist). JAX writes a persistent-cache entry
in place, so a worker could read an entry another worker is still writing; and the tests should
not fill the user's own cache. Each pytest process therefore points ``ESJAX_CACHE_DIR`` at a
fresh directory of its own, which the CLI processes it starts inherit, and removes it at exit.

Test order: ``--dist loadfile`` hands each file whole to a worker, in collection order
(``--no-loadscope-reorder``). A file of many minutes handed out last would run alone at the end
while the other worker idles, so the files that take longest (``pytest --durations``, summed
per file) go first.

One file, one worker: a file's module-scoped fixture (a reference run, a CLI run, a wheel
build) is built once only while all its tests run on the same worker. Under pytest 9.2 the
``loadgroup`` marks that once ensured it silently stopped grouping, and each such fixture was
built twice; so a session in which a file ran on two workers fails, naming the file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import defaultdict

import pytest

_CACHE_DIR = "ESJAX_CACHE_DIR"  # esjax._src.run.cache.ENV_DIR, without importing esjax this early
_TRUST_KEY = "ESJAX_TRUST_KEY"  # esjax._src.run.trust.KEY_ENV
# Longest first, by the seconds each file's tests took in one run of the whole suite here (2
# cores, two workers, loadfile); every other file keeps its place after these.
_LONGEST_FILES = (
    "test_suite_presets.py",  # 1071 s
    "test_presets.py",  # 598 s
    "test_strategies.py",  # 319 s
    "test_rollout.py",  # 274 s
    "test_lowrank_runs.py",  # about 230 s alone (issue 59's; not yet timed in a whole run)
    "test_suite_render.py",  # 268 s
    "test_render.py",  # 210 s
    "test_distributed.py",  # 199 s
    "test_preemption.py",  # 180 s
    "test_network_door.py",  # about 155 s alone (issue 66's; not yet timed in a whole run)
    "test_perturb.py",  # about 110 s alone
    "test_suite_brax.py",  # 177 s
    "test_sweep.py",  # 167 s
    "test_examples.py",  # 162 s
    "test_hardening.py",  # 161 s
    "test_engine.py",  # 144 s
    "test_baselines.py",  # 138 s
    "test_recipes.py",  # about 76 s alone (issue 69's)
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
    # The runs the tests make are sealed with a key of the test process's own
    # (esjax._src.run.trust), never with the user's.
    config._esjax_saved_key = os.environ.get(_TRUST_KEY)
    os.environ[_TRUST_KEY] = os.path.join(config._esjax_cache, "trust.key")


# On the controller of a parallel run: test file -> the workers that ran its tests.
_WORKERS_PER_FILE: defaultdict[str, set[str]] = defaultdict(set)


def pytest_runtest_logreport(report):
    worker = getattr(getattr(report, "node", None), "gateway", None)
    if worker is not None and report.when == "call":
        _WORKERS_PER_FILE[report.nodeid.split("::")[0]].add(worker.id)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if config.getoption("dist", "no") != "loadfile":
        return
    split = sorted(f for f, workers in _WORKERS_PER_FILE.items() if len(workers) > 1)
    if split:
        if session.exitstatus == pytest.ExitCode.OK:  # an interruption or error says more
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_sep(
                "=",
                f"tests of one file ran on two workers (fixtures built twice): {split}",
                red=True,
            )


def pytest_unconfigure(config):
    saved = getattr(config, "_esjax_saved", None)
    if saved is None:
        os.environ.pop(_CACHE_DIR, None)
    else:
        os.environ[_CACHE_DIR] = saved
    saved_key = getattr(config, "_esjax_saved_key", None)
    if saved_key is None:
        os.environ.pop(_TRUST_KEY, None)
    else:
        os.environ[_TRUST_KEY] = saved_key
    if getattr(config, "_esjax_cache", None):
        shutil.rmtree(config._esjax_cache, ignore_errors=True)
