"""The Colab simulation, and the smoke pass: every chapter runs top to bottom in a fresh Colab-like
runtime, at smoke size (`TXBOOK_SIZE=smoke`: the full experiment's shapes and code paths, cut
budgets).

A new user opens a chapter in Colab: a runtime with Colab's preinstalled packages (no txbook, no
nbdev, no einops/fastcore/fastprogress), `google.colab` already imported, no `../shared` folder, and
a GPU, on which the chapters pick their full size. The chapter's hidden first cell must install the
book's package at the book's version with pip, and everything after it must run. There is no GPU
here, so the chapters run at smoke size: every line a GPU reader's full-size run executes, with the
training budgets cut so that all the chapters fit in a few minutes of CPU. This is the only place CI
runs the full-size code paths; the quick sizes run once, in tests/test_notebooks.py. This test
rebuilds that situation:

- the wheel is built from this tree into a temporary folder that pip sees through `PIP_FIND_LINKS`,
  so the first cell's `pip install txbook==<version>` resolves to it (its dependencies come from the
  registry);
- a fresh venv holds only what Colab preinstalls and the chapters rely on (`COLAB_PREINSTALLED`), at
  Colab's versions wherever this machine can install them (`COLAB`: transformers 5.15, numpy 2.1.3,
  fastcore 2.2.12). Two things differ from Colab and cannot be helped here: Python is this machine's
  3.11 (Colab's is 3.13), and torch is the local CPU wheel `$TORCH`, default `torch==2.13.0`
  (Colab's is a CUDA build of 2.11: any other torch needs gigabytes of CUDA packages here);
- a stub `google.colab` package is on the venv's path and an IPython startup file imports it when
  the kernel starts, as Colab does before any cell runs;
- each notebook is copied ALONE into an empty folder: no `shared/data` above it, `TXBOOK_DATA`
  unset, a fresh `HOME`, and `TXBOOK_CACHE` set to a reader's own folder (`my-datasets`, not named
  `txbook`) whose `<dataset>/` subfolders hold the dataset files as a finished download of
  `txbook.data` would leave them;
- no network for Hugging Face (`HF_HUB_OFFLINE=1`, empty cache): a chapter's `in_colab()` demo that
  loads pretrained weights must skip cleanly when they cannot be fetched;
- before each chapter, whatever the previous chapter's first cell installed is uninstalled again, so
  every chapter's own first cell does the install.

- `TXBOOK_SIZE=smoke` in the kernel's environment; the last cell checks that the chapter saw it.

Notebooks are found by glob, so new chapters are included. After the chapters, tests/test_loaders.py
runs in the same runtime, against the installed wheel, so the loaders are tested under Colab's
transformers too (the newest runs in the project's venv, the declared floors in
tests/test_versions.py). `make colab` runs only this file; `make test` runs it with the rest.
"""
import json, os, shutil, subprocess, sys, time, warnings
from pathlib import Path

import pytest
import txbook
from helpers import (COLAB, NBS, NO_COMPILE, ROOT, execute_in_runtime, fresh_venv,
                     kernel_threads)
from helpers import run_without_pythonpath as _run

# Colab's runtime: COLAB (tests/helpers.py; the versions the README states)
# What a Colab runtime preinstalls that the chapters (and tests/test_loaders.py: pytest) use,
# besides torch, at Colab's versions where COLAB has them. Colab has many more (pandas, tqdm, ...:
# no chapter imports them; add any a chapter starts to need; appendix B's cross-checks need SciPy,
# which scikit-learn brings, and statsmodels, both in Colab's image). txbook's own dependencies
# einops and fastprogress (and safetensors, here only through transformers) are left out on purpose:
# the first cell's pip install must bring them.
COLAB_PREINSTALLED = [f"numpy=={COLAB['numpy']}", "matplotlib", "ipywidgets", "ipykernel",
                      "scikit-learn", "statsmodels", f"transformers~={COLAB['transformers']}.0",
                      f"fastcore=={COLAB['fastcore']}", "pytest"]
sys.path.insert(0, str(ROOT / "tools"))
# the datasets the chapters read: name -> (file, urls, sha256)
from fetch_data import FILES as DATASETS
from notebook_kernel import idle_gaps, log_report   # a kernel of its own over ipc (issue 41)
# builds a wheel and a fresh venv, executes every notebook: not in the fast path (`pytest -m "not
# slow"`)
pytestmark = pytest.mark.slow
# The last cell appended to each chapter: proof that the run was the simulated Colab one
PROBE = """import sys, txbook, json, txbook.core
print(json.dumps({'colab': 'google.colab' in sys.modules, 'txbook': txbook.__file__,
                  'version': txbook.__version__, 'nbdev': 'nbdev' in sys.modules,
                  'size': txbook.core.size()}))"""
