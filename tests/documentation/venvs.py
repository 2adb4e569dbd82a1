"""Fresh virtual environments with one extra of perdure each, as a page's reader makes them.

``python -m venv`` then ``pip install -e <checkout>[extra]``: pip resolves from
the machine's configured index, as the reader's would. One environment per
extra is made once per test session (and removed with the session's temporary
folder), all those the session's tests need at the same time, in threads, as
soon as the first is asked for (``NEEDS`` says which test file uses which);
how long each took is printed at the end of the run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial"
#: Seconds each environment took to make, by extra, for the end-of-run summary.
TIMINGS: dict[str, float] = {}
#: When each began and ended (time.monotonic()), for the time all of them took.
SPANS: list[tuple[float, float]] = []


@dataclass(frozen=True)
class Venv:
    """A virtual environment with perdure and one extra installed."""

    path: Path
    extra: str

    @property
    def bin(self) -> Path:
        """Its scripts folder (python, pip, perdure, uvicorn, django-admin ...)."""
        return self.path / "bin"

    @property
    def python(self) -> str:
        """Its interpreter."""
        return str(self.bin / "python")

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a shell where it is activated (its bin first on PATH)."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        # The suite measures coverage in subprocesses; these interpreters have no coverage.
        env = {k: v for k, v in env.items() if not k.startswith("COV_CORE")}
        env.update(VIRTUAL_ENV=str(self.path), PATH=f"{self.bin}{os.pathsep}{env['PATH']}")
        env.update(extra)
        return env

    def has(self, module: str) -> bool:
        """Whether ``module`` can be imported in it."""
        probe = (
            f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
        )
        return subprocess.run([self.python, "-c", probe], env=self.env()).returncode == 0


def make(base: Path, extra: str, *also: str) -> Venv:
    """A new environment under ``base`` with ``perdure[extra]`` (and the packages ``also``)."""
    began = time.monotonic()
    path = base / f"venv-{extra}"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    venv = Venv(path, extra)
    install = [venv.python, "-m", "pip", "install", "-q", "-e", f"{ROOT}[{extra}]", *also]
    done = subprocess.run(install, env=venv.env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(install)} failed:\n{done.stdout}\n{done.stderr}"
    ended = time.monotonic()
    TIMINGS["+".join([f"[{extra}]", *also])] = ended - began
    SPANS.append((began, ended))
    return venv


def tutorial_install() -> tuple[str, ...]:
    """What the tutorial's "What you need" installs: the extra, then other packages."""
    text = (TUTORIAL / "index.md").read_text()
    found = re.search(r'pip install -e "\.\[(\w+)\]"((?: [\w-]+)*)\n', text)
    assert found, 'docs/tutorial/index.md has no `pip install -e ".[extra]"` line'
    return (found.group(1), *found.group(2).split())


#: The environments each test file makes (an extra, then other packages).
NEEDS: dict[str, list[tuple[str, ...]]] = {
    "test_site.py": [("docs",)],
    "test_guides.py": [("fastapi",), ("django",)],
    "test_tutorial.py": [tutorial_install()],
}
