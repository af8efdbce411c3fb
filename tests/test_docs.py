"""The documentation stays true: generated tables match the results, links lead somewhere, and
every page can be reached from the README."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

from sandboxkit.contest.languages import languages
from sandboxkit.registry import BackendEntry

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BENCHMARKS_PAGE = REPO / "benchmarks" / "README.md"
PLUGINS_PAGE = REPO / "docs" / "plugins.md"
CONTEST_PAGE = REPO / "docs" / "contest.md"
PAGES = [README, BENCHMARKS_PAGE, REPO / "examples" / "README.md", *(REPO / "docs").glob("*.md")]
LINK = re.compile(r"\]\(([^)\s]+)\)")
RESULTS_BLOCK = re.compile(r"(<!-- results/[\w.-]+\.json -->\n).*?(<!-- end results -->)", re.S)


def _report(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "benchmarks/report.py", "--print", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_benchmarks_page_holds_the_tables_of_the_committed_results() -> None:
    stale = "benchmarks/README.md differs from results/*.json: run python benchmarks/report.py"
    assert _report() == BENCHMARKS_PAGE.read_text(), stale


def test_the_benchmarks_tables_are_rebuilt_from_the_results_alone(tmp_path: Path) -> None:
    page = BENCHMARKS_PAGE.read_text()
    blank = RESULTS_BLOCK.sub(r"\1\2", page)
    assert blank.count("<!-- results/") >= 2 and "| workload |" not in blank
    copy = tmp_path / "README.md"
    copy.write_text(blank)
    assert _report(str(copy)) == page


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [link for link in LINK.findall(text) if not link.startswith(("http", "#"))]


def test_every_relative_link_in_the_docs_leads_to_a_file() -> None:
    broken = [
        f"{page.relative_to(REPO)}: {link}"
        for page in PAGES
        for link in _links(page)
        if not (page.parent / link.split("#")[0]).exists()
    ]
    assert broken == []


def test_every_page_of_the_docs_is_linked_from_the_readme() -> None:
    linked = {(REPO / link.split("#")[0]).resolve() for link in _links(README)}
    assert [p.relative_to(REPO) for p in PAGES[1:] if p.resolve() not in linked] == []


def test_the_readme_keeps_the_two_commands_that_ci_runs() -> None:
    lines = README.read_text().splitlines()
    for marker in ("<!-- demo-command -->", "<!-- test-command -->"):
        at = lines.index(marker)
        assert lines[at + 1] == "```bash"
        # The tests' command installs the contest compilers and Docker first (where it can).
        setup = (
            "python3 -m venv .venv && ",
            "sh scripts/install-toolchains && sh scripts/docker-setup && python3 -m venv",
        )
        assert lines[at + 2].startswith(setup)
        assert lines[at + 3] == "```"


def test_the_plugin_page_describes_every_field_of_a_registry_entry() -> None:
    text = PLUGINS_PAGE.read_text()
    table = text[text.index("| field |") :].split("\n\n")[0]
    first_cells = [row.split("|")[1] for row in table.splitlines()[2:]]
    described = sorted(name for cell in first_cells for name in re.findall(r"`(\w+)`", cell))
    assert described == sorted(f.name for f in dataclasses.fields(BackendEntry))


def test_the_contest_page_lists_every_language_with_its_names_and_install() -> None:
    rows = {
        line.split("|")[1].strip(" `"): line
        for line in CONTEST_PAGE.read_text().splitlines()
        if line.startswith("| `")
    }
    for language in languages():
        row = rows[language.name]
        assert all(f"`{name}`" in row for name in language.names), (language.name, row)
        assert f"`{language.install or language.toolchain}`" in row, language.name
