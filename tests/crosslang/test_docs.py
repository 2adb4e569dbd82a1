"""The SQL, curl and Node examples of docs/any-language.md, run against a real worker.

The examples name the default schema ``perdure``; each test runs them on its
own schema, so ``perdure.`` before a function name is replaced by it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import psycopg
import pytest

import perdure
from crosslang.conftest import HERE, Served
from http_api.workload import define

PAGE = HERE.parent.parent / "docs" / "any-language.md"


def blocks(language: str, *, not_run: bool = False) -> list[str]:
    """The fenced code blocks of the page in ``language``, in order; with ``not_run``,
    those marked ``<!-- not-run: ... -->`` too (they need what these tests lack)."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.findall(rf"(<!--\s*not-run:[^>]*-->\n)?```{language}\n(.*?)```", text, flags=re.S)
    return [code for marker, code in found if not_run or not marker]


def in_schema(code: str, schema: str) -> str:
    """``code`` with the default schema's name replaced by the test's."""
    return re.sub(r"\bperdure\.(?=[a-z_]+\()", f"{schema}.", code)


def env_of(served: Served) -> dict[str, str]:
    """The environment the examples read."""
    return {
        **os.environ,
        "DATABASE_URL": served.database_url,
        "PERDURE_API": served.api,
        "PERDURE_TOKEN": served.token,
    }


def test_the_page_has_examples_of_each_kind() -> None:
    assert len(blocks("sql")) >= 2
    assert len(blocks("bash")) >= 2
    assert len(blocks("js")) >= 2
    assert len(blocks("go")) >= 2


def test_sql_examples(app: perdure.App, pg_url: str, schema: str) -> None:
    define(app)
    app.register()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        for block in blocks("sql"):
            conn.execute(in_schema(block, schema).encode())
        row = conn.execute("SELECT status, tags FROM runs WHERE key = 'chat-sql-42'").fetchone()
    assert row == ("queued", {"team": "growth"})


def test_curl_examples(served: Served) -> None:
    outputs = []
    for block in blocks("bash"):
        if "curl" not in block:
            continue
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            env=env_of(served),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, block + done.stdout + done.stderr
        outputs.append(done.stdout)
    text = "".join(outputs)
    assert 'data: "hi there"' in text
    assert '"output":{"got":"hi there"}' in text
    assert '"status":"cancelled"' in text


def test_node_examples(node: str, served: Served, tmp_path: Path) -> None:
    (tmp_path / "node_modules").symlink_to(HERE / "node_modules")
    outputs = []
    for index, block in enumerate(blocks("js")):
        script = tmp_path / f"example{index}.mjs"
        script.write_text(in_schema(block, served.schema), encoding="utf-8")
        done = subprocess.run(
            [node, str(script)],
            cwd=tmp_path,
            env=env_of(served),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, block + done.stdout + done.stderr
        outputs.append(done.stdout)
    assert "refused 42704" in outputs[0]
    assert "{ got: 'from fetch' }" in outputs[1]


@pytest.mark.parametrize("language", ["sql", "bash", "js"])
def test_examples_name_only_documented_functions(language: str) -> None:
    documented = set(re.findall(r"^\| `([a-z_]+)\(", PAGE.read_text(encoding="utf-8"), re.M))
    documented |= {"resume_run"}  # documented in the pause_run row
    for block in blocks(language, not_run=True):
        for name in re.findall(r"\bperdure\.([a-z_]+)\(", block):
            assert name in documented, f"perdure.{name} is used but not in the table"
