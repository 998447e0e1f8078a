"""Checks on the built site (run after `jupyter-book build`): every chapter rendered as the reader
should see it.

Per chapter: Colab button, no nbdev plumbing, figures and typeset equations where expected,
exercises. Whole site: MathJax shipped with the site (no CDN, nothing loaded from another host), no
absolute machine path in any output or page, no kernel log line in any output (named by page and
cell), no empty figure, and every link nbdev writes into the package leads to a page
(tests/test_site_links.py). tests/check_browser.py then loads the pages in Chromium.

usage: python tests/check_site.py [_build/html]

It prints one line per failed check and 'N passed, N failed'.
"""
from __future__ import annotations

import json, re, sys, sysconfig
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT / "tools"))
from notebook_kernel import log_report  # noqa: E402

# Absolute paths of a machine (a build machine's checkout, a home, a temp dir, an installed package)
MACHINE_PATH = re.compile(
    r"(?<![\w.:/])(?:/(?:work|home|root|tmp|Users|private/var|var/folders|opt|usr/(?:local/)?lib)"
    r"/[\w.-]+|[A-Za-z]:\\\\?(?:Users|Windows)\\)|[\w./-]*/(?:site|dist)-packages/")


def code_text(html: str) -> str:
    "The text of the code blocks on a page (inputs and outputs), tags stripped"
    blocks = re.findall(r'<div class="highlight"><pre>(.*?)</pre>', html, flags=re.S)
    return "\n".join(re.sub(r"<[^>]+>", "", b) for b in blocks)


def output_texts(nb: dict):
    """(cell number, text) of every text output of an executed notebook (streams, plain text,
    Markdown, HTML)"""
    for i, cell in enumerate(nb.get("cells", []), 1):
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")] if out.get("output_type") == "stream" else []
            texts += [v for k, v in out.get("data", {}).items()
                      if k.startswith("text/") and k != "text/svg+xml"]
            texts += out.get("traceback", [])
            for t in texts:
                yield i, t if isinstance(t, str) else "".join(t)


def machine_paths(text: str, extra: tuple[str, ...] = ()) -> list[str]:
    """Absolute machine paths in `text`: the generic patterns plus the literal `extra` paths (this
    checkout, ...)"""
    found = [m.group(0) for m in MACHINE_PATH.finditer(text)]
    found += [p for p in extra if p and p in text]
    return sorted(set(found))


def kernel_logs(executed: Path) -> str:
    """Each kernel log line in the outputs of the executed notebooks in `executed`, as `nbs/<page>
    cell N (id ..): line`"""
    return "\n".join(r for nb in sorted(executed.glob("*.ipynb"))
                     if (r := log_report(f"nbs/{nb.stem}", json.loads(nb.read_text()))))


# ------------------------------------------------------------------------------------------ figures
_SVG = "{http://www.w3.org/2000/svg}"
_DRAW = {"path", "use", "image", "text", "rect", "circle", "ellipse", "line", "polyline", "polygon"}


def _gid(e) -> str:
    return e.get("id", "") if e.tag == _SVG + "g" else ""


def _is_spine(g) -> bool:
    "A matplotlib spine: a patch drawn as one unfilled straight segment"
    paths = [p for p in g.iter(_SVG + "path")]
    if len(paths) != 1:
        return False
    d, style = paths[0].get("d", ""), paths[0].get("style", "")
    return (d.count("M") == 1 and d.count("L") == 1 and "z" not in d
            and "fill: none" in style.replace("fill:none", "fill: none"))


def _axes_has_data(ax) -> bool:
    """Whether a matplotlib axes group draws data: anything but its background, axis, spines, title
    and legend"""
    kids = list(ax)
    has_axis = any(_gid(k).startswith("matplotlib.axis") for k in kids)
    for j, k in enumerate(kids):
        gid = _gid(k)
        if k.tag == _SVG + "defs" or gid.startswith(("matplotlib.axis", "legend_")):
            continue
        if gid.startswith("patch_") and (j == 0 or _is_spine(k)):
            continue  # the background (first) and the spines
        if gid.startswith("text_") and has_axis:
            # titles and labels; on an axes with its axis off, text is the content (a diagram)
            continue
        return True
    return False


