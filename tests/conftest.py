import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted((ROOT / "nbs").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "book" / "_ext"))  # the book's Sphinx extension

# `make test` runs the suite in two pytest-xdist workers, a test file at a time (`-n 2 --dist loadfile`): the
# tests of a file share its module fixtures (a venv, a wheel, a torchrun job), built once in one worker. The Colab
# simulation (tests/test_colab.py) mostly waits on pip, so it overlaps well with the quick pass in the other.
# (`--dist loadgroup` with xdist_group marks would be finer, but pytest 9.2 ignores xdist 3.8's group suffix.)
# Files must not leak process state into each other, since any two may share a worker in any order: e.g. a
# torch function mode left on the stack (tests/test_device.py checks it leaves none) stops dynamo tracing.


def kernel_threads() -> dict:
    """The thread variables for a notebook kernel started by a test: under `-n W` workers each kernel gets
    cores // W threads, so that two kernels (the quick pass and the Colab simulation side by side) do not
    oversubscribe the cores. With two kernels of two OpenMP threads each on two cores, chapter 18 at smoke
    size ran 3.4x slower (37 s -> 126 s) and its neighbour 2x; with one thread each, 45 s and 83 s."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        return {}
    n = str(max(1, (os.cpu_count() or 1) // workers))
    return {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}
