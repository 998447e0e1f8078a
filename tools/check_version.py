#!/usr/bin/env python3
"""Check that the release's versions agree: the git tag, `txbook.__version__`, every chapter's Colab
install (`pip install txbook==<version>` in its first code cell after `default_exp`) and,
optionally, built files.

    python tools/check_version.py                 # today's tree: package == every chapter's pin
    python tools/check_version.py v0.1.0          # a release tag (with or without the leading v)
    python tools/check_version.py v0.1.0 dist/    # ... and the sdist/wheel names in dist/
    python tools/check_version.py "" dist/        # the files, no tag

Exits 1 and prints every disagreement. Reads files only (no import of txbook, so no torch needed).
"""
from __future__ import annotations

import ast, json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"txbook==([0-9A-Za-z.+!-]+)")


def package_version(root:Path=ROOT) -> str:
    "`__version__` from txbook/__init__.py, read without importing the package"
    tree = ast.parse((root / "txbook" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) \
                and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise ValueError("txbook/__init__.py sets no __version__")


def chapter_pins(root:Path=ROOT) -> dict[str, list[str]]:
    """For each notebook, the versions its Colab setup cell (first code cell after default_exp)
    installs"""
    pins = {}
    for nb in sorted((root / "nbs").glob("*.ipynb")):
        cells = [c for c in json.loads(nb.read_text(encoding="utf-8"))["cells"]
                 if c["cell_type"] == "code"]
        srcs = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                for c in cells]
        setup = next((s for s in srcs if not s.lstrip().startswith("#| default_exp")), "")
        pins[nb.name] = PIN.findall(setup)
    return pins


def problems(tag:str|None=None, dist:Path|None=None, root:Path=ROOT) -> list[str]:
    "Every disagreement between the versions (empty when they all agree)"
    version, out = package_version(root), []
    if tag is not None:
        t = tag.removeprefix("refs/tags/")
        t = t[1:] if t[:1] in "vV" else t
        if t != version: out.append(f"tag {tag!r} is version {t!r}, but txbook.__version__ is "
                                    f"{version!r}")
    pins = chapter_pins(root)
    if not pins: out.append("no notebooks found in nbs/")
    for name, found in pins.items():
        if not found: out.append(f"{name}: its setup cell installs no pinned txbook==<version>")
        for v in found:
            if v != version: out.append(f"{name}: installs txbook=={v}, but txbook.__version__ is "
                                        f"{version!r}")
    if dist is not None:
        files = sorted(Path(dist).glob("txbook-*"))
        if not any(f.name.endswith(".whl") for f in files) \
                or not any(f.name.endswith(".tar.gz") for f in files):
            out.append(f"{dist}: expected one wheel and one sdist, found {[f.name for f in files]}")
        for f in files:
            v = f.name.removesuffix(".tar.gz").split("-")[1]
            if v != version: out.append(f"{f.name}: built as version {v!r}, but txbook.__version__ "
                                        f"is {version!r}")
    return out


def main(argv:list[str]) -> int:
    tag = (argv[0] or None) if argv else None   # "" = no tag
    dist = Path(argv[1]) if len(argv) > 1 else None
    found = problems(tag, dist)
    for p in found: print(f"version mismatch: {p}", file=sys.stderr)
    if not found:
        print(f"versions agree: txbook {package_version()}" + (f", tag {tag}" if tag else "")
              + f", {len(chapter_pins())} chapters" + (f", files in {dist}" if dist else ""))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
