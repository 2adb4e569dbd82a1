"""The documentation site builds with ``mkdocs build --strict``: no broken link, no missing page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cli = (tmp_path / "reference" / "cli" / "index.html").read_text()
    for command in ("worker", "check-replay", "schedules", "dashboard"):
        assert f">{command}<" in cli or f"perdure {command}" in cli, command
    app = (tmp_path / "reference" / "app" / "index.html").read_text()
    assert 'id="perdure.App.start"' in app


QUICKSTART = (
    'python3 -m venv .venv && .venv/bin/pip install -e ".[embedded]" && .venv/bin/perdure demo',
    'python3 -m venv .venv && .venv/bin/pip install -e ".[dev,bench]" && .venv/bin/pytest',
)


def test_the_readme_is_a_landing_page_whose_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 220
    for command in QUICKSTART:
        assert f"\n{command}\n" in readme, command
    ci = (ROOT / ".ci" / "run").read_text().replace('"$PYTHON"', "python3")
    assert QUICKSTART[1] in ci  # CI runs the README's line
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if not t.startswith(("http://", "https://", "mailto:"))]
    assert local, "the README links into the site"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"
