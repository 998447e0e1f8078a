"""Sphinx glue for the txbook site.

`read_nbdev` is a myst-nb notebook reader (registered for `.ipynb` through `nb_custom_formats`) that
turns nbdev's cell directives (`#| hide`, `#| export`, `#| echo: false`, ...) into the cell tags
myst-nb understands, and strips the `#|` lines, so that the notebooks in `nbs/` are the only copy of
each chapter and the site never shows nbdev's plumbing.

`copy_mathjax` ships MathJax 3 with the site (no CDN): `_config.yml` sets `mathjax_path:
mathjax/tex-mml-chtml.js`, and at the end of the build the files it needs are copied into
`_static/mathjax/` from the pinned PyPI package `django-static-mathjax` (MathJax 3.2.2, Apache-2.0;
see `book/_static/mathjax/NOTICE.md`).

`read_book` is the reader the site uses: `read_nbdev`, plus the outputs of the quick test pass when
they fit. `tests/test_notebooks.py` executes every chapter as this build would (same reader, kernel,
folder, timeout) and saves it in `_build/executed/` with its *key*: the hashes of the notebook and
of the package `txbook/`, and the size line `txbook.core.size_note()` the chapter would print. When
the key still matches here, the reader fills in the saved outputs and turns execution off for that
notebook (myst-nb's per-notebook `mystnb.execution_mode`); any notebook without a matching record is
executed as before.

`write_nbdev_pages` makes the addresses that nbdev writes into the package resolve on the site.
nbdev names a chapter's page after the notebook without its number (`nbs/01_attention.ipynb` →
`attention.html`, see `nbdev.config.nbpath2html`); its module docstrings link to
`<doc_baseurl>/attention.html.md` (the page as Markdown) and `_modidx.py` to
`<doc_baseurl>/attention.html#name`. With `doc_baseurl` at the book's `nbs/` folder, this writes
`nbs/attention.html` (a redirect to `nbs/01_attention.html`, keeping the `#anchor`) and
`nbs/attention.html.md` (the executed chapter as Markdown) for every chapter.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import nbformat
from docutils import nodes

__all__ = ["parse_directives", "directive_tags", "read_nbdev", "defined_names", "doc_anchor",
           "mathjax_dist", "copy_mathjax", "nbdev_page",
           "notebook_markdown", "write_nbdev_pages", "EXECUTED", "execution_key", "save_executed",
           "saved_executed", "read_book", "setup"]

# `#| name`, `#| name: value` or `#| name value` (nbdev 3 accepts all three), only at the top of a
# cell
_re_directive = re.compile(r"^\s*#\s*\|\s*([\w-]+)\s*:?\s*(.*?)\s*$")
# a cell whose code is nothing but `show_doc(...)` calls
_re_show_doc = re.compile(r"^\s*show_doc\(.*\)\s*$")
# the name documented by one `show_doc(...)` call
_re_show_doc_name = re.compile(r"^\s*show_doc\(\s*([\w.]+)")

_FALSE = {"false", "0", "no", "off"}


def parse_directives(source: str) -> tuple[dict[str, str], str]:
    "Split a code cell's `source` into its leading nbdev directives and the remaining code"
    lines = source.splitlines(keepends=True)
    dirs: dict[str, str] = {}
    i = 0
    for i, line in enumerate(lines):
        if not line.strip():
            continue  # blank lines may sit between directives
        m = _re_directive.match(line)
        if m is None:
            break
        dirs[m.group(1)] = m.group(2)
    else:
        i = len(lines)
    body = "".join(lines[i:])
    return dirs, body.strip("\n")


def _is_false(v: str) -> bool:
    return v.strip().lower() in _FALSE


def directive_tags(dirs: dict[str, str], body: str) -> set[str]:
    "The myst-nb cell tags that express nbdev directives `dirs` for a cell whose code is `body`"
    tags: set[str] = set()
    if "hide" in dirs or _is_false(dirs.get("include", "true")):
        tags.add("remove-cell")
    if "default_exp" in dirs and not body.strip():
        tags.add("remove-cell")
    if _is_false(dirs.get("echo", "true")) or "hide_input" in dirs:
        tags.add("remove-input")
    if _is_false(dirs.get("output", "true")) or "hide_output" in dirs:
        tags.add("remove-output")
    if "code-fold" in dirs and not _is_false(dirs["code-fold"]):
        tags.add("hide-input")
    if _is_false(dirs.get("eval", "true")):
        tags.add("skip-execution")
    code_lines = [l for l in body.splitlines() if l.strip()]
    if code_lines and all(_re_show_doc.match(l) for l in code_lines):
        tags.add("remove-input")  # show_doc cells show only their rendered documentation
    if "remove-cell" in tags:
        tags -= {"remove-input", "remove-output", "hide-input"}
    return tags


def read_nbdev(text: str) -> nbformat.NotebookNode:
    "Read an nbdev notebook for myst-nb: directives become cell tags and leave the source"
    nb = nbformat.reads(text, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        dirs, body = parse_directives(cell.source)
        meta_dirs = cell.metadata.get("nbdev", {})  # nbdev 3 may keep directives in metadata
        dirs.update({k: str(v) for k, v in meta_dirs.items()})
        new = directive_tags(dirs, body)
        if "remove-input" in new and not dirs:
            # a show_doc cell: the names it documents, for their anchors
            cell.metadata["txbook_show_doc"] = [m.group(1) for l in body.splitlines()
                                                if (m := _re_show_doc_name.match(l))]
        if {"export", "exports", "exporti"} & set(dirs):
            # the names nbdev's symbol index finds in this cell
            cell.metadata["txbook_defines"] = defined_names(body)
        if not dirs and not new:
            continue  # plain code: left exactly as written
        cell.metadata["tags"] = sorted(set(cell.metadata.get("tags", [])) | new)
        cell.source = body
    return nb


# -------------------------------------------------------------- the quick pass's executed notebooks
# where tests/test_notebooks.py saves them: <stem>.ipynb (outputs) and <stem>.key.json (what they
# depend on)
EXECUTED = Path(__file__).resolve().parents[2] / "_build" / "executed"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def source_hash(text: str) -> str:
    "The hash of a notebook's text (line ends normalised)"
    return _sha256(text.replace("\r\n", "\n").encode("utf-8"))


def package_hash(root: str | Path) -> str:
    "One hash of every file of the package `root/txbook` that the chapters import"
    h = hashlib.sha256()
    for p in sorted(Path(root, "txbook").rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _size_note() -> str:
    "The size line a chapter would print in a kernel started with this process's environment"
    from txbook.core import size_note  # imports torch: only called when there is a record to check
    return size_note()


def execution_key(text: str, root: str | Path, size: str) -> dict[str, str]:
    "What a chapter's outputs depend on: its own text, the package, and the size it runs at"
    return {"source": source_hash(text), "package": package_hash(root), "size": size}


def save_executed(nb: nbformat.NotebookNode, stem: str, key: dict,
                  folder: str | Path = None) -> Path:
    "Save an executed notebook and then its key (the key last: a half-written record is never used)"
    folder = Path(folder or EXECUTED)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in ((f"{stem}.ipynb", nbformat.writes(nb)),
                       (f"{stem}.key.json", json.dumps(key, indent=1))):
        tmp = folder / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, folder / name)
    return folder / f"{stem}.ipynb"


_key_cache: dict = {}


def saved_executed(text: str, root: str | Path) -> tuple[Path, nbformat.NotebookNode] | None:
    """The executed notebook in `root/_build/executed` whose key matches `text` now (text, package,
    size), or None"""
    folder = Path(root) / "_build" / "executed"
    src = source_hash(text)
    for kf in sorted(folder.glob("*.key.json")):
        key = json.loads(kf.read_text(encoding="utf-8"))
        if key.get("source") != src or key.get("reusable") is False:
            continue
        if (str(root), "package") not in _key_cache:
            # once per build: nothing changes while it runs
            _key_cache[str(root), "package"] = package_hash(root)
            _key_cache[str(root), "size"] = _size_note()
        if key.get("package") != _key_cache[str(root), "package"] \
                or key.get("size") != _key_cache[str(root), "size"]:
            return None
        nbf = kf.with_name(kf.name.removesuffix(".key.json") + ".ipynb")
        return (nbf, nbformat.read(nbf, as_version=4)) if nbf.exists() else None
    return None


def _fill_outputs(nb: nbformat.NotebookNode, ex: nbformat.NotebookNode) -> bool:
    """Copy the outputs of `ex` (the same notebook, executed) into `nb`; False, touching nothing, if
    they differ"""
    same = len(nb.cells) == len(ex.cells) and all(
        (a.cell_type, a.get("id"), a.source) == (b.cell_type, b.get("id"), b.source)
        for a, b in zip(nb.cells, ex.cells))
    if not same:
        return False
    for a, b in zip(nb.cells, ex.cells):
        if a.cell_type == "code":
            a.outputs, a.execution_count = b.outputs, b.execution_count
    for k in ("language_info", "widgets"):  # what executing adds to the notebook's metadata
        if k in ex.metadata:
            nb.metadata[k] = ex.metadata[k]
    # myst-nb: do not execute this one
    nb.metadata.setdefault("mystnb", {})["execution_mode"] = "off"
    return True


def read_book(text: str) -> nbformat.NotebookNode:
    """The site's reader: `read_nbdev`, with the quick pass's outputs when its record matches (else
    myst-nb executes)"""
    nb = read_nbdev(text)
    found = saved_executed(text, _root)
    if found is not None and _fill_outputs(nb, found[1]):
        from sphinx.util import logging
        logging.getLogger(__name__).info("[txbook] outputs from the quick test pass: "
                                         f"{found[0].name}")
    return nb


# the book's source folder (set again when Sphinx starts)
_root = Path(__file__).resolve().parents[2]


# What the site needs of MathJax's es5 distribution: the combined TeX/MathML → CommonHTML component,
# its fonts, the TeX extensions it autoloads (\boldsymbol, \cancel, ...), and what its menu loads on
# request (accessibility explorer, speech rules, menu parts), so nothing is ever fetched from a CDN.
MATHJAX_FILES = ["tex-mml-chtml.js", "output/chtml/fonts", "input/tex/extensions",
                 "input/mml/extensions", "a11y", "sre", "ui", "adaptors"]


def mathjax_dist() -> Path:
    "The `es5` folder of MathJax 3 in the installed `django-static-mathjax` package"
    try:
        import mathjax  # the PyPI package django-static-mathjax (a pinned copy of MathJax 3.2.2)
    except ImportError as e:
        raise RuntimeError("MathJax for the offline site is missing: pip install "
                           "django-static-mathjax (listed in txbook's dev extra)") from e
    root = Path(mathjax.__file__).parent / "static" / "mathjax"
    if not (root / "es5" / "tex-mml-chtml.js").exists():
        raise RuntimeError(f"no es5/tex-mml-chtml.js in {root}: is django-static-mathjax 3.x "
                           "installed?")
    return root / "es5"


def copy_mathjax(outdir: str | Path) -> Path:
    """Copy MathJax (the files the site uses, and its LICENSE) into `outdir/_static/mathjax`;
    returns that folder"""
    src = mathjax_dist()
    dest = Path(outdir) / "_static" / "mathjax"
    for rel in MATHJAX_FILES:
        s, d = src / rel, dest / rel
        if s.is_dir():
            shutil.copytree(s, d, dirs_exist_ok=True)
        elif s.exists():
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, d)
    shutil.copy2(src.parent / "LICENSE", dest / "LICENSE")
    return dest


def nbdev_page(nb_name: str) -> str:
    """The page name nbdev gives notebook `nb_name` (`01_attention.ipynb` → `attention.html`), as
    nbpath2html"""
    return re.sub(r"^\d+[a-zA-Z0-9]*_", "", Path(nb_name).name.lower()).rsplit(".", 1)[0] + ".html"


_REDIRECT = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<link rel="canonical" href="{target}">
<script>location.replace("{target}" + location.hash)</script>
<noscript><meta http-equiv="refresh" content="0; url={target}"></noscript>
</head><body><p>This page is <a href="{target}">{title}</a>.</p></body></html>
"""


