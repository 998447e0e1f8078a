"""The benchmark scripts in bench/ still run: each is called once with tiny sizes.

The figures in the chapters and the issue notes come from these scripts, so a script that no longer
runs (an API renamed in a chapter, an argument dropped) would leave figures nobody can reproduce. No
timing is asserted here (timings are the scripts' output, read by people); what is checked is that
each script exits 0, prints its table, and that the correctness checks inside it pass (the scripts
assert that the two models they time compute the same outputs, or that the cached decoding gives the
same tokens).
"""
import os, subprocess, sys
from pathlib import Path

import pytest
# runs the bench scripts: not in the fast path (`pytest -m "not slow"`)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / 'shared' / 'data'

# script, tiny arguments, a string its output must contain, needs ../shared/data
# bench_poslabels.py and bench_swin.py's table2 and ablation run in tests/test_bench_records.py,
# which also checks the records they write and the table they print.
CASES = [
    ('bench_mhsa.py', ['--reps', '1', '--warmup', '1', '--sizes', '16', '40', '--batch', '2',
                       '--d-model', '32', '--heads', '4', '--breakdown'], 'floor', False),
    ('bench_vit_vs_hf.py', ['--rounds', '1', '--batch', '2', '--dim', '32', '--depth', '1',
                            '--heads', '2', '--threads', '1'], 'train step', False),
    ('bench_kvcache.py', ['--tokens', '6'], 'KV cache', False),
    ('bench_vit_vs_timm.py', ['--device', 'cpu', '--batch', '4', '--steps', '1', '--rounds', '1',
                              '--warmup', '1', '--profile'], 'ours / timm', False),
    ('bench_swin.py', ['cost', '--sides', '32', '64'], '|', False),
    ('bench_chargpt.py', ['--steps', '2', '--eval-every', '1', '--eval-iters', '1', '--depth', '1',
                          '--width', '32', '--context', '16', '--device',
                          'cpu'], 'RESULT chargpt', True),
    ('bench_vit.py', ['--dataset', 'mnist', '--epochs', '1', '--train-limit', '128', '--test-limit',
                      '256', '--device', 'cpu'], 'RESULT mnist', True),
]


@pytest.mark.parametrize('script,args,expect,needs_data', CASES,
                         ids=[f"{c[0]}-{c[1][0]}" for c in CASES])
def test_bench_runs(script, args, expect, needs_data):
    if needs_data and not DATA.is_dir():
        pytest.skip(f"needs the datasets in {DATA}")
    env = {**os.environ, 'PYTHONPATH': str(ROOT)}
    r = subprocess.run([sys.executable, str(ROOT / 'bench' / script), *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (
        f"{script} {' '.join(args)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    )
    assert expect in r.stdout, f"{script}: no {expect!r} in its output:\n{r.stdout[-3000:]}"

