"""One name per thing: the words the glossary (docs/architecture.md) retires stay out of src/.

Each retired word is a pattern; a line of perdure's source (Python, the named
queries, the dashboard's templates; not the migrations, which are history) that
matches one fails, unless it holds one of the few allowed uses listed with it:
a name users hold (``ctx.branch``, a published metric, a deprecated hook) or a
name stored in their databases (``LeaseExpired``, ``lease_expired``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from perdure.engine.control import Outcome

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "perdure"

#: Retired word -> (pattern, allowed substrings of a line that matches it).
RETIRED: dict[str, tuple[str, tuple[str, ...]]] = {
    # What the reaper does: it reaps; a task is reaped for good at max_lapses.
    "rescue": (r"\brescu", ()),
    "revive": (r"\breviv", ()),
    "dead-letter": (
        r"dead.?letter",
        (
            # The published metric and the deprecated observer hook users override.
            "perdure_tasks_dead_lettered",
            "def dead_lettered(self, count: int)",
            "deprecated ``dead_lettered``",
            "self.dead_lettered(count)",
        ),
    ),
    # A lease lapses; it does not expire (the stored event keeps its name).
    "expired lease": (r"\bleases?\b[^.\n]{0,30}\bexpir|\bexpired? leases?\b", ()),
    # A lost lease: the worker stops executing; nothing is "abandoned".
    "abandon": (r"\babandon", ()),
    # A step run by its own task is a step task.
    "parallel step": (r"\bparallel steps?\b", ()),
    "gathered": (r"\bgathered\b", ()),
    "branch": (
        r"\bbranch",
        (
            "ctx.branch",  # the user's call
            "def branch(",
            "Two branches that each added a migration",  # git branches
            "clients branch on",  # the verb, in the HTTP API's problem codes
            "Stable: branch on it.",
        ),
    ),
    # settle: only letting go of a task whose run stopped (flush, wind down otherwise).
    "settle": (
        r"\bsettl",
        (
            "tasks.settle(",
            "task_settle",
            "def settle(self, fence: Fence)",
            "Outcome.SETTLED",
            'SETTLED = "settled"',
            "Settle a held task whose run is not running any more",
            "Settle ``task`` without running it further",
            "settled like any cancelled run's",
        ),
    ),
}


def _sources() -> list[Path]:
    files = [*SRC.rglob("*.py"), *SRC.rglob("*.html"), *(SRC / "store/sql/queries").glob("*.sql")]
    return sorted(p for p in files if "migrations" not in p.parts)


def _hits() -> list[str]:
    found = []
    for path in _sources():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for word, (pattern, allowed) in RETIRED.items():
                if re.search(pattern, line, re.IGNORECASE) and not any(a in line for a in allowed):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {word!r}: {line.strip()}")
    return found


def test_no_retired_word_in_the_source() -> None:
    hits = _hits()
    assert not hits, "retired words (see the glossary in docs/architecture.md):\n" + "\n".join(hits)


def test_the_check_finds_a_retired_word(tmp_path: Path, monkeypatch: object) -> None:
    """The patterns match the words they retire (else the test above proves nothing)."""
    samples = {
        "rescue": "the reaper rescued it",
        "revive": "revive expired leases",
        "dead-letter": "the run was dead-lettered",
        "expired lease": "its lease expired",
        "abandon": "this worker abandons it",
        "parallel step": "a gather's parallel steps",
        "gathered": "the gathered steps",
        "branch": "branch_completed",
        "settle": "deferred.settle()",
    }
    assert set(samples) == set(RETIRED)
    for word, text in samples.items():
        pattern, allowed = RETIRED[word]
        assert re.search(pattern, text, re.IGNORECASE), word
        assert not any(a in text for a in allowed), word


def test_one_class_is_named_lease_lost() -> None:
    named = [
        f"{path.relative_to(SRC)}"
        for path in SRC.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name == "LeaseLost"
    ]
    assert named == ["errors.py"]


def test_executions_end_as_an_outcome_never_a_string() -> None:
    """A function that answers an ``Outcome`` never returns a string literal."""
    checked = 0
    for path in (SRC / "engine").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if node.returns is None or "Outcome" not in ast.unparse(node.returns):
                continue
            checked += 1
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Return)
                    and isinstance(inner.value, ast.Constant)
                    and isinstance(inner.value.value, str)
                ):
                    raise AssertionError(
                        f"{path.name}:{inner.lineno}: {node.name} returns {inner.value.value!r}"
                    )
    assert checked >= 10


def test_every_outcome_is_documented_with_the_metric() -> None:
    page = (ROOT / "docs" / "observability.md").read_text()
    row = next(line for line in page.splitlines() if "`perdure_task_duration_seconds`" in line)
    missing = [o.value for o in Outcome if f"`{o.value}`" not in row]
    assert not missing, missing
