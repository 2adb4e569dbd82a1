"""The code blocks of README.md and docs/: found, classified, and the free names of Python ones.

A fenced block may be preceded by HTML comments that say how to treat it:

- ``<!-- not-run: reason -->``: not executed, for the stated reason (Python
  blocks are still compiled);
- ``<!-- run-by: where -->``: executed elsewhere (the tutorial's test, the
  suite, CI's own command), said where;
- ``<!-- setup: code -->``: Python executed, hidden, just before the block
  (values the page takes for granted, such as a run id).

Python blocks of one page run in order in one namespace, so a block may use
what an earlier block on its page defined.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)(?P<info>[^\n`]*)$")
MARKER = re.compile(r"<!--\s*(not-run|run-by|setup):(.*?)-->", re.S)


@dataclass
class Block:
    """One fenced code block of a page."""

    page: str
    line: int
    lang: str
    code: str
    not_run: str = ""
    run_by: str = ""
    setup: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        """``page:line``, for messages and test ids."""
        return f"{self.page}:{self.line}"

    @property
    def included(self) -> bool:
        """The block only includes a file (``--8<--``), which its own test runs."""
        lines = [line for line in self.code.splitlines() if line.strip()]
        return bool(lines) and all(line.strip().startswith("--8<--") for line in lines)


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one page, with the markers written just before each."""
    text = path.read_text()
    lines = text.splitlines()
    found: list[Block] = []
    page = str(path.relative_to(ROOT))
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        lang = (opening["info"].strip().split() or [""])[0].lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        block = Block(page, i + 1, lang, "\n".join(body) + "\n")
        _markers(block, _comments_before(lines, i))
        found.append(block)
        i = j + 1
    return found


def _comments_before(lines: list[str], index: int) -> str:
    """The HTML comments right before line ``index`` (blank lines between are allowed)."""
    k = index - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    end = k
    if k < 0 or not lines[k].rstrip().endswith("-->"):
        return ""
    while k >= 0 and "<!--" not in lines[k]:
        k -= 1
    start = k
    # Several comments in a row, each ending where the next begins.
    while start > 0:
        above = start - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        if above < 0 or not lines[above].rstrip().endswith("-->"):
            break
        while above >= 0 and "<!--" not in lines[above]:
            above -= 1
        start = above
    return "\n".join(lines[start : end + 1])


def _markers(block: Block, comments: str) -> None:
    for kind, value in MARKER.findall(comments):
        if kind == "not-run":
            block.not_run = value.strip()
        elif kind == "run-by":
            block.run_by = value.strip()
        else:
            block.setup.append(_dedent(value))


def _dedent(code: str) -> str:
    lines = code.strip("\n").splitlines()
    width = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    return "\n".join(x[width:] for x in lines) + "\n"


def free_names(code: str, known: set[str]) -> set[str]:
    """Names ``code`` reads at module level or in functions but never binds, nor ``known``."""
    tree = ast.parse(code)
    bound = set(known) | set(dir(builtins))
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return read - bound
