import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
NBS = sorted((ROOT / "nbs").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "book" / "_ext"))  # the book's Sphinx extension

# `make test` runs the suite in two pytest-xdist workers, a test file at a time (`-n 2 --dist loadfile`): the
# tests of a file share its module fixtures (a venv, a wheel, a torchrun job), built once in one worker. The Colab
# simulation (tests/test_colab.py) mostly waits on pip, so it overlaps well with the quick pass in the other.
