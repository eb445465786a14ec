"""The documentation builds, links only to what exists, and its code is code.

The site (mkdocs.yml, docs/) is built with `mkdocs build --strict`, which fails on a broken link,
a missing anchor, a page left out of the nav or an API name mkdocstrings cannot resolve. The
configuration reference must list every setting of `TemporalTasksSettings` (it is generated from
the class at build time), and the API reference every name `fastmcp_temporal` exports. Every
number the README or a page restates from the code (after a setting's name, or followed by a
comment naming its source: docs/hooks/prose_numbers.py) is the code's value, every constant the
hook knows is quoted somewhere, and no such comment reaches a built page. Every
Python block of the README and the docs compiles, and the README's smallest server runs as
written: it registers a task tool on a `TemporalTasksExtension`. The site reads offline: no
built page loads a script or a stylesheet from another host, and the pages that draw a mermaid
diagram load the mermaid the site ships (Material fetches one from a CDN only when none is
loaded). Long API signatures are formatted on several lines, not one clipped line.
"""

from __future__ import annotations

import ast
import asyncio
import html
import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import fastmcp_temporal
from fastmcp_temporal import TemporalTasksExtension, TemporalTasksSettings
from fastmcp_temporal._settings import ENV_PREFIX
from fastmcp_temporal.worker._plugin import tasks_extension

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = sorted((REPO / "docs").glob("*.md"))
HOOKS = REPO / "docs" / "hooks"
TEST_COMMAND_START = 'python3 -m venv .venv && .venv/bin/pip install -e ".[test]"'  # .ci/run's, the docs' too
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SNIPPET_INCLUDE = "--8<--"


def code_blocks(page: Path, language: str) -> list[str]:
    """The fenced blocks of `language` in `page`, leaving out snippet includes (real files, run elsewhere)."""
    return [
        body
        for lang, body in FENCE.findall(page.read_text())
        if lang == language and SNIPPET_INCLUDE not in body
    ]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strictly from this checkout."""
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout}\n{build.stderr}"
    return out


@pytest.fixture(scope="module")
def prose_numbers() -> Iterator[ModuleType]:
    """docs/hooks/prose_numbers.py, imported as MkDocs imports a hook: with its folder on `sys.path`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(HOOKS))
        yield importlib.import_module("prose_numbers")


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda page: page.name)
def test_restated_numbers_are_the_codes(prose_numbers: ModuleType, page: Path) -> None:
    wrong = prose_numbers.mismatches(page.read_text())
    assert not wrong, f"{page.name}: " + "; ".join(wrong)


def test_every_known_constant_is_quoted(prose_numbers: ModuleType) -> None:
    quoted = {
        name for page in [README, *PAGES] for _, name, _ in prose_numbers.restated_numbers(page.read_text())
    }
    unquoted = set(prose_numbers.CONSTANTS) - quoted
    assert not unquoted, f"CONSTANTS holds names no page quotes: {sorted(unquoted)}"
    assert not set(prose_numbers.CONSTANTS) & set(TemporalTasksSettings.model_fields), "named like a setting"


def test_no_page_shows_a_comment_naming_a_source(prose_numbers: ModuleType, site: Path) -> None:
    names = {*prose_numbers.CONSTANTS, *TemporalTasksSettings.model_fields}
    for page in site.rglob("*.html"):
        shown = set(prose_numbers.COMMENT.findall(page.read_text())) & names
        assert not shown, f"{page.relative_to(site)}: {shown}"


def test_configuration_reference_lists_every_setting(site: Path) -> None:
    page = (site / "configuration" / "index.html").read_text()
    for name, field in TemporalTasksSettings.model_fields.items():
        assert field.description, f"setting {name!r} has no Field(description=...) for the reference"
        assert f"<code>{name}</code>" in page, name
        assert f"<code>{ENV_PREFIX}{name.upper()}</code>" in page, name
    assert "settings-reference" not in page, "the hook left its marker unreplaced"


