"""Recorded training benchmarks, `results/bench/<page>/<name>.json`, and the pages that read them.

The records here are those of the training benchmarks (`bench/bench_swin.py ablation|table2`,
`bench/bench_poslabels.py`): accuracies per seed of every row of a table. Other benchmarks record
other things in other layouts; of those, only the existence of every record a page reads is checked
here.

A page never types a benchmark's numbers into its text or its code: a cell reads the record and
prints it (chapters 12, 15 and 16), and the page, when it runs (tests/test_notebooks.py), checks
that the record's rows are its own rows, in its order. This file holds the rest of the contract
without running the pages:

- every record parses and says where it came from: its page (the folder's name, a notebook that
  exists), the script in bench/ that wrote it, the command, whose arguments the script's own parser
  turns into exactly the recorded ones, a full commit hash that exists in this repository and a
  clean tree at that commit (so the commit alone reproduces it), the date, the machine, the seeds;
- its numbers are consistent with that command: one top-1 and one top-5 value per seed for every
  row, each a fraction with top-5 >= top-1, and the recorded steps per run equal to epochs x batches
  of the recorded data;
- its page reads it (the record's path appears in a code cell of the page), and every record a
  page's code names exists;
- the scripts still write such records (tiny sizes, into a temporary folder).

Every record in `results/bench`, the training records and the speed records (chapter 2's
`bench_mhsa.json`, chapter 10's `bench_vit_vs_hf.json`) alike, also proves it still reproduces: it
says where it came from (script, command, a clean commit that exists) and lists the source files its
command runs with their SHA-256 (`sources`, computed by `tools/records.py` from the script's
imports, never typed), and

- its sources are the working tree's: a listed file whose hash differs, or an imported file it does
  not list, makes the record stale, and the test fails with the command that re-records it (from a
  clean commit; or `python tools/records.py --rerecord`, which runs every stale record's command and
  refuses a dirty tree);
- its sources are those of its own commit (the same files and hashes read with `git show`), so the
  list was written by the code it names;
- the computed list covers what Python imports: every `txbook` or `bench/` module that importing the
  script loads is on it.
"""
import importlib.util, json, math, os, re, shlex, subprocess, sys

import pytest
from helpers import NBS, ROOT

sys.path.insert(0, str(ROOT / "tools"))
from records import at_commit, changes, source_files, source_hashes  # noqa: E402

SCRIPTS = {"bench/bench_swin.py", "bench/bench_poslabels.py"}
ALL = sorted((ROOT / "results" / "bench").glob("*/*.json"))
RECORDS = [p for p in ALL if json.loads(p.read_text()).get("script") in SCRIPTS]
KEYS = {"page", "script", "command", "args", "commit", "dirty", "date", "machine", "seeds",
        "steps", "wall_s", "cpu_s", "rows", "sources"}
ORIGIN = {"script", "command", "commit", "dirty", "date", "machine", "sources"}   # every record
DATA = ROOT.parent / "shared" / "data"
rel_id = lambda p: f"{p.parent.name}/{p.name}"


