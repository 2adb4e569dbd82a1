"""The site builds with ``mkdocs build --strict`` after ``pip install -e ".[docs]"`` alone.

The site is built once, in a fresh environment with only the docs extra (as a
reader following ``make docs`` would have), and then read: every relative link
resolves to a file of the site, no Sphinx role (``:meth:`...```) shows as text,
and the home page's grid is made of cards.
"""

from __future__ import annotations

import html.parser
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from .venvs import Venv

ROOT = Path(__file__).resolve().parents[2]
#: A reStructuredText role as a docstring would leave it in the HTML.
#: Making the environment (pip) and building the site take minutes on a busy machine.
pytestmark = pytest.mark.timeout(600)
RAW_ROLE = re.compile(r":(?:meth|func|class|attr|mod|exc|data|obj|ref):(?:`|<code>)")


@pytest.fixture(scope="module")
def site(venv: Callable[..., Venv], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strictly in an environment with ``perdure[docs]`` only."""
    docs = venv("docs")
    assert not docs.has("fastapi") and not docs.has("django")  # nothing beyond the extra
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [docs.python, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=docs.env(NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_the_site_builds_strictly_with_the_docs_extra_alone(site: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    assert '.venv/bin/pip install -e ".[docs]" && .venv/bin/mkdocs build --strict\n' in readme
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("worker", "check-replay", "schedules", "dashboard"):
        assert f">{command}<" in cli or f"perdure {command}" in cli, command
    app = (site / "reference" / "app" / "index.html").read_text()
    assert 'id="perdure.App.start"' in app
    testing = (site / "reference" / "testing" / "index.html").read_text()
    assert 'id="perdure.testing.plugin.perdure_app"' in testing


class _Links(html.parser.HTMLParser):
    """The href and src values of one page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.found.append(value)


def test_every_relative_link_of_the_site_resolves(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 40
    dead: list[str] = []
    checked = 0
    for page in pages:
        parser = _Links()
        parser.feed(page.read_text())
        for link in parser.found:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or not parts.path:
                continue  # another site, or an anchor on this page
            path = unquote(parts.path)
            # The 404 page links from the site's root (it is served at any depth).
            here = site if path.startswith("/") else page.parent
            target = (here / path.lstrip("/")).resolve()
            if target.is_dir():
                target = target / "index.html"
            checked += 1
            if not target.is_file():
                dead.append(f"{page.relative_to(site)} -> {link}")
    assert checked > 500
    assert not dead, "dead links:\n" + "\n".join(dead)


def test_no_sphinx_role_shows_in_the_site(site: Path) -> None:
    raw = [
        f"{page.relative_to(site)}: {match.group(0)}"
        for page in sorted(site.rglob("*.html"))
        for match in RAW_ROLE.finditer(page.read_text())
    ]
    assert not raw, f"{len(raw)} raw roles:\n" + "\n".join(raw[:20])
    assert not [
        f"{path}: {m.group(0)}"
        for path in sorted((ROOT / "src" / "perdure").rglob("*.py"))
        for m in re.finditer(r":(?:meth|func|class|attr|mod|exc|data):`", path.read_text())
    ]


def test_the_home_page_grid_is_cards(site: Path) -> None:
    home = (site / "index.html").read_text()
    grid = home.split('<div class="grid cards">', 1)
    assert len(grid) == 2, "the home page has no grid of cards"
    assert grid[1].lstrip().startswith("<ul>")  # the list is the cards
    assert "tutorial/" in grid[1].split("</div>", 1)[0]


def test_the_examples_linked_from_the_guides_are_published(site: Path) -> None:
    for page, example in (
        ("testing", "examples/test_checkout_example.py"),
        ("integrations/fastapi", "examples/fastapi_app.py"),
    ):
        text = (site / page / "index.html").read_text()
        assert example.split("/")[-1] in text, (page, example)
        assert (site / example).is_file(), example


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
