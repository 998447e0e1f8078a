import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted((ROOT / "nbs").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "book" / "_ext"))  # the book's Sphinx extension

# `make test` runs the suite in two pytest-xdist workers (`-n 2 --dist loadgroup`): the tests of each module below
# stay together in one worker, since they share a module fixture that takes minutes to build (a venv, a wheel, a
# torchrun job). The Colab simulation mostly waits on pip, so it overlaps well with the quick pass.
GROUPS = {"test_colab.py": "colab", "test_packaging.py": "packaging", "test_versions.py": "versions",
          "test_ddp.py": "ddp"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in GROUPS:
            item.add_marker(pytest.mark.xdist_group(GROUPS[item.path.name]))