def test_api_reference_documents_every_export(site: Path) -> None:
    page = (site / "reference" / "index.html").read_text()
    for name in fastmcp_temporal.__all__:
        assert f'id="fastmcp_temporal.{name}"' in page, name


EXTERNAL = re.compile(r"""<(?:script|link)\b[^>]*\b(?:src|href)=["']?(?:https?:)?//""", re.IGNORECASE)


def test_no_page_loads_a_script_or_stylesheet_from_another_host(site: Path) -> None:
    built = sorted(site.rglob("*.html"))
    assert len(built) > len(PAGES)
    offenders = [
        f"{page.relative_to(site)}: {tag}"
        for page in built
        for tag in re.findall(r"<(?:script|link)\b[^>]*>", page.read_text())
        if EXTERNAL.match(tag) and 'rel="canonical"' not in tag
    ]
    assert not offenders, "\n".join(offenders)


def test_diagrams_are_drawn_by_the_mermaid_the_site_ships(site: Path) -> None:
    architecture = (site / "architecture" / "index.html").read_text()
    assert architecture.count('<pre class="mermaid">') == 2
    mermaid = architecture.index('<script src="../javascripts/mermaid.min.js">')
    assert mermaid < architecture.index("assets/javascripts/bundle."), "Material would fetch its own"
    shipped = site / "javascripts" / "mermaid.min.js"
    assert shipped.stat().st_size > 1_000_000 and "flowchart" in shipped.read_text()
    assert "mermaid.min.js" not in (site / "index.html").read_text(), "loaded where nothing is drawn"


def test_long_signatures_are_formatted_on_several_lines(site: Path) -> None:
    page = (site / "reference" / "index.html").read_text()
    signatures = [
        html.unescape(re.sub(r"<[^>]+>", "", body))
        for body in re.findall(r'<div class="doc-signature[^"]*">(.*?)</div>', page, re.DOTALL)
    ]
    (extension,) = [s for s in signatures if s.startswith("TemporalTasksExtension(")]
    assert "(\n    *,\n    address: str | None = None,\n" in extension, extension
    assert max(len(line) for s in signatures for line in s.splitlines()) <= 80


def test_every_page_is_built(site: Path) -> None:
    for page in PAGES:
        built = site / "index.html" if page.stem == "index" else site / page.stem / "index.html"
        assert built.is_file(), page.name


def test_readme_links_exist() -> None:
    links = re.findall(r"\]\((?!https?://|#)([^)#\s]+)", README.read_text())
    assert links, "the README links into the docs"
    for link in links:
        assert (REPO / link).exists(), f"README links to {link}, which does not exist"


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda page: page.name)
def test_python_blocks_compile(page: Path) -> None:
    for number, block in enumerate(code_blocks(page, "python"), 1):
        try:
            compile(block, f"{page.name} python block {number}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError as error:
            pytest.fail(f"{page.name}, python block {number} does not compile: {error}\n{block}")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda page: page.name)
def test_toml_blocks_parse(page: Path) -> None:
    import tomllib

    for block in code_blocks(page, "toml"):
        tomllib.loads(block)


def test_readme_server_runs_as_written() -> None:
    smallest = code_blocks(README, "python")[0]
    namespace: dict[str, object] = {}
    exec(compile(smallest, "README.md", "exec"), namespace)
    mcp = namespace["mcp"]
    assert isinstance(tasks_extension(mcp), TemporalTasksExtension)  # type: ignore[arg-type]
    tool = asyncio.run(mcp.get_tool("crunch"))  # type: ignore[attr-defined]
    assert tool.task_config.mode == "optional"


def test_ci_runs_the_test_command_the_readme_and_getting_started_give() -> None:
    def test_command(text: str) -> str:
        return next(line for line in text.splitlines() if line.startswith(TEST_COMMAND_START))

    ci = test_command((REPO / ".ci" / "run").read_text())
    assert test_command(README.read_text()) == ci
    assert test_command((REPO / "docs" / "getting-started.md").read_text()) == ci