SIZE = "smoke"   # the size the simulated runtime runs the chapters at (a Colab GPU reader's: full)


def _installed(sites) -> set[str]:
    """The distributions installed in the venv's own site-packages folders `sites` (purelib and
    platlib), by lower-cased name: what `pip freeze --all` lists there, read without starting pip (a
    second per chapter). What a chapter's first cell installs lands there, first on the venv's path;
    the torch-only venv's packages, behind it (tests/helpers.py `fresh_venv`), are not listed, so a
    copy of one of them that a chapter installs is listed, and removed after the chapter."""
    import importlib, importlib.metadata as md
    importlib.invalidate_caches()   # the folders' listings, cached by their modification times
    names = {d.metadata.get("Name") for d in md.distributions(path=[str(s) for s in sites])}
    return {n.lower() for n in names if n}   # pip freeze, too, skips a dist-info without a name


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """A Colab-like runtime: wheel folder, fresh venv, google.colab stub, startup import,
    kernelspec, HOME"""
    t0 = time.time()
    base = tmp_path_factory.mktemp("colab")
    wheels = base / "wheels"
    _run(sys.executable, "-m", "build", "--wheel", "--outdir", wheels, ROOT)
    whl = list(wheels.glob("txbook-*.whl"))
    assert [w.name.split("-")[1] for w in whl] == [txbook.__version__], whl
    venv = base / "venv"
    py = fresh_venv(venv, tmp_path_factory)
    _run(py, "-m", "pip", "install", "-q", *NO_COMPILE, *COLAB_PREINSTALLED)
    paths = json.loads(_run(py, "-c", "import json, sysconfig; "
                                      "print(json.dumps(sysconfig.get_paths()))"))
    site, sites = Path(paths["purelib"]), sorted({paths["purelib"], paths["platlib"]})
    baseline = _installed(sites)
    assert not baseline & {"txbook", "nbdev", "einops", "fastprogress"}, baseline
    versions = json.loads(_run(py, "-c", "import json, importlib.metadata as m; "
                               "print(json.dumps({n: m.version(n) for n in "
                               "('transformers', 'numpy', 'fastcore')}))"))
    for name, v in versions.items():   # Colab's (5.15 means any 5.15.x)
        assert v == COLAB[name] or v.startswith(COLAB[name] + "."), (name, v, COLAB[name])
    # google.colab: a namespace package `google` (no __init__.py, so google.protobuf still imports)
    stub = base / "colab_stub"
    (stub / "google" / "colab").mkdir(parents=True)
    (stub / "google" / "colab" / "__init__.py").write_text('"A stub of Colab\'s google.colab '
                                                           'package"\n')
    (site / "google_colab_stub.pth").write_text(f"{stub}\n")
    ipython = base / "ipython"
    (ipython / "profile_default" / "startup").mkdir(parents=True)
    (ipython / "profile_default" / "startup" / "00-colab.py").write_text("import google.colab\n")
    specs = base / "kernels"
    _run(py, "-m", "ipykernel", "install", "--prefix", specs, "--name", "colab", "--display-name",
         "colab")
    home = base / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("TXBOOK_DATA", "TXBOOK_CACHE", "TXBOOK_QUICK", "TXBOOK_SIZE",
                        "TXBOOK_RESULTS",
                        "IN_TEST", "MPLBACKEND", "PYTHONPATH", "VIRTUAL_ENV", "JUPYTER_PATH",
                        "HF_HOME", "HF_HUB_CACHE") and not k.startswith("PYTEST_")}
    # the reader's own download folder, named as they like (not `txbook`): the chapters must not
    # care
    cache = base / "my-datasets"
    env.update(TXBOOK_SIZE=SIZE, TXBOOK_CACHE=str(cache), HOME=str(home), IPYTHONDIR=str(ipython),
               HF_HUB_OFFLINE="1", HF_HOME=str(base / "hf"),
               PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
               PIP_FIND_LINKS=" ".join([str(wheels)]
                                       + os.environ.get("PIP_FIND_LINKS", "").split()),
               # keep pip's cache outside the fresh HOME: the registry downloads are not what is
               # tested
               PIP_CACHE_DIR=os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")))
    # one thread per kernel when two test workers share the cores (conftest)
    env.update(kernel_threads())
    print(f"colab runtime ready in {time.time() - t0:.0f}s")
    return dict(base=base, py=py, sites=sites, env=env, baseline=baseline, home=home, cache=cache,
                kernels=specs / "share" / "jupyter" / "kernels")


def _dataset_files():
    """Where this machine has each dataset file (shared data or the cache; never downloads): {(name,
    file): path}"""
    from txbook.data import _locate
    try:
        return {(n, f): _locate(n, f, [], sha) for n, files in DATASETS.items()
                for f, _, sha in files}
    except FileNotFoundError as e:
        # a developer's machine may skip; CI must not lose the smoke pass
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            f"datasets missing here (run tools/fetch_data.py): {e}")


