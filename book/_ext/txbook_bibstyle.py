"""Author-year labels for the bibliography, to match the author-year citations in the text.

Sphinxcontrib-bibtex takes the in-text form from `bibtex_reference_style: author_year`
(_config.yml), but the labels of the bibliography list come from a pybtex formatting style, and
pybtex's own styles label entries `[Tur23]` (alpha) or `[1]` (plain). `txbook_author_year` is
pybtex's plain style with labels "Turner 2023", "Xiong et al. 2020", "Hendrycks and Gimpel 2016" (a,
b, ... appended on a clash). book/references.md selects it with `:style: txbook_author_year`;
`register()` runs in the book extension's setup.
"""
from __future__ import annotations

import pybtex.plugin
from pybtex.richtext import Text
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle

STYLE_NAME = "txbook_author_year"


def author_year_label(entry) -> str:
    "'Turner 2023', 'Su and Lu 2021', 'Xiong et al. 2020'; the title's start if there is no author"
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    last = [Text.from_latex(" ".join(p.last_names)).render_as("text") for p in people]
    if not last: who = entry.fields.get("title", entry.key)[:30]
    elif len(last) == 1: who = last[0]
    elif len(last) == 2: who = f"{last[0]} and {last[1]}"
    else: who = f"{last[0]} et al."
    return f"{who} {entry.fields.get('year', '')}".strip()


class AuthorYearLabelStyle(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        seen: dict[str, int] = {}
        for entry in sorted_entries:
            label = author_year_label(entry)
            seen[label] = seen.get(label, 0) + 1
            yield label if seen[label] == 1 \
                else label + "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]


class AuthorYearStyle(PlainStyle):
    "pybtex's plain style (entries sorted by author, year, title) with author-year labels"
    default_label_style = AuthorYearLabelStyle


def register() -> None:
    "Make `:style: txbook_author_year` known to pybtex (idempotent)"
    try:
        pybtex.plugin.find_plugin("pybtex.style.formatting", STYLE_NAME)
    except pybtex.plugin.PluginNotFound:
        pybtex.plugin.register_plugin("pybtex.style.formatting", STYLE_NAME, AuthorYearStyle)
