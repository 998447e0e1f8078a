"""The addresses nbdev writes into the package lead to pages of the built site (issue 8, item 6).

nbdev links every module docstring (`Docs: <doc_host><doc_baseurl>/attention.html.md`),
`txbook/__init__.py`, `nbs/llms.txt` and every symbol of `txbook/_modidx.py`
(`attention.html#attention`, joined to doc_host + doc_baseurl) to the documentation site. The book
is published at `https://<owner>.github.io/<repo>/` (GitHub Pages of the repository in
`_config.yml`), chapters at `nbs/<notebook>.html`; nbdev names a chapter `nbs/<notebook without its
number>.html`, which the book's extension writes as a redirect (plus the `.html.md` Markdown copy).
The tests here need no build: every link points into the book's `nbs/` folder at the name of an
existing notebook. `missing_targets(site)` checks the files on a built site; tests/check_site.py
runs it after every build (and the last test here does when `_build/html` exists).
"""
from __future__ import annotations

import ast, re, sys
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
# noqa: E402  (the book's extension: nbdev's page name of a notebook)
from txbook_book import nbdev_page

_re_url = re.compile(r"https?://[^\s)>\]\"'`]+")


def site_root(root: Path = ROOT) -> str:
    """The published book's address, `https://<owner>.github.io/<repo>/`, from `_config.yml`'s
    repository"""
    url = yaml.safe_load((root / "_config.yml").read_text())["repository"]["url"]
    owner, repo = urlsplit(url).path.strip("/").split("/")[:2]
    return f"https://{owner.lower()}.github.io/{repo}/"


def doc_links(root: Path = ROOT) -> list[tuple[str, str]]:
    """(where, URL) of every link into the documentation site in the package's docstrings, llms.txt
    and _modidx"""
    host = urlsplit(site_root(root)).netloc
    out = []
    for py in sorted((root / "txbook").glob("*.py")):
        if py.name == "_modidx.py":
            continue
        doc = ast.get_docstring(ast.parse(py.read_text())) or ""
        out += [(f"{py.relative_to(root)} docstring", u.rstrip(".,;:"))
                for u in _re_url.findall(doc) if urlsplit(u).netloc == host]
    llms = root / "nbs" / "llms.txt"
    if llms.exists():
        out += [(str(llms.relative_to(root)), u.rstrip(".,;:"))
                for u in _re_url.findall(llms.read_text()) if urlsplit(u).netloc == host]
    idx = root / "txbook" / "_modidx.py"
    if idx.exists():
        ns: dict = {}
        exec(idx.read_text(), ns)
        d = ns["d"]
        s = d["settings"]
        # as nbdev.doclinks._qual_sym joins them
        base = urljoin(s["doc_host"] + "/", s["doc_baseurl"])
        for mod, syms in d["syms"].items():
            out += [(f"_modidx {sym}", urljoin(base + "/", loc)) for sym, (loc, _) in syms.items()]
    return out


def site_path(url: str, root: Path = ROOT) -> str | None:
    """The file a link names on the built site (`nbs/attention.html.md`), or None if it is not on
    the site"""
    base = site_root(root)
    if not url.startswith(base):
        return None
    path = urlsplit(url).path[len(urlsplit(base).path):]
    return path + "index.html" if path == "" or path.endswith("/") else path


def chapter_of(path: str, root: Path = ROOT) -> Path | None:
    """The notebook whose nbdev page name `path` is (`nbs/attention.html(.md)` →
    nbs/01_attention.ipynb)"""
    m = re.fullmatch(r"nbs/([^/]+\.html)(\.md)?", path)
    if not m:
        return None
    nbs = [nb for nb in (root / "nbs").glob("*.ipynb") if nbdev_page(nb.name) == m.group(1)]
    return nbs[0] if len(nbs) == 1 else None


def missing_targets(site: Path, root: Path = ROOT) -> list[str]:
    """Links whose target file is not in the built `site`, or whose redirect leads to no page, or
    whose #anchor is absent"""
    bad, seen = [], {}
    for where, url in doc_links(root):
        path = site_path(url, root)
        if path is None:
            bad.append(f"{where}: {url} is not on the book's site {site_root(root)}")
            continue
        f = site / path
        if not f.is_file():
            bad.append(f"{where}: {url} → {path} does not exist in {site}")
            continue
        frag = urlsplit(url).fragment
        if path.endswith(".html"):
            html = seen.setdefault(path, f.read_text())
            m = re.search(r'location\.replace\("([^"]+)"', html)
            if m:  # nbdev's page name: a redirect to the chapter page, which must hold the #anchor
                path = (Path(path).parent / m.group(1)).as_posix()
                if not (site / path).is_file():
                    bad.append(f"{where}: {url} redirects to {path}, which does not exist")
                    continue
                html = seen.setdefault(path, (site / path).read_text())
            if frag and not re.search(rf'\bid="{re.escape(frag)}"', html):
                bad.append(f"{where}: {url}: no element with id {frag!r} on {path}")
    return bad


def test_links_found():
    "The package has links to check: one per module docstring at least, and the symbol index"
    links = doc_links()
    mods = [p for p in (ROOT / "txbook").glob("*.py") if not p.name.startswith("_")]
    assert sum(w.endswith("docstring") for w, _ in links) >= len(mods), links[:5]
    assert sum(w.startswith("_modidx") for w, _ in links) > 10


def test_links_point_at_book_chapters():
    "Every link names a page in the book's nbs/ folder that belongs to exactly one notebook"
    bad = []
    for where, url in doc_links():
        path = site_path(url)
        if path is None or chapter_of(path) is None:
            bad.append(f"{where}: {url}")
    assert not bad, (f"{len(bad)} links do not point at a chapter under {site_root()}nbs/ (nbdev "
                     "takes doc_host and "
                     f"doc_baseurl from pyproject's [project.urls] Documentation, which must be "
                     f"{site_root()}nbs/):\n" + "\n".join(bad[:20]))


def test_site_path_and_chapter():
    base = site_root()
    assert site_path(base + "nbs/attention.html#attention") == "nbs/attention.html"
    assert site_path(base) == "index.html"
    assert site_path("https://example.com/nbs/attention.html") is None
    assert chapter_of("nbs/attention.html.md") == ROOT / "nbs" / "01_attention.ipynb"
    # appendix pages keep their letter
    assert chapter_of("nbs/d_viz.html") == ROOT / "nbs" / "d_viz.ipynb"
    assert chapter_of("nbs/no_such_chapter.html") is None


# deselected without a built site (tests/conftest.py); make book runs it in check_site.py
@pytest.mark.needs_site
def test_link_targets_exist_in_built_site():
    bad = missing_targets(ROOT / "_build" / "html")
    assert not bad, f"{len(bad)} links lead nowhere on the built site:\n" + "\n".join(bad[:30])
