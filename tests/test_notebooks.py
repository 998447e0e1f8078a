"""The quick pass: every notebook runs top to bottom exactly as the book build runs it, once per
`make test`.

Its assertions are the package's unit tests. Each chapter is read with the book's reader (nbdev
directives become cell tags, `#| eval: false` cells are skipped), executed by nbclient in a Jupyter
kernel (`python3`, working folder `nbs/`, the book's cell timeout, no `allow_errors`), the way
myst-nb executes it in `make book`; the kernel runs over `ipc` in a folder of its own
(tools/notebook_kernel.py), and a kernel log line in any output fails the chapter, naming the cell.
The executed notebook is saved in `_build/executed/<stem>.ipynb` with a key (hashes of the notebook
and of `txbook/`, and the chapter's size line); `make book` shows those outputs instead of running
the chapter again when the key still matches (book/_ext/txbook_book.py, `read_book`).

What differs from `nbdev-test` (still the developer's one-notebook command): a real kernel instead
of nbdev's in-process shell, and `IN_TEST` is not set, so `fit` draws its progress bars as on the
site. As `nbdev-test` does, cells flagged with one of `tst_flags` (pyproject.toml, `#| notest`) are
skipped; a chapter with such a cell is not reused by the book, which runs all of it. Sizes: quick,
as under `nbdev-test` (no GPU here; on a machine with a CUDA GPU the pass sets `TXBOOK_SIZE=quick`
unless the caller chose a size).
"""
import json, os, sys, time, tomllib, warnings
from unittest import mock

import pytest
# execute: as test_kernels.py and the book run a page
from helpers import NBS, ROOT, execute, kernel_env

from txbook_book import EXECUTED, execution_key, parse_directives, read_nbdev, save_executed
sys.path.insert(0, str(ROOT / "tools"))
from notebook_kernel import idle_gaps, log_report  # noqa: E402
# executes every notebook: not in the fast path (`pytest -m "not slow"`)
pytestmark = pytest.mark.slow

TST_FLAGS = set(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["nbdev"].get("tst_flags",
                                                                              "").split())


def size_note_in(env: dict) -> str:
    "The size line a chapter prints in a kernel started with `env`"
    from txbook.core import size_note
    with mock.patch.dict(os.environ, env, clear=True):
        return size_note()


def read_for_test(path):
    """The notebook as the book executes it, with the cells nbdev-test skips tagged; (nb, cells
    skipped)"""
    text = path.read_text(encoding="utf-8")
    nb = read_nbdev(text)
    raw = json.loads(text)["cells"]
    n = 0
    for cell, src in zip(nb.cells, raw):
        dirs, _ = parse_directives("".join(src["source"]))
        if cell.cell_type == "code" and TST_FLAGS & set(dirs):
            cell.metadata["tags"] = sorted(set(cell.metadata.get("tags", [])) | {"skip-execution"})
            n += 1
    return text, nb, n


@pytest.mark.parametrize("path", NBS, ids=lambda p: p.name)
def test_notebook(path):
    from nbclient.exceptions import CellExecutionError, CellTimeoutError
    text, nb, skipped = read_for_test(path)
    # no stale record if this run fails
    (EXECUTED / f"{path.stem}.key.json").unlink(missing_ok=True)
    env = kernel_env()
    t0 = time.time()
    try:
        execute(nb, path.parent, env)
    except (CellExecutionError, CellTimeoutError) as e:
        pytest.fail(f"{path.name} failed at quick size:\n{str(e)[-6000:]}", pytrace=False)
    wall = time.time() - t0
    # what the kernel's machinery wrote into a cell: never part of a page
    logs = log_report(path.stem, nb)
    if logs:
        pytest.fail(f"{path.name}: kernel log lines in the outputs "
                    f"(tools/notebook_kernel.py):\n{logs[-6000:]}",
                    pytrace=False)
    for cell, seconds in idle_gaps(nb):   # a kernel slow to start a cell: said, not failed
        warnings.warn(f"{path.name} {cell}: the kernel started it {seconds} s after the cell "
                      "before had ended (tools/notebook_kernel.py, idle_gaps)")
    key = {**execution_key(text, ROOT, size_note_in(env)), "reusable": skipped == 0,
           "seconds": round(wall, 1)}
    save_executed(nb, path.stem, key)
    print(f"{path.name}: {wall:.1f}s, saved in {EXECUTED.relative_to(ROOT)}"
          + (f" ({skipped} cells skipped by tst_flags: the book runs this chapter itself)"
             if skipped else ""))
