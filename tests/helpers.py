"""What several test files share: the repository's paths, running a command, running a notebook the
way the quick pass and the Colab simulation do, a fresh venv, the declared dependency floors, and
PyTorch's OpInfo samples. Test files import from here, never from each other (tests/conftest.py
holds only pytest's hooks and fixtures). Top-level imports are the standard library's only:
tests/test_versions.py also runs as a script in a venv that holds nothing but the floors.
"""
import os, re, shutil, subprocess, sys, tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted((ROOT / "nbs").glob("*.ipynb"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The torch the fresh venvs install (the Makefile exports the CPU wheel it pins)
TORCH = os.environ.get("TORCH", "torch==2.13.0")
# Colab's runtime (the versions the README states): Python and torch are what this machine has
# (tests/test_colab.py says why)
COLAB = {"Python": "3.13", "torch": "2.11", "transformers": "5.15", "numpy": "2.1.3",
         "fastcore": "2.2.12"}
FLOOR_EXTRAS = ["hf"]   # the extras whose floors tests/test_versions.py's floor venv installs too


# ----------------------------------------------------------------------------------------- commands


def run(*args, **kw) -> str:
    """Run a command (arguments may be paths); fail the test with the tails of its output unless it
    exits 0; stdout"""
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    assert r.returncode == 0, (
        f"{' '.join(map(str, args))} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    )
    return r.stdout


def run_process(*args, **kw) -> subprocess.CompletedProcess:
    """Run a command (arguments may be paths), its output captured as text; the caller reads the
    exit status"""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)


def run_without_pythonpath(*args, **kw) -> str:
    """`run` without PYTHONPATH (a developer's, pointing at this tree) unless `env` is given: a
    fresh venv must see only what it holds, and `python -m build` leaves txbook.egg-info in the
    tree, which pip freeze would list as installed"""
    kw.setdefault("env", {k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    return run(*args, **kw)


# For pip installs into the tests' fresh venvs of packages the tests do not examine as installed
# files: pip would byte-compile every module of every package it installs (torch's, transformers')
# ahead of time: the Colab runtime's packages took 50 s to install here (30 s of CPU), 17 s (7 s)
# without. Python compiles, on first import, only the modules a test imports, as it would anyway.
NO_COMPILE = ("--no-compile",)


def fresh_venv(path, tmp_path_factory):
    """A new venv at `path` holding torch (`$TORCH`) and nothing else but pip; returns its python.

    Installing torch takes a while, so one torch-only venv per test run is shared through a .pth
    file (nothing installs into it after it is built; Python writes its byte code there on first
    import): pip and Python see torch and its dependencies as installed in the new venv, and
    anything installed later goes into the new venv's own site-packages, which comes first on
    sys.path. Under pytest-xdist every worker's base folder is `popen-gwN` in the run's folder; the
    torch-only venv goes in the run's, built once by whichever worker asks first while the others
    wait on a lock (filelock, a dependency of torch). Its `ok` file names the torch it holds."""
    from filelock import FileLock
    _run = run_without_pythonpath
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER") and re.fullmatch(r"popen-gw\d+", root.name):
        root = root.parent   # an xdist worker's folder: the run's is the one above
    base, ok = root / "torch-only-venv", root / "torch-only-venv" / "ok"
    with FileLock(str(root / "torch-only-venv.lock")):
        if not (ok.exists() and ok.read_text() == TORCH):
            shutil.rmtree(base, ignore_errors=True)
            _run(sys.executable, "-m", "venv", base)
            _run(base / "bin" / "python", "-m", "pip", "install", "-q", *NO_COMPILE, TORCH)
            ok.write_text(TORCH)
    _run(sys.executable, "-m", "venv", path)
    py = Path(path) / "bin" / "python"
    _run(py, "-m", "pip", "install", "-q", "--upgrade", "pip")
    site = lambda p: Path(
        _run(p, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    (site(py) / "_torch_only_venv.pth").write_text(f"{site(base / 'bin' / 'python')}\n")
    return py


# ---------------------------------------------------------------------------------------- notebooks


def kernel_threads() -> dict:
    """The thread variables for the processes a test starts: under `-n W` workers each gets cores //
    W threads, so that two kernels (the quick pass and the Colab simulation side by side) do not
    oversubscribe the cores (tests/conftest.py sets them for the whole worker). With two kernels
    of two OpenMP threads each on two cores, chapter 18 at smoke size ran 3.4x slower (37 s -> 126
    s) and its neighbour 2x; with one thread each, 45 s and 83 s."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        return {}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else os.cpu_count() or 1
    n = str(max(1, cores // workers))   # of the cores this process may use
    return {k: os.environ.get(k, n) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}   # unless set


def book_timeout() -> int:
    "The book's cell timeout (_config.yml's execute.timeout)"
    import yaml
    return yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]["timeout"]


def kernel_env() -> dict:
    "The book build's environment (this process's), without pytest's own variables"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_") and k != "TXBOOK_RESULTS"}
    # the chapters need the inline backend (the Makefile unexports it too)
    env.pop("MPLBACKEND", None)
    env.update(kernel_threads())  # one thread per kernel when two test workers share the cores
    import torch
    if torch.cuda.is_available() and not (env.get("TXBOOK_SIZE") or env.get("TXBOOK_QUICK")):
        env["TXBOOK_SIZE"] = "quick"
    return env


def _run_notebook():
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    from notebook_kernel import run_notebook
    return run_notebook


def execute(nb, folder, env: dict, timeout: int | None = None) -> None:
    """Execute `nb` in place in a new kernel of its kernelspec (`python3`), working folder `folder`,
    as the book does (the quick pass, tests/test_notebooks.py; `timeout`: the book's by default);
    the kernel hears no other kernel's client (tools/notebook_kernel.py, tests/test_kernels.py)"""
    _run_notebook()(nb, folder, env, book_timeout() if timeout is None else timeout,
                    kernel_name=nb.metadata.get("kernelspec", {}).get("name", "python3"),
                    allow_errors=False)


CELL_TIMEOUT = 900   # the Colab simulation's cell timeout


def execute_in_runtime(nb, folder, env: dict, kernels, timeout: int = CELL_TIMEOUT) -> None:
    """Execute `nb` in place in a new kernel of the Colab runtime's kernelspec `colab` (in folder
    `kernels`), from `folder` (tests/test_colab.py); the kernel hears no other kernel's client
    (tools/notebook_kernel.py, tests/test_kernels.py)"""
    _run_notebook()(nb, folder, env, timeout, kernel_name="colab", kernel_dirs=[kernels])


# -------------------------------------------------------------------------------- dependency floors


def _version(v): return tuple(int(x) for x in v.split("."))


def floors(extras=FLOOR_EXTRAS) -> dict[str, str]:
    "{name: X} for every `name>=X` (no marker) of `dependencies` and `extras`; torch included"
    from packaging.requirements import Requirement
    reqs = PYPROJECT["project"]["dependencies"] + sum(
        (PYPROJECT["project"]["optional-dependencies"][e]
         for e in extras), [])
    out = {}
    for r in map(Requirement, reqs):
        if r.marker is not None: continue
        low = [s.version for s in r.specifier if s.operator == ">="]
        assert len(low) == 1, f"{r}: every dependency declares one lower bound"
        out[r.name] = low[0]
    return out


def torch_floor(python: str) -> str:
    "The torch floor pyproject.toml declares for a Python version ('3.11', '3.13')"
    from packaging.requirements import Requirement
    found = [s.version for r in map(Requirement, PYPROJECT["project"]["dependencies"])
             if r.name == "torch"
             if r.marker is None
             or r.marker.evaluate({"python_version": python, "python_full_version":
                                                       python + ".0"})
             for s in r.specifier if s.operator == ">="]
    return max(found, key=_version)


# ----------------------------------------------------------------------------------- OpInfo samples


def _sdpa_opinfo():
    """PyTorch's OpInfo entry for F.scaled_dot_product_attention (its test utilities need
    `expecttest`)"""
    from torch.testing._internal.common_methods_invocations import op_db
    found = [op for op in op_db if op.name == 'nn.functional.scaled_dot_product_attention']
    assert len(found) == 1, [op.variant_test_name for op in found]
    return found[0]


def samples(dtype):
    "(q, k, v, kwargs) of every OpInfo sample without dropout, kwargs in our names"
    out = []
    for s in _sdpa_opinfo().sample_inputs('cpu', dtype, requires_grad=False):
        kw = dict(s.kwargs)
        if kw.pop('dropout_p', 0.0) > 0: continue
        kw.pop('enable_gqa', None)                       # grouped heads are always accepted
        if 'attn_mask' in kw: kw['mask'] = kw.pop('attn_mask')
        out.append((s.input, *s.args, kw))
    return out


def pytorch_sdpa(q, k, v, kw):
    "PyTorch's scaled_dot_product_attention on a sample whose kwargs are in our names"
    import torch.nn.functional as F
    theirs = dict(kw)
    if 'mask' in theirs: theirs['attn_mask'] = theirs.pop('mask')
    return F.scaled_dot_product_attention(q, k, v, **theirs)
