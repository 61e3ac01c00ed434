"""The README and docs/ stay true: docs/cli.md shows what `--help` prints, every relative link and
every repository path they name resolves, and the README stays short with CI's test command as its
quick start."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
# Every Markdown page a reader reaches from the README: its links and paths must hold.
PAGES = sorted(
    [
        README,
        *DOCS.rglob("*.md"),
        REPO / "bench" / "README.md",
        REPO / "examples" / "README.md",
        REPO / "tests" / "projects" / "README.md",
        *(REPO / "editors").glob("*/README.md"),
    ]
)
README_MAX_LINES = 300
REGENERATE = "regenerate it: .venv/bin/python docs/generate_cli.py"


def generate_cli() -> ModuleType:
    """docs/generate_cli.py, a script beside the page it writes, loaded as a module."""
    spec = importlib.util.spec_from_file_location("generate_cli", DOCS / "generate_cli.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# docs/cli.md and the parser ----------------------------------------------------------------------


def test_cli_page_shows_every_commands_help() -> None:
    generator = generate_cli()
    page = (DOCS / "cli.md").read_text()
    assert page == generator.page_with_help(page), f"docs/cli.md's --help is stale; {REGENERATE}"


def test_cli_page_lists_every_command_in_its_table() -> None:
    from lowerd.cli.main import command_parser

    hand_written = (DOCS / "cli.md").read_text().partition(generate_cli().BEGIN)[0]
    commands = generate_cli().subcommands(command_parser())
    missing = [name for name in commands if f"`lowerd {name}" not in hand_written]
    assert not missing, f"docs/cli.md's table of commands lacks {missing}"


def test_generated_help_follows_the_parser() -> None:
    """The generator reads the parser itself: a new subcommand gets its section."""
    generator = generate_cli()
    commands = [command for command, _ in generator.command_helps()]
    assert commands[:2] == ["lowerd", "lowerd build"]
    assert "lowerd cache gc" in commands
    assert "### `lowerd cache gc --help`" in generator.help_sections()


# Links and paths ---------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
# A code span naming a file of this repository: `src/lowerd/cli/main.py`, `tests/projects/basic`.
REPO_PATH = re.compile(r"^(?:src|tests|testkit|bench|examples|editors|docs|\.ci)/[\w./-]*")


def prose(text: str) -> str:
    """The text outside fenced code blocks (a block's lines become blank: line numbers hold)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return "\n".join(lines)


def links(page: Path) -> list[str]:
    """Every link and image target in the page's prose, code spans left out."""
    text = CODE_SPAN.sub("", prose(page.read_text()))
    return LINK.findall(text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lowercased, punctuation dropped, spaces
    made hyphens ("Comparing backends: `lowerd compare`" → "comparing-backends-lowerd-compare")."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings; a repeated heading's get -1, -2, ..."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(page.read_text()).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_link(page: Path, target: str) -> str | None:
    """Why a link of `page` does not resolve, or None when it does."""
    path_part, _, anchor = target.partition("#")
    linked = (page.parent / path_part).resolve() if path_part else page
    if not linked.is_relative_to(REPO):
        return "leads out of the repository"
    if not linked.exists():
        return "names no file"
    if anchor and linked.suffix == ".md" and anchor not in anchors(linked):
        return f"{linked.relative_to(REPO)} has no heading #{anchor}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    relative = [target for target in links(page) if not SCHEME.match(target)]
    broken = [f"{target}: {why}" for target in relative if (why := broken_link(page, target))]
    assert not broken, f"{page.relative_to(REPO)}: broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_repository_path_named_exists(page: Path) -> None:
    """A path in a code span (`src/lowerd/lowering/build.py`) is the file's path from the root:
    a module moved or renamed without its docs fails here."""
    named = {
        match.group(0).rstrip(".")
        for _, span in CODE_SPAN.findall(prose(page.read_text()))
        if (match := REPO_PATH.match(span.strip()))
    }
    missing = sorted(path for path in named if not (REPO / path).exists())
    assert not missing, f"{page.relative_to(REPO)} names paths that do not exist: {missing}"


def test_the_link_checker_catches_a_broken_link(tmp_path: Path) -> None:
    page = DOCS / "cli.md"
    assert broken_link(page, "../README.md#quick-start") is None
    assert broken_link(page, "#building-lowerd-build") is None
    assert broken_link(page, "cache.md#no-such-heading") is not None
    assert broken_link(page, "no-such-page.md") is not None
    assert broken_link(page, "../../outside.md") is not None
    assert slug("Comparing backends: `lowerd compare`") == "comparing-backends-lowerd-compare"
    assert slug("Every command's `--help`") == "every-commands---help"


# The README --------------------------------------------------------------------------------------


def quick_start_commands() -> list[str]:
    """The commands of the README's quick start block, comments left out."""
    section = README.read_text().partition("## Quick start")[2]
    block = section.partition("```sh\n")[2].partition("```")[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_readme_fits() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move some to docs/"
    quick_start = lines.index("## Quick start")
    assert quick_start < 15, "the first screen says what lowerd is, then how to start"


def test_quick_start_is_what_ci_runs() -> None:
    """Two commands: set up and lower examples/; set up and run every check, as `.ci/run` does."""
    lower_examples, run_tests = quick_start_commands()
    ci_script = (REPO / ".ci" / "run").read_text().splitlines()
    ci_commands = [line for line in ci_script if "python3 -m venv" in line]
    assert ci_commands == [run_tests], ".ci/run must run the README's test command, verbatim"
    setup = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && "
    assert run_tests.startswith(setup)
    assert lower_examples == setup + "(cd examples && ../.venv/bin/lowerd build)"
