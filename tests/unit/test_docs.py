"""The documentation stays true to the code (issue 41.1):
- docs/cli.md is what cli/reference.py generates from every command's ``--help`` (a command or
  option added, renamed or removed without the page following fails here);
- every ``portside …`` command written in README.md and docs/ names a command that exists and
  only options that command takes;
- every page the README points to exists, every docs/ page is reachable from it, and the README
  stays short (a newcomer reads it in five minutes)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from portside.cli.main import main
from portside.cli.reference import render

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = sorted((REPO / "docs").glob("*.md"))
README_MAX_LINES = 260


def test_cli_reference_is_generated_from_the_commands() -> None:
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert page == render(), (
        "docs/cli.md is out of date: `python -m portside.cli.reference > docs/cli.md`")


def test_the_reference_shows_help_as_the_commands_take_it() -> None:
    """Every command takes `-h` as well as `--help` (the group's context settings). click keeps
    the help option a command made first, so a page rendered without those settings read
    `--help` alone when rendered first and `-h, --help` after the CLI had run in the process
    (the unit tier), and the page test failed or passed by test order."""
    from click.testing import CliRunner

    page = render()
    assert page.count("-h, --help") == page.count("## `portside"), page
    CliRunner().invoke(main, ["export", "--help"])
    assert render() == page


def test_every_command_has_its_section() -> None:
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    ctx = click.Context(main, info_name="portside")
    for name in main.list_commands(ctx):
        assert f"## `portside {name}`" in page, name


def test_readme_is_short_and_has_the_newcomers_sections() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    for heading in ("## Install", "## The demo", "## Verify your own port", "## Commands",
                    "## Limits", "## Read more"):
        assert heading in text, heading


def test_pages_named_in_the_readme_exist_and_every_page_is_named() -> None:
    text = README.read_text(encoding="utf-8")
    named = set(re.findall(r"\b((?:docs/)?[A-Za-z_-]+\.md)\b", text))
    for name in named:
        if name.startswith("docs/") or name == "ARCHITECTURE.md":
            assert (REPO / name).is_file(), f"README.md names {name}, which does not exist"
    for page in PAGES:
        assert f"docs/{page.name}" in named, f"docs/{page.name} is not reachable from README.md"


def _commands(path: Path) -> Iterator[tuple[int, str]]:
    """(line, command) for each `portside …` written in a fenced block, or in an inline code
    span of a table or a sentence; continuation lines (a trailing backslash) joined."""
    lines = path.read_text(encoding="utf-8").splitlines()
    fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            fence = not fence
        elif fence or line.startswith("    "):
            start = i
            cmd = line.strip()
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            cmd = cmd.removeprefix("$ ")
            if cmd.startswith("portside ") and not any(c in cmd for c in "→│╭"):  # a screen
                yield start + 1, cmd.split("  #")[0].split(" # ")[0]
        else:
            for span in re.findall(r"`(portside [^`]+)`", line):
                yield i + 1, span
        i += 1


def _tokens(cmd: str) -> list[str]:
    cmd = re.sub(r"[\[\]|]", " ", cmd)  # usage-style [--opt] | alternatives
    try:
        return shlex.split(cmd)
    except ValueError:
        return cmd.split()


def _options(cmd: click.Command) -> set[str]:
    out = {"--help", "-h"}
    for p in cmd.params:
        out.update(o for o in (*p.opts, *p.secondary_opts))
    return out


def _check(cmd_text: str) -> str | None:
    """What is wrong with this command line, or None."""
    tokens = _tokens(cmd_text)[1:]
    group: click.Command = main
    allowed = _options(main)
    ctx = click.Context(main, info_name="portside")
    chosen: click.Command | None = None
    skip = False
    for tok in tokens:
        if skip:
            skip = False
            continue
        if tok.startswith("-"):
            name = tok.split("=", 1)[0]
            if not name.startswith("--") and len(name) > 2:
                continue  # e.g. a -v… flag cluster
            if name not in allowed | _options(main):
                return f"{name} is not an option of `{ctx.command_path}`"
            opt = next((p for p in (chosen or group).params if name in p.opts), None)
            if opt is None:
                opt = next((p for p in main.params if name in p.opts), None)
            skip = bool(opt is not None and not getattr(opt, "is_flag", False)
                        and "=" not in tok and not opt.count)  # type: ignore[attr-defined]
            continue
        if chosen is None or isinstance(chosen, click.Group):
            base = chosen if isinstance(chosen, click.Group) else main
            sub = base.get_command(ctx, tok)
            if sub is None:
                if chosen is None and tok in ("…", "...") or tok.startswith(("<", "{", "$")):
                    return None
                if chosen is None:
                    return f"`{tok}` is not a portside command"
                return f"`{tok}` is not a subcommand of `{ctx.command_path}`"
            ctx = click.Context(sub, info_name=tok, parent=ctx)
            chosen = sub
            allowed = _options(sub) | _options(main)
            continue
        # a positional argument of the chosen command: nothing to check
    return None


DOCS = [README, *PAGES]


@pytest.mark.parametrize("path", DOCS, ids=[p.relative_to(REPO).as_posix() for p in DOCS])
def test_every_written_command_exists_with_its_options(path: Path) -> None:
    wrong = [f"{path.relative_to(REPO)}:{line}: {why}: {cmd}"
             for line, cmd in _commands(path) if (why := _check(cmd))]
    assert not wrong, "\n".join(wrong)


def test_the_checker_finds_a_wrong_command() -> None:
    """The check above can fail: an unknown command, subcommand and option are each named."""
    assert _check("portside verifi --target cpu") is not None
    assert "--nosuch" in (_check("portside verify --nosuch 1") or "")
    assert _check("portside study nosuch") is not None
    assert _check("portside --db x.db verify --reference 'python t.py' --target cpu") is None
    assert _check("portside study run manifest.toml") is None


def test_every_criteria_key_is_documented() -> None:
    """Every section and key of criteria_default.toml is named in the criteria pages (the
    sandbox's and the TPU VM's keys live beside what they describe)."""
    import tomllib

    defaults = tomllib.loads((REPO / "core" / "log" / "criteria_default.toml").read_text())
    text = "".join((REPO / "docs" / p).read_text(encoding="utf-8")
                   for p in ("criteria.md", "sandbox.md", "tpu.md"))
    missing = [f"[{sec}]" for sec in defaults if f"[{sec}]" not in text]
    missing += [f"{sec}.{key}" for sec, keys in defaults.items() if isinstance(keys, dict)
                for key in keys if key not in text]
    assert not missing, f"undocumented criteria: {missing} (docs/criteria.md)"
