"""Sphinx glue for the txbook site.

`read_nbdev` is a myst-nb notebook reader (registered for `.ipynb` through `nb_custom_formats`)
that turns nbdev's cell directives (`#| hide`, `#| export`, `#| echo: false`, ...) into the
cell tags myst-nb understands, and strips the `#|` lines, so that the notebooks in `nbs/` are
the only copy of each chapter and the site never shows nbdev's plumbing.
"""
from __future__ import annotations

import re

import nbformat

__all__ = ["parse_directives", "directive_tags", "read_nbdev", "setup"]

# `#| name`, `#| name: value` or `#| name value` (nbdev 3 accepts all three), only at the top of a cell
_re_directive = re.compile(r"^\s*#\s*\|\s*([\w-]+)\s*:?\s*(.*?)\s*$")
# a cell whose code is nothing but `show_doc(...)` calls
_re_show_doc = re.compile(r"^\s*show_doc\(.*\)\s*$")

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
        if not dirs and not new:
            continue  # plain code: left exactly as written
        cell.metadata["tags"] = sorted(set(cell.metadata.get("tags", [])) | new)
        cell.source = body
    return nb


def setup(app):
    "A Sphinx extension so `_config.yml` can load this module; the reader is named in `nb_custom_formats`"
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
