"""Recorded training benchmarks, `results/bench/<page>/<name>.json`, and the pages that read them.

The records here are those of the training benchmarks (`bench/bench_swin.py ablation|table2`,
`bench/bench_poslabels.py`): accuracies per seed of every row of a table. Other benchmarks record other things
in other layouts; of those, only the existence of every record a page reads is checked here.

A page never types a benchmark's numbers into its text or its code: a cell reads the record and prints it
(chapters 12, 15 and 16), and the page, when it runs (tests/test_notebooks.py), checks that the record's rows are
its own rows, in its order. This file holds the rest of the contract without running the pages:

- every record parses and says where it came from: its page (the folder's name, a notebook that exists), the
  script in bench/ that wrote it, the command, whose arguments the script's own parser turns into exactly the
  recorded ones, a full commit hash that exists in this repository and a clean tree at that commit (so the
  commit alone reproduces it), the date, the machine, the seeds;
- its numbers are consistent with that command: one top-1 and one top-5 value per seed for every row, each a
  fraction with top-5 >= top-1, and the recorded steps per run equal to epochs x batches of the recorded data;
- its page reads it (the record's path appears in a code cell of the page), and every record a page's code
  names exists;
- the scripts still write such records (tiny sizes, into a temporary folder).
"""
import importlib.util, json, math, os, re, shlex, subprocess, sys

import pytest
from conftest import NBS, ROOT

SCRIPTS = {"bench/bench_swin.py", "bench/bench_poslabels.py"}
RECORDS = sorted(p for p in (ROOT / "results" / "bench").glob("*/*.json")
                 if json.loads(p.read_text()).get("script") in SCRIPTS)
KEYS = {"page", "script", "command", "args", "commit", "dirty", "date", "machine", "seeds", "steps", "wall_s",
        "cpu_s", "rows"}
DATA = ROOT.parent / "shared" / "data"


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
    assert parsed == rec["args"], f"the command does not give the recorded arguments: {parsed} != {rec['args']}"
    assert re.fullmatch(r"[0-9a-f]{40}", rec["commit"] or ""), rec["commit"]
    assert isinstance(rec["dirty"], bool)
    if path is not None:   # a record in the repository comes from a clean tree: its commit alone made it
        assert not rec["dirty"], f"{path}: recorded from a tree with uncommitted changes; rerun it from a commit"
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


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_record_is_complete_and_consistent(path):
    check_record(json.loads(path.read_text()), path.relative_to(ROOT / "results" / "bench"))


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_record_names_a_commit_that_exists(path):
    sha = json.loads(path.read_text())["commit"]
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True,
                             text=True).stdout.strip()
    if shallow == "true":
        pytest.skip("a shallow clone cannot tell whether an old commit exists")
    r = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=ROOT, capture_output=True)
    assert r.returncode == 0, f"{path.name} names commit {sha}, which is not in this repository"


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_page_reads_its_record(path):
    rel = f"{path.parent.name}/{path.name}"
    assert rel in _code(path.parent.name), f"nbs/{path.parent.name}.ipynb does not read results/bench/{rel}"


@pytest.mark.parametrize("page", [p.stem for p in NBS], ids=str)
def test_every_record_a_page_reads_exists(page):
    code = _code(page)
    for rel in sorted(set(re.findall(r"results/bench/([\w.-]+/[\w.-]+\.json)", code))
                      | set(re.findall(r"load_record\('([\w.-]+/[\w.-]+\.json)'\)", code))):
        assert (ROOT / "results" / "bench" / rel).exists(), f"{page} reads results/bench/{rel}, which is missing"


def test_the_table1_record_has_the_pages_rows():
    "Chapter 15's rows come from its module, so they can be checked here without running the page"
    from txbook.table1 import ROWS, row_name
    for path in (ROOT / "results" / "bench" / "15_table1").glob("*.json"):
        rec = json.loads(path.read_text())
        assert list(rec["rows"]) == [row_name(*k) for k in ROWS], path.name
        assert [tuple(r["key"]) for r in rec["rows"].values()] == ROWS, path.name


@pytest.mark.parametrize("script,args", [
    ("bench/bench_swin.py", ["table2", "--n-train", "64", "--epochs", "1", "--seeds", "0", "1", "--width", "16",
                             "--batch-size", "32", "--device", "cpu", "--workers", "2"]),
    ("bench/bench_swin.py", ["ablation", "--n-train", "64", "--epochs", "1", "--seeds", "0", "--width", "16",
                             "--batch-size", "32", "--device", "cpu"]),
    ("bench/bench_poslabels.py", ["--n-train", "64", "--n-test", "64", "--epochs", "1", "--seeds", "2",
                                  "--batch-size", "32", "--workers", "2"]),
], ids=["swin-table2", "swin-ablation", "poslabels"])
def test_the_scripts_write_records(script, args, tmp_path):
    if not DATA.is_dir():
        pytest.skip(f"needs the datasets in {DATA}")
    out = tmp_path / "rec.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, str(ROOT / script), *args, "--json", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{script} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    rec = json.loads(out.read_text())
    rec["command"] = rec["command"].replace(str(out), "OUT")     # what the record says, re-parsed
    rec["args"]["json"] = "OUT"
    check_record(rec)