def _text(out: dict) -> str | None:
    "The text of one notebook output, if it has one"
    if out.get("output_type") == "stream":
        return out.get("text", "")
    data = out.get("data", {})
    for mime in ("text/markdown", "text/plain"):
        if mime in data:
            v = data[mime]
            return v if isinstance(v, str) else "".join(v)
    return None


def notebook_markdown(source: str, executed: str | None = None) -> str:
    """The chapter as Markdown, as the site shows it: nbdev directives applied, text outputs of
    `executed` kept"""
    nb = read_nbdev(source)
    outs = nbformat.reads(executed, as_version=4).cells if executed else None
    parts = []
    for i, cell in enumerate(nb.cells):
        tags = set(cell.metadata.get("tags", []))
        if "remove-cell" in tags:
            continue
        if cell.cell_type != "code":
            parts.append(cell.source)
            continue
        if "remove-input" not in tags and cell.source.strip():
            parts.append(f"```python\n{cell.source}\n```")
        if outs is not None and i < len(outs) and "remove-output" not in tags:
            for out in outs[i].get("outputs", []):
                text = _text(out)
                if text is None:
                    continue
                if "text/markdown" in out.get("data", {}):
                    parts.append(text)
                elif text.strip():
                    parts.append(f"```\n{text.rstrip()}\n```")
    return "\n\n".join(p.strip("\n") for p in parts if p.strip()) + "\n"


