"""README.md documents every command's options as the binary has them: each option `fulcrum CMD --help` lists is
named in that command's section, and each option an option table gives is one the command takes. (A flag that was
renamed or removed, or added without a word, fails here instead of misleading a reader.)"""

import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, fulcrum_cli

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")

# Each command's part of the README: from the first marker to the next.
SECTIONS = {
    "stats": ("`fulcrum stats", "`fulcrum batch"),
    "batch": ("`fulcrum batch", "`fulcrum model --model"),
    "model": ("`fulcrum model --model", "### Simulating an iteration"),
    "simulate": ("### Simulating an iteration", "### Planning a run"),
    "plan": ("### Planning a run", "### Reports"),
    "report": ("### Reports", "### Multi-task"),
    "multitask": ("### Multi-task", "### Schedule file"),
}


def section(command: str) -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first, end = SECTIONS[command]
    start = readme.index(first)
    return readme[start:readme.index(end, start + 1)]


def help_options(command: str) -> set[str]:
    cli = fulcrum_cli()
    assert Path(cli).exists(), f"{cli}: build the CLI first"
    done = subprocess.run([cli, command, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(FLAG.findall(done.stdout)) - {"--help"}


@pytest.mark.parametrize("command", sorted(SECTIONS))
def test_every_option_of_a_command_is_documented_in_its_section(command):
    options = help_options(command)
    assert options, f"fulcrum {command} --help lists no options"
    text = section(command)
    assert sorted(options - set(FLAG.findall(text))) == []


@pytest.mark.parametrize("command", sorted(SECTIONS))
def test_every_option_in_a_commands_table_is_one_it_takes(command):
    rows = [line.split("|")[1] for line in section(command).splitlines() if line.startswith("| `--")]
    assert sorted(set(FLAG.findall(" ".join(rows))) - help_options(command)) == []
