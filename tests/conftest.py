import os
import sys
from pathlib import Path

import pytest
# the shared helpers: test files import from tests/helpers.py, never from each other
from helpers import ROOT, kernel_threads

# The datasets: the project keeps them in a `shared/data` folder beside the repository (README).
# txbook.data reads the data folder from an argument or $TXBOOK_DATA, never from where it runs, so
# the tests name the folder here, for this process, the notebook kernels and the scripts they start,
# unless the caller chose one. A worktree may sit deeper than a clone: the repository's parents are
# searched, not the working directory's. Without such a folder the loaders read the download cache
# (tools/fetch_data.py fills it; tests/test_colab.py unsets the variable).
if not os.environ.get("TXBOOK_DATA", "").strip():
    _shared = next(
        (d / "shared" / "data" for d in ROOT.parents if (d / "shared" / "data").is_dir()), None)
    if _shared is not None:
        os.environ["TXBOOK_DATA"] = str(_shared)
sys.path.insert(0, str(ROOT / "book" / "_ext"))  # the book's Sphinx extension

# Threads: under `-n W` the W workers share the cores, so each worker, and every process its tests
# start (bench scripts, fresh venvs, torchrun, notebook kernels), gets cores // W OpenMP threads,
# unless the caller set OMP_NUM_THREADS (tests/helpers.py `kernel_threads`). Set before torch is
# imported here, which reads it once. An OpenMP thread that waits for a core burns CPU: beside a
# busy second worker, bench_vit_vs_timm's test took 8.3 s of user CPU with two threads against 4.6
# s with one.
os.environ.update(kernel_threads())
# Byte code: the processes the tests start (kernels, torchrun, fresh venvs) write what they compile,
# as the Makefile has it for `make test` (it says why), when pytest is run directly too.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False   # and this process, for the modules it has yet to import

# `make test` runs the suite in two pytest-xdist workers (`-n 2 --dist loadfile
# --no-loadscope-reorder`). The unit of work a worker is sent is a test file, whose tests share its
# module fixtures (a venv, a wheel, a torchrun job), built once in one worker; but each page of the
# quick pass (tests/test_notebooks.py) is a unit of its own (`FilesAndPages` below; xdist's
# `loadgroup` would do it with marks, but its renaming of test ids has no effect under pytest 9).
# The units go out in the order of `FIRST`, longest first, then the other files: the Colab
# simulation to one worker, the quick pass's pages to the other, and whichever worker has no more
# than two tests left takes the next unit (xdist's rule), so that when the Colab simulation ends its
# worker takes quick pages too, and the short files come last, filling both workers to the end.
# With the quick pass as one file in one worker, that worker was the whole of make test (ci21: 16.8
# min of quick pages against 14.5 min for the Colab simulation and every other file in the other
# worker); make test took 17.1 min that way, and 15.3 a page at a time in a later fresh-clone run
# (ci23). xdist's own order, most tests first, had started the two long passes minutes late. A
# quick pass sent out a page at a time had been measured before, in stop 50, and lost (23.9 min
# against 23.3: two quick pages side by side, each running two training processes, put four on two
# cores, it said; 08, 09 and 19 then started all their runs at once, and now one per core; 06, 07,
# 10 and 14 still start theirs, three or four, at once). Files must not leak process state into each
# other, since any two may share a worker in any order: e.g. a torch function mode left on the
# stack stops dynamo tracing (checked below).
# The Colab simulation (the longest unit), the quick pages, then the files that take longest,
# longest first (seconds summed in a CI run, ci21: 633; 1006 in all for the 34 pages; 38, 35, 32,
# 27, 27, 20, 17, 12.5, 11.5); the other files follow in pytest's order.
FIRST = ["test_colab", "test_notebooks", "test_ddp", "test_bench_records", "test_bench",
         "test_versions", "test_compile", "test_packaging", "test_kernels", "test_device",
         "test_run_full"]
PER_PAGE = "test_notebooks"   # the file whose tests are units of their own: the quick pass


def _process_state() -> dict:
    "What one test file could leave changed for the files after it in the same worker process"
    import torch
    return {"torch function modes": len(torch.overrides._get_current_function_mode_stack()),
            "default device": str(torch.get_default_device()),
            "default dtype": torch.get_default_dtype(),
            "grad enabled": torch.is_grad_enabled(),
            "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
            "threads": torch.get_num_threads(),
            "process group": torch.distributed.is_available()
            and torch.distributed.is_initialized(),
            "dispatch modes": torch._C._len_torch_dispatch_stack(),
            "inference mode": torch.is_inference_mode_enabled(),
            "autocast": torch.is_autocast_enabled("cpu"),
            "float32 matmul precision": torch.get_float32_matmul_precision()}


@pytest.fixture(autouse=True)
def _leaves_process_state_as_found():
    """Every test leaves the global torch state of `_process_state` as it found it: under `--dist
    loadfile` any two test files may share a worker, in any order (a `set_default_device` left
    behind once stopped dynamo tracing). Not seen here: what module fixtures or imports change
    (test_properties and test_swin set one thread at import, for every file in the worker, as in a
    sequential run)."""
    before = _process_state()
    yield
    after = _process_state()
    changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert not changed, f"the test changed process state (before, after): {changed}"


# Tests that wait for something this checkout may not have carry a marker naming it (pyproject.toml
# registers them). While it is missing they are deselected, not skipped: a run counts only the tests
# it ran (the summary says how many wait, and for what); `pytest -m needs_gpu_records` selects them
# anyway. `needs_gpu_records`: the full-size GPU records in results/full/ (tools/run_full.py on a
# GPU writes them); `needs_site`: a built site (make book; CI checks the same through
# tests/check_site.py in make book, after make test).
WAITS = {"needs_gpu_records": lambda: any((ROOT / "results" / "full").glob("*.json")),
         "needs_site": lambda: (ROOT / "_build" / "html" / "index.html").exists()}


def _longest_first(item) -> int:
    "A test's place in the run: its file's index in FIRST, or after them all"
    name = item.path.stem
    return FIRST.index(name) if name in FIRST else len(FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_longest_first)   # stable: a file's tests keep their order
    asked = config.getoption("markexpr", "") or ""   # `-m needs_site` asks for them anyway
    missing = {m for m, present in WAITS.items() if m not in asked and not present()}
    waiting = [it for it in items if any(it.get_closest_marker(m) for m in missing)]
    if waiting:
        config.hook.pytest_deselected(items=waiting)
        ids = set(map(id, waiting))
        items[:] = [it for it in items if id(it) not in ids]
        config._txbook_waiting = {m: sum(bool(it.get_closest_marker(m)) for it in waiting)
                                  for m in missing}


def pytest_terminal_summary(terminalreporter, config):
    for m, n in getattr(config, "_txbook_waiting", {}).items():
        if n: terminalreporter.write_line(f"{n} deselected: marked {m}, which this checkout does "
                                          "not have yet")


def _unit(nodeid: str) -> str:
    "The unit of work a test belongs to: its file, or itself for a page of the quick pass"
    file = nodeid.split("::", 1)[0]
    return nodeid if Path(file).stem == PER_PAGE else file


# optional: pytest without pytest-xdist (tests/test_loaders.py in the Colab and floor venvs) knows
# no such hook, and would stop at collection
@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under `--dist loadfile`: xdist's file scheduler, but a quick page is a unit of its own (see
    FIRST); any other `--dist` as xdist has it"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesAndPages(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)
    return FilesAndPages(config, log)
