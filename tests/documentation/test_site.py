"""The documentation site builds with ``mkdocs build --strict``: no broken link, no missing page."""

from __future__ import annotations

import os
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
