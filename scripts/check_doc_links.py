"""Check the relative links of the documentation: every file they name exists, and every
``#anchor`` into a Markdown file names one of its headings.

Checked: every ``*.md`` under ``docs/`` and the top-level ``README.md``; inline links and
images ``[text](path#anchor)``, ``[text](#anchor)`` and reference definitions
``[name]: path``, outside code blocks and code spans. Links with a scheme (``https:``,
``mailto:``) are not checked. Anchors follow GitHub's heading slugs: lower case, every
character that is not a letter, digit, ``_``, ``-`` or space removed, spaces turned into
``-``, and a repeated slug given ``-1``, ``-2``, ... in order.

    python3 scripts/check_doc_links.py    # prints each broken link, exits 1 if any
"""

from __future__ import annotations

import re
import sys
from bisect import bisect_right
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target); the text may hold one level of brackets or code spans.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)]*)?\)")
REFERENCE_DEF = re.compile(r"^[ ]{0,3}\[[^\]\n]+\]:[ \t]*<?(\S+?)>?(?:[ \t]+.*)?$", re.MULTILINE)
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before duplicates are numbered)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in "_- ")
    return text.replace(" ", "-")


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """The file's lines outside fenced code blocks, with their numbers."""
    lines = []
    in_fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append((number, line))
    return lines


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file offers: its headings' slugs and its HTML anchors."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path):
        found.update(HTML_ANCHOR.findall(line))
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """The link targets of a Markdown file, with their line numbers (a link's text may
    span lines)."""
    numbered = prose_lines(path)
    starts = []  # offset of each prose line in the joined text
    offset = 0
    for _, line in numbered:
        starts.append(offset)
        offset += len(line) + 1
    text = "\n".join(CODE_SPAN.sub(lambda m: "x" * len(m.group(0)), line) for _, line in numbered)

    def line_of(position: int) -> int:
        return numbered[bisect_right(starts, position) - 1][0]

    found = [*REFERENCE_DEF.finditer(text), *INLINE_LINK.finditer(text)]
    return sorted((line_of(match.start()), match.group(1)) for match in found)


def broken_links(path: Path, anchor_cache: dict[Path, set[str]]) -> list[str]:
    problems = []
    for number, target in links(path):
        if not target or SCHEME.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(REPO)}:{number}: {target}"
        if not destination.exists():
            problems.append(f"{where}: no such file")
            continue
        if not anchor or destination.suffix != ".md":
            continue
        if destination not in anchor_cache:
            anchor_cache[destination] = anchors(destination)
        if unquote(anchor).lower() not in anchor_cache[destination]:
            problems.append(f"{where}: no heading with that anchor")
    return problems


def documents() -> list[Path]:
    return [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]


def main() -> int:
    anchor_cache: dict[Path, set[str]] = {}
    problems = [problem for path in documents() for problem in broken_links(path, anchor_cache)]
    for problem in problems:
        print(problem)
    print(f"{len(problems)} broken link(s) in {len(documents())} files", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
