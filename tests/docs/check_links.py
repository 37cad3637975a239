#!/usr/bin/env python3
"""Checks that the documents' references into the tree resolve (ctest: docs_links).

usage: python3 tests/docs/check_links.py <repository root>

- Markdown links [text](target) in README.md, DESIGN.md, bench/NOTES.md, bench/results/*.md and dev/**/README.md:
  a relative target (no scheme, anchor dropped) must exist, relative to the document.
- Paths written out in README.md, DESIGN.md and bench/NOTES.md that start with bench/results/, and in README.md and
  DESIGN.md every path under kernels/, parallel/, framework/, bench/, launch/, configs/, tests/ or dev/ with a file
  extension, must exist relative to the root (a <placeholder> or * in a path skips it).
Prints every broken reference with its file and line; exit code 1 if there is one.
"""
import glob
import os
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
RESULTS_PATH = re.compile(r"(?<![\w/.-])(bench/results/[A-Za-z0-9_.\-/]+)")
TREE_PATH = re.compile(r"(?<![\w/.-])((?:kernels|parallel|framework|bench|launch|configs|tests|dev)/[A-Za-z0-9_.\-/]*"
                       r"\.[A-Za-z0-9]+)")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    docs = ["README.md", "DESIGN.md", "bench/NOTES.md"]
    docs += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "bench/results/*.md")))
    docs += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "dev/**/README.md"), recursive=True))
    broken, checked = [], 0
    for doc in docs:
        path = os.path.join(root, doc)
        if not os.path.exists(path):
            broken.append(f"{doc}: the document itself is missing")
            continue
        base = os.path.dirname(path)
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for n, line in enumerate(lines, 1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue
                target = target.split("#")[0]
                checked += 1
                if not os.path.exists(os.path.join(base, target)):
                    broken.append(f"{doc}:{n}: link target {target} does not exist")
            if doc in ("README.md", "DESIGN.md", "bench/NOTES.md"):
                paths = RESULTS_PATH.findall(line)
                if doc != "bench/NOTES.md":
                    paths += TREE_PATH.findall(line)
                for p in set(paths):
                    p = p.rstrip(".,;:)")
                    if "<" in p or "*" in p or p.endswith("/"):
                        continue
                    checked += 1
                    if not os.path.exists(os.path.join(root, p)):
                        broken.append(f"{doc}:{n}: path {p} does not exist")
    for b in broken:
        print(b)
    print(f"check_links: {checked} references in {len(docs)} documents, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