def svg_is_empty(text: str) -> bool:
    """An SVG that draws nothing: a matplotlib figure with no data in any axes, or any SVG with no
    drawing element"""
    root = ET.fromstring(text)
    fig = next((g for g in root.iter(_SVG + "g") if g.get("id") == "figure_1"), None)
    if fig is None:  # not matplotlib: any drawing element outside <defs>
        defs = {id(e) for d in root.iter(_SVG + "defs") for e in d.iter()}
        return not any(e.tag.removeprefix(_SVG) in _DRAW and id(e) not in defs for e in root.iter())
    axes = [g for g in fig.iter(_SVG + "g") if g.get("id", "").startswith("axes_")]
    if any(_axes_has_data(a) for a in axes):
        return False
    # no axes with data: only a figure-level image or drawing (fig.figimage, fig.patches) still
    # counts
    others = [k for k in fig
              if not _gid(k).startswith(("axes_", "text_", "legend_")) and k is not list(fig)[0]]
    return not others


def png_is_empty(path: Path) -> bool:
    "A PNG of one colour (at most 0.1 % of its pixels differ from the commonest colour)"
    from PIL import Image
    with Image.open(path) as im:
        im = im.convert("RGBA")
        colors = im.getcolors(maxcolors=im.width * im.height)
    return max(n for n, _ in colors) >= 0.999 * im.width * im.height


def shown_images(site: Path) -> list[Path]:
    "The images in `_images/` that some page shows (a rebuild leaves old, unused ones behind)"
    names = set()
    for page in site.rglob("*.html"):
        names |= set(
            re.findall(r'<img[^>]+src="[^"]*_images/([^"/?#]+)"', page.read_text(errors="replace")))
    return sorted(site / "_images" / n for n in names)


def empty_figures(site: Path) -> list[str]:
    "Images shown on the built site that show nothing"
    bad = []
    for f in shown_images(site):
        try:
            empty = svg_is_empty(f.read_text()) if f.suffix == ".svg" else png_is_empty(f) \
                if f.suffix == ".png" \
                else False
        except Exception as e:  # an image that cannot be read is as bad as an empty one
            bad.append(f"{f.name} ({type(e).__name__}: {e})")
            continue
        if empty:
            bad.append(f.name)
    return bad


def pages_using(site: Path, names: list[str]) -> dict[str, list[str]]:
    "For each image name, the pages that show it"
    out: dict[str, list[str]] = {n: [] for n in names}
    for page in site.rglob("*.html"):
        html = page.read_text(errors="replace")
        for n in names:
            if n.split(" ")[0] in html:
                out[n].append(page.relative_to(site).as_posix())
    return out