def _prefill_cache(cache, sources):
    """The download cache as txbook.data leaves it after a finished download (files under
    cache_dir(name))"""
    shutil.rmtree(cache, ignore_errors=True)
    for (name, f), src in sources.items():
        (cache / name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, cache / name / f)
    return {p.relative_to(cache) for p in cache.rglob("*")}


def _no_shared_above(folder):
    return not any((d / "shared" / "data").exists() for d in (folder, *folder.parents))


@pytest.mark.parametrize("path", NBS, ids=lambda p: p.stem)
def test_chapter_runs_in_colab(colab, path):
    from nbformat import read, write, NO_CONVERT
    from nbformat.v4 import new_code_cell

    sources = _dataset_files()
    py, env = colab["py"], colab["env"]
    # a fresh runtime: drop what an earlier chapter's first cell installed
    extra = sorted(_installed(colab["sites"]) - colab["baseline"])
    if extra: _run(py, "-m", "pip", "uninstall", "-q", "-y", *extra)
    before = _prefill_cache(colab["cache"], sources)
    work = colab["base"] / "run" / path.stem
    work.mkdir(parents=True)
    assert _no_shared_above(work), f"a shared/data folder is visible from {work}"
    shutil.copy(path, work / path.name)
    assert [p.name for p in work.iterdir()] == [path.name]
    nb = read(work / path.name, as_version=4)
    nb.cells.append(new_code_cell(PROBE))
    t0 = time.time()
    try: execute_in_runtime(nb, work, env, colab["kernels"])
    finally:
        write(nb, work / f"{path.stem}.executed.ipynb", version=NO_CONVERT)
    print(f"{path.name}: {time.time() - t0:.0f}s wall in the simulated Colab runtime, {SIZE} size")
    logs = log_report(path.stem, nb)
    assert not logs, (
        f"{path.name}: kernel log lines in the outputs (tools/notebook_kernel.py):\n{logs[-6000:]}"
    )
    for cell, seconds in idle_gaps(nb):   # a kernel slow to start a cell: said, not failed
        warnings.warn(f"{path.name} {cell} (Colab simulation): the kernel started it {seconds} s "
                      "after the cell before had ended (tools/notebook_kernel.py, idle_gaps)")
    probe = json.loads(
        "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("name") == "stdout"))
    assert probe["colab"], "google.colab was not imported in the kernel"
    assert probe["version"] == txbook.__version__
    # the wheel, not this tree
    assert Path(probe["txbook"]).is_relative_to(colab["base"] / "venv"), probe
    assert not probe["nbdev"], "the chapter imported nbdev, which Colab does not have"
    assert probe["size"] == SIZE, probe
    cache = colab["cache"]
    after = {p.relative_to(cache) for p in cache.rglob("*")}
    assert after == before, (
        f"the chapter downloaded into the cache (or left files): {after - before}"
    )


def test_loaders_in_colab_runtime(colab, tmp_path):
    """tests/test_loaders.py under Colab's transformers, against the wheel as a chapter's first cell
    installs it"""
    py, env = colab["py"], colab["env"]
    extra = sorted(_installed(colab["sites"]) - colab["baseline"])
    if extra: _run(py, "-m", "pip", "uninstall", "-q", "-y", *extra)
    _run(py, "-m", "pip", "install", "-q", f"txbook=={txbook.__version__}", env=env)
    where = _run(py, "-c", "import txbook, transformers; print(txbook.__file__, "
                           "transformers.__version__)",
                 cwd=tmp_path, env=env).split()
    assert Path(where[0]).is_relative_to(colab["base"] / "venv"), where   # the wheel, not this tree
    assert where[1].startswith(COLAB["transformers"] + "."), where
    # from an empty folder: sys.path gets tests/ (pytest's rootdir import mode), not the tree's
    # txbook/
    r = subprocess.run(
        [str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" /
         "test_loaders.py")], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, (
        f"tests/test_loaders.py with transformers {where[1]}:\n{r.stdout[-6000:]}"
    )
