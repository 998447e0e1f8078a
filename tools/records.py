#!/usr/bin/env python3
"""The records in `results/bench`: which source files each one's command ran, and re-recording the
stale ones.

    python tools/records.py               # every record, and whether its sources changed since
    python tools/records.py --rerecord    # re-run the command of every stale record (clean tree)
    python tools/records.py --rerecord results/bench/12_swin/ablation.json   # that one, stale too

A record's `sources` maps each repository file its bench script runs to the SHA-256 of the file as
it was when the record was written. The list is computed, not typed: the script itself, and every
module of the `txbook` package and of `bench/` that it imports, directly or through other such
modules (`import txbook.x`, `from txbook.x import y`, `from txbook import x`, `from .x import y`
inside the package, and `txbook/__init__.py` with any of them), read from the source with `ast`,
imports inside functions included. Left out, on purpose: `tools/` (the record's header: commit,
date, machine; never a number), the datasets (`txbook.data` checks their SHA-256, and that file is a
source) and the installed libraries (their versions are in the record's `machine`).

A record is stale when the list computed now differs from its list or a listed file's hash differs
from the file's: its command would no longer run the code that wrote it.
`tests/test_bench_records.py` fails on a stale record; re-record it with its own command (printed
here and by the test) from a clean commit, so that the commit alone reproduces it. `--rerecord` does
exactly that, one record after another, and refuses a tree with uncommitted changes (untracked files
aside).
"""
import argparse, ast, hashlib, json, shlex, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "results" / "bench"


def _reader(root: Path):
    "read(rel) -> the file's text, or None if there is no such file"
    return lambda rel: (root / rel).read_text(encoding="utf-8") if (root / rel).is_file() else None


# the bench script, relative to the repository root ('bench/bench_swin.py')
def source_files(script: str,
                 read=None,        # read(rel) -> text or None; default: the working tree
                ) -> list[str]:    # repository-relative paths, sorted
    "The script and every txbook or bench/ module it imports, directly or through such modules"
    read = read or _reader(ROOT)

    def module_file(name: str) -> str | None:
        parts = name.split(".")
        if parts[0] == "txbook":
            for rel in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
                if read(rel) is not None: return rel
        elif len(parts) == 1 and read(f"bench/{name}.py") is not None:
            # a bench/ helper, imported by name
            return f"bench/{name}.py"
        return None

    todo, seen = [script], set()
    while todo:
        rel = todo.pop()
        if rel in seen: continue
        text = read(rel)
        if text is None:
            raise FileNotFoundError(f"{rel}: imported by a bench script, but not found")
        seen.add(rel)
        package = rel[:-3].replace("/", ".").rsplit(".", 1)[0] if rel.startswith("txbook/") \
            else None
        names = []
        for node in ast.walk(ast.parse(text, filename=rel)):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:                                   # relative: only inside the package
                    if package is None: continue
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                # `from txbook import vit`
                names += [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] == "txbook": todo.append("txbook/__init__.py")
            found = module_file(name)
            if found: todo.append(found)
    return sorted(seen)


def file_hash(text: str) -> str:
    """SHA-256 of a source file's text, line endings normalised (a checkout with CRLF hashes the
    same)"""
    return hashlib.sha256(text.replace("\r\n", "\n").encode("utf-8")).hexdigest()


def source_hashes(script: str, read=None) -> dict[str, str]:
    "{path: SHA-256} of `source_files(script)`: what a record stores as its `sources`"
    read = read or _reader(ROOT)
    return {rel: file_hash(read(rel)) for rel in source_files(script, read)}


def at_commit(commit: str):
    "read(rel) at `commit` (git show), for the sources of a record written there"
    def read(rel):
        r = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=ROOT, capture_output=True,
                           text=True)
        return r.stdout if r.returncode == 0 else None
    return read


def changes(rec: dict) -> list[str]:
    "Why a record is stale, one line per file (empty: its sources are the working tree's)"
    if "sources" not in rec: return ["the record lists no sources"]
    now = source_hashes(rec["script"])
    out = [f"{p}: changed since the record" for p in sorted(now.keys() & rec["sources"].keys())
           if now[p] != rec["sources"][p]]
    out += [f"{p}: imported now, not listed in the record"
            for p in sorted(now.keys() - rec["sources"].keys())]
    out += [f"{p}: listed in the record, no longer imported"
            for p in sorted(rec["sources"].keys() - now.keys())]
    return out


def records() -> list[Path]:
    return sorted(RECORDS.glob("*/*.json"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="records to re-record (default: every stale one)")
    ap.add_argument("--rerecord", action="store_true",
                    help="run the records' commands (clean tree only)")
    a = ap.parse_args()
    chosen = [Path(p).resolve() for p in a.paths] or records()
    todo = []
    for path in chosen:
        rec = json.loads(path.read_text())
        why = changes(rec)
        print(f"{path.relative_to(ROOT)}: {'stale' if why else 'current'} (recorded at "
              f"{rec['commit'][:9]})")
        for line in why: print(f"    {line}")
        if why or a.paths: todo.append(rec["command"])
    if not a.rerecord:
        for cmd in todo: print(f"re-record with: {cmd}")
        return
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        sys.exit("refusing to re-record: the tree has uncommitted changes, so no commit would "
                 "reproduce the records; commit them first:\n" + dirty)
    for cmd in todo:
        argv = shlex.split(cmd)
        argv[0] = sys.executable if argv[0] == "python" else argv[0]
        print(f"$ {cmd}", flush=True)
        subprocess.run(argv, cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
