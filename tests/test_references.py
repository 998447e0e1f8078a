"""book/references.bib parses, entry by entry, and every citation in the pages names one of its
entries.

The book build reads the file through pybtex (sphinxcontrib-bibtex) and stops at the first syntax
error, after the whole test suite has run; a merge that dropped one closing brace did exactly that,
and a URL with `%` (a LaTeX comment) failed the formatting after it. This checks both in the fast
path: pybtex must find as many entries as the file has `@type{` lines, every field must read as
LaTeX, and each `{cite:...}` key in the notebooks' markdown and in book/*.md must be one of them.
"""
import json, re

from pybtex.database import parse_file
from pybtex.richtext import Text

from helpers import ROOT

BIB = ROOT / "book" / "references.bib"
CITE = re.compile(r"\{cite(?::\w+)?\}`([^`]+)`")


def entries() -> dict:
    return parse_file(str(BIB)).entries


def test_every_entry_parses():
    written = re.findall(r"^@(\w+)\{([^,\s]+),", BIB.read_text(), re.M)
    found = entries()
    assert len(found) == len(written), (f"pybtex reads {len(found)} entries, the file has "
                                        f"{len(written)} '@type{{key,' lines: "
                                        f"{sorted({k for _, k in written} - set(found))}")


def test_every_field_reads_as_latex():
    "The build formats each field as LaTeX: a bare % (a comment) or a stray brace stops it"
    bad = []
    for key, entry in entries().items():
        for name, value in entry.fields.items():
            try: Text.from_latex(value)
            except Exception as e: bad.append(f"{key}.{name}: {e}")
    assert not bad, f"fields the book build cannot format: {bad}"


def cited_keys() -> dict[str, set[str]]:
    "page -> the keys its markdown cites"
    out = {}
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        text = "".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"]
                       if c["cell_type"] == "markdown")
        out[nb.name] = {k.strip() for m in CITE.findall(text) for k in m.split(",")}
    for md in sorted((ROOT / "book").glob("*.md")):
        out[f"book/{md.name}"] = {k.strip() for m in CITE.findall(md.read_text())
                                  for k in m.split(",")}
    return out


def test_every_citation_names_an_entry():
    known = set(entries())
    cited = cited_keys()
    assert sum(
        map(len,
            cited.values())) > 50, "the citation pattern found almost nothing: is it still right?"
    missing = {page: sorted(keys - known) for page, keys in cited.items() if keys - known}
    assert not missing, f"citations of keys that book/references.bib does not have: {missing}"
