"""Ready to publish: `python -m build` makes a wheel and an sdist that pass `twine check --strict`,
carry the LICENSE, hold no tests they cannot run, declare the dependency floors that
tests/test_versions.py checks, and install into a clean venv without any web-server package; the
versions a release must agree on (tag, `txbook.__version__`, every chapter's Colab pin) agree.
"""
import email, re, subprocess, sys, tarfile, zipfile
from pathlib import Path

import pytest
import txbook
# fresh_venv: torch only (one install a test run)
from helpers import ROOT, floors, fresh_venv, torch_floor
from helpers import run as _run

sys.path.insert(0, str(ROOT / "tools"))
import check_version
# builds the sdist and wheel, installs into a fresh venv: not in the fast path (`pytest -m "not
# slow"`)
pytestmark = pytest.mark.slow
# What fastprogress 1.1 pulled in (python-fasthtml and its server stack): none may come with txbook
WEB_STACK = {"python-fasthtml", "fasthtml", "starlette", "uvicorn", "websockets", "httptools",
             "uvloop",
             "watchfiles", "fastlite", "apswutils", "itsdangerous", "python-multipart",
             "oauthlib", "httpx", "sse-starlette", "anyio", "h11", "beautifulsoup4"}
SDIST_TOP = {"txbook", "txbook.egg-info", "PKG-INFO", "LICENSE", "README.md", "pyproject.toml",
             "setup.cfg", "MANIFEST.in"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """sdist and wheel as a release builds them (`python -m build`: the wheel is built from the
    sdist)"""
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    whl, sdist = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(whl) == 1 and len(sdist) == 1, sorted(p.name for p in out.iterdir())
    return dict(dir=out, whl=whl[0], sdist=sdist[0])


def test_twine_check_strict(dist):
    out = _run(sys.executable, "-m", "twine", "check", "--strict", dist["whl"], dist["sdist"])
    assert out.count("PASSED") == 2, out


def test_versions_in_file_names_and_metadata(dist):
    assert check_version.problems(dist=dist["dir"]) == []
    with zipfile.ZipFile(dist["whl"]) as z:
        meta = email.message_from_bytes(z.read(f"txbook-{txbook.__version__}.dist-info/METADATA"))
    assert meta["Version"] == txbook.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["License-File"] == "LICENSE"
    classifiers = meta.get_all("Classifier")
    assert any(c.startswith("Development Status ::") for c in classifiers), classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    requires = meta.get_all("Requires-Dist")
    fp = [r for r in requires if r.startswith("fastprogress")]
    assert fp and "<1.1" in fp[0], fp   # 1.1 brings the web stack
    # the floors tests/test_versions.py checks reach the wheel: torch's two, the hf extra's
    # transformers
    from packaging.requirements import Requirement
    from packaging.version import Version
    def floor_for(name, **env):
        found = [s.version for r in map(Requirement, requires) if r.name == name
                 if r.marker is None or r.marker.evaluate(env) for s in r.specifier
                 if s.operator == ">="]
        return max(found, key=Version)
    py = lambda v: dict(python_version=v, python_full_version=v + ".0", extra="")
    assert floor_for("torch", **py("3.11")) == torch_floor("3.11")
    assert floor_for("torch", **py("3.13")) == torch_floor("3.13")
    assert "transformers" not in {Requirement(r).name for r in requires
                                  if not Requirement(r).marker}
    assert floor_for("transformers", **{**py("3.11"), "extra": "hf"}) == floors()["transformers"]


def test_license_ships_in_wheel_and_sdist(dist):
    license = (ROOT / "LICENSE").read_text()
    assert license.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in license
    assert "END OF TERMS AND CONDITIONS" in license   # the full text, not a stub
    with zipfile.ZipFile(dist["whl"]) as z:
        assert z.read(f"txbook-{txbook.__version__}.dist-info/licenses/LICENSE").decode() == license
    with tarfile.open(dist["sdist"]) as t:
        assert t.extractfile(f"txbook-{txbook.__version__}/LICENSE").read().decode() == license


def test_sdist_holds_the_package_only(dist):
    """No tests, notebooks or book: they need the repository (nbdev, ../shared data) and could not
    run"""
    with tarfile.open(dist["sdist"]) as t:
        sdist_names = t.getnames()
    names = [n.split("/", 2)[1:] for n in sdist_names]
    top = {n[0] for n in names if n}
    assert top <= SDIST_TOP, f"unexpected in the sdist: {sorted(top - SDIST_TOP)}"
    with zipfile.ZipFile(dist["whl"]) as z:
        # the sdist and the wheel built from it hold the same modules
        mods = {n.split("/")[1] for n in z.namelist() if n.startswith("txbook/")}
        wheel_names = z.namelist()
    assert {n[1] for n in names if len(n) == 2 and n[0] == "txbook" and n[1]} == mods
    # make test writes byte code into the tree (the Makefile): none of it may ship
    compiled = [n for n in sdist_names + wheel_names
                if "__pycache__" in n or n.endswith((".pyc", ".pyo"))]
    assert not compiled, f"byte code in the sdist or the wheel: {compiled[:5]}"


def test_wheel_installs_in_a_clean_venv_without_a_web_stack(dist, tmp_path, tmp_path_factory):
    """A fresh venv (torch first, as Colab or the Makefile has it), then the wheel with its
    dependencies"""
    venv = tmp_path / "venv"
    py = fresh_venv(venv, tmp_path_factory)
    _run(py, "-m", "pip", "install", "-q", dist["whl"])
    installed = {l.split("==")[0].lower() for l in _run(py, "-m", "pip", "freeze", "--all").split()}
    assert "txbook" in installed
    assert not installed & WEB_STACK, (
        f"web-server packages installed with txbook: {installed & WEB_STACK}"
    )
    assert not installed & {"nbdev",
                            "jupyter-book"}, "development tools leaked into the dependencies"
    with zipfile.ZipFile(dist["whl"]) as z:
        # the wheel's modules (the tree may have changed since the build)
        mods = sorted(Path(n).stem for n in z.namelist()
                      if n.startswith("txbook/") and n.endswith(".py")
                      and not Path(n).stem.startswith("_"))
    assert "core" in mods and "data" in mods, mods
    code = ("import importlib, sys, txbook\n"
            f"for m in {mods!r}: importlib.import_module('txbook.' + m)\n"
            "assert 'nbdev' not in sys.modules\n"
            "from txbook.core import show_doc, in_colab\n"
            "print(txbook.__version__, txbook.__file__, in_colab(), str(show_doc(in_colab))[:40])")
    out = _run(py, "-c", code, cwd=tmp_path).split()
    assert out[0] == txbook.__version__ and str(venv) in out[1] and out[2] == "False", out


def test_version_check_agrees_today_and_catches_disagreement(tmp_path):
    """The release workflow's check (tools/check_version.py) passes on this tree and fails when it
    should"""
    v = txbook.__version__
    assert check_version.package_version() == v
    assert check_version.problems() == []
    assert check_version.problems(f"v{v}") == [] and check_version.problems(v) == []
    assert check_version.problems("v99.0.0"), "a wrong tag must be reported"
    # a copy of the tree where one chapter pins another version
    (tmp_path / "txbook").mkdir(); (tmp_path / "nbs").mkdir()
    (tmp_path / "txbook" / "__init__.py").write_text((ROOT / "txbook" / "__init__.py").read_text())
    nb = next((ROOT / "nbs").glob("*.ipynb"))
    (tmp_path / "nbs" / nb.name).write_text(nb.read_text().replace(f"txbook=={v}", "txbook==0.0.1"))
    found = check_version.problems(root=tmp_path)
    assert found and all("0.0.1" in p for p in found), found
    r = subprocess.run([sys.executable, ROOT / "tools" / "check_version.py", "v99.0.0"],
                       capture_output=True)
    assert r.returncode == 1


def test_readme_links_are_absolute():
    "PyPI renders README.md without the repository: every link and image must be an absolute URL"
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)", text) + re.findall(r'(?:src|href)="([^"]+)"', text)
    assert targets
    relative = [t for t in targets if not re.match(r"https?://", t)]
    assert not relative, f"relative links in README.md: {relative}"


@pytest.mark.parametrize("minor", ["3.10", "3.13"])
def test_sources_compile_on_the_oldest_and_newest_python(minor):
    """requires-python >= 3.10 and the classifiers up to 3.13: every module must at least compile
    there"""
    import shutil
    candidates = [str(p)
                  for p in sorted(Path.home().glob(f".pyenv/versions/{minor}*/bin/python{minor}"))]
    candidates += [e for e in [shutil.which(f"python{minor}")] if e]
    # pyenv shims may not
    works = lambda e: subprocess.run([e, "--version"], capture_output=True).returncode == 0
    exe = next((e for e in candidates if works(e)), None)
    if exe is None: pytest.skip(f"no python{minor} here (CI's test workflow checks it)")
    files = sorted(str(p) for p in (ROOT / "txbook").glob("*.py"))
    _run(exe, "-c", "import sys\nfor f in sys.argv[1:]: compile(open(f).read(), f, 'exec')", *files)