def _bench(script: str):
    "The bench script as a module (its `parser()` is what the command went through)"
    spec = importlib.util.spec_from_file_location(script.replace("/", "_")[:-3], ROOT / script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _code(page: str) -> str:
    nb = json.loads((ROOT / "nbs" / f"{page}.ipynb").read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


def check_record(rec: dict, path=None):
    "Everything a record must hold; `path` (under results/bench) when it is one of the repository's"
    assert KEYS <= rec.keys(), f"{path}: lacks {sorted(KEYS - rec.keys())}"
    if path is not None:
        assert rec["page"] == path.parent.name, (rec["page"], path)
    assert (ROOT / "nbs" / f"{rec['page']}.ipynb").exists(), rec["page"]
    assert rec["script"].startswith("bench/") and (ROOT / rec["script"]).exists(), rec["script"]
    argv = shlex.split(rec["command"])
    assert argv[:2] == ["python", rec["script"]], rec["command"]
    parsed = vars(_bench(rec["script"]).parser().parse_args(argv[2:]))
    assert parsed == rec["args"], (
        f"the command does not give the recorded arguments: {parsed} != {rec['args']}"
    )
    assert re.fullmatch(r"[0-9a-f]{40}", rec["commit"] or ""), rec["commit"]
    assert isinstance(rec["dirty"], bool)
    if path is not None:
        # a record in the repository comes from a clean tree: its commit alone made it
        assert not rec["dirty"], (
            f"{path}: recorded from a tree with uncommitted changes; rerun it from a commit"
        )
    assert {"cpu", "device", "torch"} <= rec["machine"].keys(), rec["machine"]
    seeds = rec["seeds"]
    assert len(seeds) == len(set(seeds)) >= 1, seeds
    a = rec["args"]
    n_train = a["n_train"]
    assert rec["steps"] == a["epochs"] * math.ceil(n_train / a["batch_size"]), (rec["steps"], a)
    assert rec["rows"], "no rows"
    for name, row in rec["rows"].items():
        assert len(row["top1"]) == len(row["top5"]) == len(seeds), (name, row)
        for t1, t5 in zip(row["top1"], row["top5"]):
            assert 0 <= t1 <= t5 <= 1, (name, t1, t5)
    assert rec["wall_s"] > 0 and rec["cpu_s"] > 0


@pytest.mark.parametrize("path", RECORDS, ids=rel_id)
def test_record_is_complete_and_consistent(path):
    check_record(json.loads(path.read_text()), path.relative_to(ROOT / "results" / "bench"))


@pytest.mark.parametrize("path", ALL, ids=rel_id)
def test_record_says_where_it_came_from(path):
    "Every record, speed or training: its page, script and command, a full commit and a clean tree"
    rec = json.loads(path.read_text())
    assert ORIGIN <= rec.keys(), f"{rel_id(path)}: lacks {sorted(ORIGIN - rec.keys())}"
    assert rec.get("page", path.parent.name) == path.parent.name, (rec.get("page"), rel_id(path))
    assert (ROOT / "nbs" / f"{path.parent.name}.ipynb").exists(), path.parent.name
    assert rec["script"].startswith("bench/") and (ROOT / rec["script"]).exists(), rec["script"]
    assert shlex.split(rec["command"])[:2] == ["python", rec["script"]], rec["command"]
    assert re.fullmatch(r"[0-9a-f]{40}", rec["commit"] or ""), rec["commit"]
    assert rec["dirty"] is False, f"{rel_id(path)}: recorded from a tree with uncommitted changes"


def _shallow() -> bool:
    return subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip() == "true"


@pytest.mark.parametrize("path", ALL, ids=rel_id)
def test_record_names_a_commit_that_exists(path):
    sha = json.loads(path.read_text())["commit"]
    if _shallow():
        pytest.skip("a shallow clone cannot tell whether an old commit exists")
    r = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=ROOT,
                       capture_output=True)
    assert r.returncode == 0, f"{path.name} names commit {sha}, which is not in this repository"


@pytest.mark.parametrize("path", ALL, ids=rel_id)
def test_record_still_reproduces(path):
    "The files the record's command runs are as they were when it was recorded (else: re-record it)"
    rec = json.loads(path.read_text())
    why = changes(rec)
    assert not why, (f"results/bench/{rel_id(path)} is stale: its command no longer runs the code "
                     f"that wrote it (recorded at {rec['commit'][:9]}):\n    " + "\n    ".join(why)
                     + f"\nRe-record it from a clean commit:\n    {rec['command']}\n"
                     f"(or every stale record: python tools/records.py --rerecord)")


@pytest.mark.parametrize("path", ALL, ids=rel_id)
def test_record_sources_are_its_commits(path):
    "The listed files and hashes are those of the record's own commit: computed there, not typed"
    rec = json.loads(path.read_text())
    if _shallow():
        pytest.skip("a shallow clone may not hold the record's commit")
    assert rec["sources"] == source_hashes(rec["script"], at_commit(rec["commit"])), \
        f"{rel_id(path)}: its sources are not the files its commit {rec['commit'][:9]} would list"


@pytest.mark.slow   # a Python process importing torch per script
@pytest.mark.parametrize("script", sorted({json.loads(p.read_text())["script"] for p in ALL}))
def test_source_files_cover_what_python_imports(script):
    "Importing the script loads no txbook or bench/ module that its computed list leaves out"
    probe = ("import importlib.util, json, sys; "
             f"spec = importlib.util.spec_from_file_location('probe', {str(ROOT / script)!r}); "
             "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
             "print(json.dumps(sorted(getattr(v, '__file__', None) or '' for v in "
             "list(sys.modules.values()))))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    loaded = {os.path.relpath(f, ROOT) for f in json.loads(r.stdout.splitlines()[-1])
              if f.startswith(str(ROOT / "txbook")) or f.startswith(str(ROOT / "bench"))}
    missing = loaded - set(source_files(script))
    assert "txbook/__init__.py" in loaded \
        and not missing, f"{script} loads {sorted(missing)}, not listed"


def test_a_changed_source_makes_a_record_stale():
    "The staleness check itself: an edited hash, a missing file and an extra one are each reported"
    rec = {"script": "bench/bench_mhsa.py", "sources": source_hashes("bench/bench_mhsa.py")}
    assert changes(rec) == []
    edited = dict(rec["sources"], **{"txbook/mhsa.py": "0" * 64})
    assert changes({**rec, "sources": edited}) == ["txbook/mhsa.py: changed since the record"]
    fewer = {k: v for k, v in rec["sources"].items() if k != "txbook/attention.py"}
    assert changes({**rec, "sources": fewer}) == ["txbook/attention.py: imported now, not listed "
                                                  "in the record"]
    more = dict(rec["sources"], **{"txbook/vit.py": "0" * 64})
    assert changes({**rec, "sources": more}) == ["txbook/vit.py: listed in the record, no longer "
                                                 "imported"]
    assert changes({"script": "bench/bench_mhsa.py"}) == ["the record lists no sources"]


@pytest.mark.parametrize("path", ALL, ids=rel_id)
def test_the_page_reads_its_record(path):
    rel = f"{path.parent.name}/{path.name}"
    assert rel in _code(
        path.parent.name), f"nbs/{path.parent.name}.ipynb does not read results/bench/{rel}"


@pytest.mark.parametrize("page", [p.stem for p in NBS], ids=str)
def test_every_record_a_page_reads_exists(page):
    code = _code(page)
    for rel in sorted(set(re.findall(r"results/bench/([\w.-]+/[\w.-]+\.json)", code))
                      | set(re.findall(r"load_record\('([\w.-]+/[\w.-]+\.json)'\)", code))):
        assert (ROOT / "results" / "bench"
                / rel).exists(), f"{page} reads results/bench/{rel}, which is missing"


def test_the_table1_record_has_the_pages_rows():
    "Chapter 15's rows come from its module, so they can be checked here without running the page"
    from txbook.table1 import ROWS, row_name
    for path in (ROOT / "results" / "bench" / "15_table1").glob("*.json"):
        rec = json.loads(path.read_text())
        assert list(rec["rows"]) == [row_name(*k) for k in ROWS], path.name
        assert [tuple(r["key"]) for r in rec["rows"].values()] == ROWS, path.name


@pytest.mark.parametrize("script,args,table", [
    ("bench/bench_swin.py",
     ["table2", "--n-train", "64", "--n-test", "256", "--epochs", "1", "--seeds", "0", "1",
      "--width", "16", "--batch-size", "32", "--device", "cpu", "--workers", "2"], "±"),
    ("bench/bench_swin.py",
     ["ablation", "--n-train", "64", "--n-test", "256", "--epochs", "1", "--seeds", "0",
      "--width", "16", "--batch-size", "32", "--device", "cpu"], "±"),
    ("bench/bench_poslabels.py",
     ["--n-train", "64", "--n-test", "64", "--epochs", "1", "--seeds", "2",
                                  "--batch-size", "32", "--workers", "2"], "|"),
], ids=["swin-table2", "swin-ablation", "poslabels"])
@pytest.mark.slow   # runs the bench scripts
def test_the_scripts_write_records(script, args, table, tmp_path):
    """Each script runs at tiny sizes, prints its table (holding `table`) and writes a record that
    checks"""
    if not DATA.is_dir():
        pytest.skip(f"needs the datasets in {DATA}")
    out = tmp_path / "rec.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, str(ROOT / script), *args, "--json", str(out)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{script} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert table in r.stdout, f"{script}: no {table!r} in its output:\n{r.stdout[-3000:]}"
    rec = json.loads(out.read_text())
    rec["command"] = rec["command"].replace(str(out), "OUT")     # what the record says, re-parsed
    rec["args"]["json"] = "OUT"
    check_record(rec)
    assert rec["sources"] == source_hashes(script) and not changes(rec)   # the working tree's files
