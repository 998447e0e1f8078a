#!/usr/bin/env python3
"""Make the book's datasets available where the chapters look for them, for CI machines without
`../shared`.

Each file is taken from the data folder `$TXBOOK_DATA` names, if it is set, else from the download
cache (`~/.cache/txbook`, or `$TXBOOK_CACHE`), else downloaded from the official URLs into the cache
and checked against the published SHA-256: exactly what the chapters' loaders do, done once before
the tests so that no chapter downloads. Prints where each dataset was found.

    python tools/fetch_data.py     # needs the package's dependencies (run after `make install`)
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from txbook.data import (MNIST_FILES, MNIST_SHA256, MNIST_URLS, SHAKESPEARE_SHA256, SHAKESPEARE_URL,
                         _locate, cache_dir)

# The datasets the chapters read (CIFAR-10 is not among them: no chapter loads the real one)
FILES = {"tinyshakespeare": [("input.txt", [SHAKESPEARE_URL], SHAKESPEARE_SHA256)]}
for kind in ("mnist", "fashion-mnist"):
    FILES[kind] = [(f, [u + f for u in MNIST_URLS[kind]], MNIST_SHA256[kind][f])
                   for split in ("train", "test") for f in MNIST_FILES[split]]


def fetch() -> dict[str, list[Path]]:
    "Locate (or download) every file; returns the paths per dataset"
    return {name: [_locate(name, f, urls, sha) for f, urls, sha in files]
            for name, files in FILES.items()}


if __name__ == "__main__":
    for name, paths in fetch().items():
        where = "download cache" if paths[0].parent == cache_dir(name) else "shared data folder"
        print(f"{name}: {len(paths)} files in the {where}")