# ------------------------------------------------------------------------------------------- checks
def main(site: Path) -> int:
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = cfg["repository"]["url"].removeprefix("https://github.com/")
    passed, failed = 0, []

    def check(ok, what):
        nonlocal passed
        if ok:
            passed += 1
        else:
            failed.append(what)

    check((site / "index.html").exists(), "index.html exists")
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        page = site / "nbs" / f"{nb.stem}.html"
        if not page.exists():
            failed.append(f"{page} missing")
            continue
        html = page.read_text()
        code = code_text(html)
        check(f"colab.research.google.com/github/{repo}/blob/main/nbs/{nb.name}" in html,
              f"{nb.stem}: Colab launch button")
        check("#|" not in code and "#| " not in html, f"{nb.stem}: no nbdev directive shown")
        check("pip install -q txbook" not in code, f"{nb.stem}: hidden setup cell removed")
        check(not re.search(r"^show_doc\(", code, flags=re.M),
              f"{nb.stem}: show_doc cells show only their output")
        tb = code.find("Traceback (most recent call last)")
        check(tb < 0, f"{nb.stem}: no traceback"
              + (f" (the page shows:\n{code[tb:tb + 3000]})" if tb >= 0 else ""))
        figures = re.findall(r'<img[^>]+src="[^"]*_images/[^"]+\.(?:svg|png)"', html)
        # every page draws at least one real result, except reference pages with nothing to draw:
        # the setup page, the timing and memory tools (their results are measured numbers, printed),
        # and the checkpoint format and foreign-weights contracts and the shared layers (their
        # checks are exact equalities)
        if nb.stem not in ("a_core", "c_perf", "i_checkpoint", "l_foreign", "m_layers"):
            check(len(figures) > 0, f"{nb.stem}: figures rendered ({len(figures)} found)")
        if nb.stem[:2].isdigit() and int(nb.stem[:2]) >= 1:
            check('class="math' in html, f"{nb.stem}: typeset equations")
            check("Exercises" in html and "solution" in html.lower(),
                  f"{nb.stem}: exercises with solutions")
    check((site / "book" / "references.html").exists()
          and "Turner" in (site / "book" / "references.html").read_text(),
          "references page lists the bibliography")

    # one numbering: the sidebar gives chapter NN_name the number NN, and the appendix pages no
    # number
    # a page outside nbs/: every chapter is a link in its sidebar
    side = site / "book" / "notation.html"
    nav = {stem: re.sub(r"<[^>]+>", "", text).strip() for stem, text in
           re.findall(r'<li class="toctree-l1[^"]*"><a class="[^"]*reference internal" '
                      r'href="(?:\.\./)?nbs/(\w+)\.html">(.*?)</a>', side.read_text(), flags=re.S)}
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        shown = nav.get(nb.stem, "")
        num = re.match(r"^(\d+)\. ", shown)
        want = str(int(nb.stem[:2])) if nb.stem[:2].isdigit() else None
        check((num.group(1) if num else None) == want,
              f"{nb.stem}: the site numbers it {num.group(1) if num else 'not at all'}, its file "
              f"name {want} (sidebar: {shown!r})")

    # MathJax ships with the site; no page loads anything from another host
    mathjax = site / "_static" / "mathjax"
    check((mathjax / "tex-mml-chtml.js").is_file() and (mathjax / "LICENSE").is_file()
          and any((mathjax / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff")),
          "MathJax 3 (tex-mml-chtml.js, its fonts, its LICENSE) is in _static/mathjax")
    pages = sorted(site.rglob("*.html"))
    external, no_local_mathjax = [], []
    for page in pages:
        html = page.read_text(errors="replace")
        rel = page.relative_to(site).as_posix()
        for tag in re.findall(r"<(?:script|link|img|iframe|source)\b[^>]*>", html):
            if re.search(r'<link\b', tag) \
                    and not re.search(r'rel="(?:stylesheet|preload|modulepreload|icon)', tag):
                continue  # hyperlinks to other pages are fine; loaded resources are not
            for url in re.findall(r'(?:src|href)="((?:https?:)?//[^"]+)"', tag):
                external.append(f"{rel}: {url}")
        if 'class="math' in html \
                and not re.search(r'<script[^>]+src="[^"]*_static/mathjax/tex-mml-chtml\.js', html):
            no_local_mathjax.append(rel)
    check(not external, f"no page loads a resource from another host ({len(external)}: "
                        f"{external[:5]})")
    check(not no_local_mathjax,
          f"pages with math load the shipped MathJax ({no_local_mathjax[:5]})")

    # no absolute machine path in any output (the executed notebooks) or page
    # this machine's paths
    here = (str(ROOT), sys.prefix, sysconfig.get_paths()["purelib"], str(Path.home()))
    executed = ROOT / "_build" / "jupyter_execute" / "nbs" \
        if site.resolve() == (ROOT / "_build" / "html").resolve() \
        else site.parent / "jupyter_execute" / "nbs"
    leaks = []
    for nb in sorted(executed.glob("*.ipynb")):
        for cell, text in output_texts(json.loads(nb.read_text())):
            leaks += [f"{nb.name} cell {cell}: {p}" for p in machine_paths(text, here)]
    for page in pages + sorted(site.rglob("*.html.md")):
        text = page.read_text(errors="replace")
        # prose may name /tmp: only ours
        leaks += [f"{page.relative_to(site)}: {p}" for p in here[:3] if p in text]
        leaks += [f"{page.relative_to(site)}: {u}"
                  for u in re.findall(r'(?:src|href)="(file:[^"]+)"', text)]
    check(executed.is_dir(), f"executed notebooks found in {executed} (for the output checks)")
    # no output carries what the kernel's machinery logged (a zmq traceback, a traitlets record):
    # page and cell
    logs = kernel_logs(executed)
    check(not logs, "no kernel log line in any output (tools/notebook_kernel.py)"
          + (f"; the pages show:\n{logs[:4000]}" if logs else ""))
    check(not leaks, f"no absolute machine path in outputs or pages ({len(leaks)}: {leaks[:8]})")

    # no empty figure
    images = shown_images(site)
    empty = empty_figures(site)
    where = pages_using(site, empty)
    check(bool(images) and all(f.is_file() for f in images),
          "the site shows figures, all in _images/ "
          f"({[f.name for f in images if not f.is_file()][:3]} missing)")
    check(not empty, f"no empty figure ({len(empty)} of {len(images)}: "
                     + "; ".join(f"{n} on {where[n] or '?'}" for n in empty[:5]) + ")")

    # every link nbdev writes into the package (docstrings, llms.txt, _modidx.py) leads to a page
    # here
    from test_site_links import doc_links, missing_targets
    bad = missing_targets(site)
    check(not bad, f"nbdev's links lead to pages of the site ({len(bad)} of {len(doc_links())} do "
                   f"not: {bad[:5]})")

    for f in failed:
        print("FAILED:", f)
    print(f"{passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "_build" / "html"))
