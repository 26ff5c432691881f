#!/usr/bin/env python3
"""Checks the repository's Markdown links: every relative link names a file that exists, and every
#anchor a heading of that file (GitHub's slugs). Prints each broken link as file:line: target and
exits 1 if there is one. Usage: scripts/check_doc_links.py [ROOT]"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
SKIP = ("build", "generated", ".git", ".pylibs", "venv")


def slug(heading):
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path):
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#+ (.*)", line)):
            found.add(slug(m.group(1)))
    return found


broken = 0
for md in sorted(root.rglob("*.md")):
    rel = md.relative_to(root)
    if rel.parts[0].startswith(SKIP) or any(part.startswith(SKIP) for part in rel.parts[:-1]):
        continue
    fenced = False
    for number, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            if not dest.exists():
                print(f"{rel}:{number}: {target}: no such file")
                broken += 1
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                print(f"{rel}:{number}: {target}: no heading '{anchor}' there")
                broken += 1
sys.exit(1 if broken else 0)
