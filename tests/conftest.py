import os
import sys

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

# `make test` runs the suite in two pytest-xdist workers (`-n 2 --dist loadfile
# --no-loadscope-reorder`), a test file at a time: the tests of a file share its module fixtures (a
# venv, a wheel, a torchrun job), built once in one worker. The files go out in the order of
# `FIRST` below, longest first, then the others: the quick pass (tests/test_notebooks.py) starts at
# once in one worker, the Colab simulation in the other, and the short files go to whichever worker
# is nearly free (xdist hands a worker its next file when two of its tests are left), so neither
# waits long at the end (xdist's own order, most tests first, started the two long
# passes minutes late). A scheduler that sent the quick pass out a page at a time was measured
# against one worker for the quick pass, each in a fresh clone with nothing else running: make test
# took 23.9 min with it and 23.3 without, and the whole run 46.4 min of user CPU with it against
# 41.9 (two quick pages side by side, each running two training processes, put four on two cores),
# so it went. Files must not leak process state into each other, since any two may share a worker in
# any order: e.g. a torch function mode left on the stack stops dynamo tracing (checked below).
# The files that take longest, longest first (seconds summed in a CI run of stop 50, ci11: 1093,
# 816, 156, 80, 62, 41, 21, 19, 17, 13); the others follow in pytest's order.
FIRST = ["test_notebooks", "test_colab", "test_bench_records", "test_bench", "test_ddp",
         "test_versions", "test_kernels", "test_compile", "test_packaging", "test_run_full"]


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