def write_nbdev_pages(outdir: str | Path, srcdir: str | Path,
                      executed_dir: str | Path | None = None,
                      titles: dict[str, str] | None = None) -> list[Path]:
    """Write nbdev's page names for every chapter in `srcdir/nbs` into `outdir/nbs`; returns the
    files written"""
    outdir, srcdir = Path(outdir), Path(srcdir)
    written = []
    for nb in sorted((srcdir / "nbs").glob("*.ipynb")):
        page = outdir / "nbs" / f"{nb.stem}.html"
        alias = outdir / "nbs" / nbdev_page(nb.name)
        if not page.exists():
            continue
        if alias != page:
            # an appendix page keeps its name (no number to drop): no redirect, only the .md
            title = (titles or {}).get(f"nbs/{nb.stem}", nb.stem)
            alias.write_text(_REDIRECT.format(target=page.name, title=title.replace("<", "&lt;")))
            written.append(alias)
        ex = Path(executed_dir) / "nbs" / nb.name if executed_dir else None
        md = notebook_markdown(nb.read_text(), ex.read_text() if ex and ex.exists() else None)
        alias.with_name(alias.name + ".md").write_text(md)
        written.append(alias.with_name(alias.name + ".md"))
    llms = srcdir / "nbs" / "llms.txt"  # nbdev's index of the modules, for language models
    if llms.exists() and (outdir / "nbs").is_dir():
        shutil.copy2(llms, outdir / "nbs" / "llms.txt")
        written.append(outdir / "nbs" / "llms.txt")
    index = outdir / "nbs" / "index.html"
    if (outdir / "nbs").is_dir() and not index.exists():  # the folder nbdev's doc_baseurl points at
        index.write_text(_REDIRECT.format(target="../index.html", title="txbook"))
        written.append(index)
    return written


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    """Each script once per page: sphinx-thebe registers its inline `const THEBE_JS_URL` twice (a
    SyntaxError)"""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, keep = set(), []
    for js in scripts:
        name = getattr(js, "filename", js) or ""  # an inline script's filename is None or ''
        key = (str(name),
               tuple(sorted((k, str(v)) for k, v in getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            keep.append(js)
    scripts[:] = keep


def defined_names(code: str) -> list[str]:
    """What nbdev's `_modidx.py` indexes in an exported cell: its functions and classes, and each
    class's methods"""
    import ast
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    try:
        from nbdev.doclinks import patch_name  # `@patch def f(self: C)` is indexed as `C.f`
    except ImportError:
        patch_name = lambda o: o.name  # noqa: E731
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    names = []
    for node in tree.body:
        if isinstance(node, defs):
            n = patch_name(node)
            names += [n] if isinstance(n, str) else list(n)
        if isinstance(node, ast.ClassDef):
            names += [f"{node.name}.{m.name}" for m in node.body if isinstance(m, defs)]
    return names


def doc_anchor(name: str) -> str:
    """The anchor nbdev's `_modidx.py` links a documented name to (`MultiHeadAttention.forward` →
    `multiheadattention.forward`)"""
    return name.lower()


def _add_doc_anchors(app, doctree):
    """Give cells the ids nbdev's symbol index links to (`attention.html#attention_weights`): a
    name's show_doc cell, else the exported cell that defines it; a section of the same name (the
    chapter `attention`) keeps its id"""
    cells = [n for n in doctree.findall(nodes.container) if n.get("nb_element") == "cell_code"]
    for key in ("txbook_show_doc", "txbook_defines"):
        for node in cells:
            for name in (node.get("cell_metadata") or {}).get(key, []):
                anchor = doc_anchor(name)
                if anchor not in doctree.ids:
                    node["ids"].append(anchor)
                    doctree.ids[anchor] = node


def _builder_inited(app):
    global _root
    _root = Path(app.srcdir)
    _key_cache.clear()
    if app.builder.format == "html":
        mathjax_dist()  # fail at the start of the build, not after every chapter has run


def _build_finished(app, exc):
    if app.builder.format == "html":
        # also after a --keep-going build with errors, so its pages can be inspected
        copy_mathjax(app.outdir)
        titles = {d: t.astext() for d, t in app.env.titles.items()}
        write_nbdev_pages(app.outdir, app.srcdir, Path(app.outdir).parent / "jupyter_execute",
                          titles)


def _write_root_index(app, exc):
    "The site root's index.html: a redirect to the landing page that also names the favicon"
    # sphinx-external-toc writes a bare redirect here when none exists; a browser that loads it asks
    # for /favicon.ico (a 404 in the console), so ours comes first and says where the icon is.
    if app.builder.format != "html" or exc is not None:
        return
    landing = f"{app.config.root_doc}.html"
    icon = Path(app.config.html_favicon or "").name
    link = f'<link rel="icon" href="_static/{icon}"/>\n' if icon else ""
    (Path(app.outdir) / "index.html").write_text(
        '<!DOCTYPE html>\n<meta charset="utf-8"/>\n'
        f'<meta http-equiv="Refresh" content="0; url={landing}" />\n'
        f'{link}<title>Redirecting to {landing}</title>\n', encoding="utf-8")


def setup(app):
    """The Sphinx extension: MathJax shipped with the site, nbdev's page names; the reader is in
    `nb_custom_formats`"""
    from txbook_bibstyle import register as register_bibstyle  # `:style: txbook_author_year` (H6)
    register_bibstyle()
    app.connect("builder-inited", _builder_inited)
    app.connect("build-finished", _build_finished)
    # before sphinx-external-toc's (500)
    app.connect("build-finished", _write_root_index, priority=400)
    app.connect("html-page-context", _dedupe_scripts, priority=100)
    app.connect("doctree-read", _add_doc_anchors)  # early: the event stops at a result
    return {"version": "0.2", "parallel_read_safe": True, "parallel_write_safe": True}
