"""Every sub-command's ``--help`` shows each option's default (walked in-process)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from compactinst_ros import demo
from compactinst_ros.cli import COMMANDS, build_parser, iter_parsers, main, shows_default


def _default_texts(default: object) -> set[str]:
    """The ways a help text may spell ``default``."""
    texts = {str(default)}
    if isinstance(default, float):
        texts.add(f"{default:g}")
    if isinstance(default, Path):
        texts.add(default.as_posix())
    if isinstance(default, (list, tuple)):  # nargs: as typed on the command line
        texts.add(" ".join(map(str, default)))
    return texts


def _missing_defaults(parser: argparse.ArgumentParser) -> list[str]:
    """'prog --option: help' for each option whose help hides or misstates its default."""
    formatter = parser._get_formatter()
    problems = []
    for action in parser._actions:
        if not shows_default(action):
            continue
        text = formatter._expand_help(action) if action.help else ""
        name = "/".join(action.option_strings) or action.dest
        if "default" not in text:
            problems.append(f"{parser.prog} {name}: no default in {text!r}")
        elif action.default is not None and not any(
            t in text for t in _default_texts(action.default)
        ):
            problems.append(f"{parser.prog} {name}: default {action.default!r} not in {text!r}")
    return problems


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_option_shows_its_default(command: str) -> None:
    parser = build_parser(command)
    problems = []
    for p in iter_parsers(parser):
        assert p.format_help()  # every help text formats (no stray '%')
        problems += _missing_defaults(p)
    assert not problems, "\n".join(problems)


def test_the_demo_shows_its_defaults() -> None:
    assert not _missing_defaults(demo.build_parser())


def test_the_check_fails_on_a_hidden_default() -> None:
    parser = argparse.ArgumentParser(prog="t")
    parser.add_argument("--threads", type=int, help="threads")
    parser.add_argument("--rate", type=float, default=0.5, help="rate (default 0.3)")
    parser.add_argument("--quiet", action="store_true", help="no progress")
    parser.add_argument("--out", required=True, help="folder")
    assert len(_missing_defaults(parser)) == 2


def test_info_help_names_gmacs() -> None:
    assert "GMACs" in build_parser().format_help()
    assert "GFLOPs" not in build_parser().format_help()


REPO = Path(__file__).resolve().parents[1]
#: folders the docs' commands write into on purpose: the default model is exported into models/,
#: and the acceptance limits' recorded measurement into docs/acceptance_spread/
TRACKED_OUTPUTS = {"models", "docs"}


def test_the_docs_examples_write_into_ignored_folders() -> None:
    ignored = {line.strip().rstrip("/") for line in (REPO / ".gitignore").read_text().splitlines()}
    pattern = re.compile(r"--(?:out|data|init|checkpoint|log-file) ([a-z_][\w.-]*)/")
    pages = [REPO / "README.md", REPO / "models" / "README.md", *sorted(REPO.glob("docs/*.md"))]
    used = {m.group(1) for page in pages for m in pattern.finditer(page.read_text())}
    assert {"data", "runs", "out"} <= used  # the pattern finds the docs' folders
    assert used - TRACKED_OUTPUTS <= ignored, (
        f"not in .gitignore: {used - TRACKED_OUTPUTS - ignored}"
    )


def test_an_option_without_effect_is_warned(tmp_path: Path, capsys) -> None:
    assert main(["fp16-check", str(tmp_path / "none"), "--eval-limit", "3"]) == 1
    err = capsys.readouterr().err
    assert "fp16-check: warning: --eval-limit has no effect without --eval DATA" in err
    assert "does not exist" in err  # the warning comes first; the bundle error still stops it
