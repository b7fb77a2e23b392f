"""``kldtui completion bash|zsh|fish``: a shell completion script, made from the command line itself.

Every command, every flag and every flag's fixed choices come from :func:`kldtui.cli.main.build_parser`,
listed by :func:`kldtui.cli.parser.arguments` and :func:`kldtui.cli.parser.commands`, so the script
never lists a flag that does not exist. Other values (files, folders) fall back to the
shell's file name completion.

    eval "$(kldtui completion bash)"                  # ~/.bashrc
    eval "$(kldtui completion zsh)"                   # ~/.zshrc
    kldtui completion fish > ~/.config/fish/completions/kldtui.fish
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kldtui.cli.parser import Parser

HELP = "print a shell completion script (bash, zsh or fish) for every command and flag"
SHELLS = ("bash", "zsh", "fish")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=SHELLS,
                        help='the shell: bash (eval "$(kldtui completion bash)" in ~/.bashrc), zsh (the '
                        "same in ~/.zshrc) or fish (> ~/.config/fish/completions/kldtui.fish)")


@dataclass
class Options:
    """The flags of one command (or of kldtui itself, ``name`` empty)."""

    name: str
    help: str = ""
    flags: dict[str, str] = field(default_factory=dict)  # flag -> its help
    takes_value: set[str] = field(default_factory=set)
    choices: dict[str, list[str]] = field(default_factory=dict)
    positional_choices: list[str] = field(default_factory=list)


def _options(parser: Parser, name: str, help_text: str = "") -> Options:
    from kldtui.cli.parser import arguments

    out = Options(name, help_text)
    for action in arguments(parser):
        if not action.option_strings:
            if action.choices:
                out.positional_choices = [str(c) for c in action.choices]
            continue
        for flag in action.option_strings:
            out.flags[flag] = " ".join(str(action.help or "").split()).replace("%%", "%")
            if action.nargs != 0:
                out.takes_value.add(flag)
            if action.choices:
                out.choices[flag] = [str(c) for c in action.choices]
    return out


def commands() -> tuple[Options, list[Options]]:
    """kldtui's own flags, then every command's."""
    from kldtui.cli.main import build_parser
    from kldtui.cli.parser import commands as declared_commands

    parser = build_parser()
    top = _options(parser, "")
    subs = [_options(c.parser, c.name, c.help) for c in declared_commands(parser)]
    return top, subs


def bash_script() -> str:
    top, subs = commands()
    q = shlex.quote
    lines = [
        "# kldtui completion for bash (made by `kldtui completion bash`)",
        "_kldtui() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local cmd="" i w',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        w="${COMP_WORDS[i]}"',
        '        case "$w" in',
        f"            {'|'.join(sorted(top.takes_value)) or '--'}) ((i++)) ;;",
        "            -*) ;;",
        '            *) cmd="$w"; break ;;',
        "        esac",
        "    done",
        '    local opts="" choices=""',
        '    case "$cmd" in',
        f'        "") opts={q(" ".join(sorted(top.flags)))} ;;',
    ]
    for c in subs:
        lines.append(f"        {q(c.name)}) opts={q(' '.join(sorted(c.flags)))} ;;")
    lines += ["    esac", '    case "$cmd:$prev" in']
    for c in [top, *subs]:
        for flag, values in sorted(c.choices.items()):
            lines.append(f"        {q(c.name + ':' + flag)}) choices={q(' '.join(values))} ;;")
        for flag in sorted(c.takes_value - set(c.choices)):
            lines.append(f"        {q(c.name + ':' + flag)}) return 0 ;;  # a value: files (-o default)")
    lines += [
        "    esac",
        '    if [[ -n "$choices" ]]; then COMPREPLY=($(compgen -W "$choices" -- "$cur")); return 0; fi',
        '    if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "$opts" -- "$cur")); return 0; fi',
        '    if [[ -z "$cmd" ]]; then',
        f'        COMPREPLY=($(compgen -W {q(" ".join(c.name for c in subs))} -- "$cur")); return 0',
        "    fi",
        '    case "$cmd" in',
    ]
    for c in subs:
        if c.positional_choices:
            lines.append(f'        {q(c.name)}) COMPREPLY=($(compgen -W {q(" ".join(c.positional_choices))} '
                         '-- "$cur")) ;;')
    lines += ["    esac", "    return 0", "}", "complete -o default -F _kldtui kldtui"]
    return "\n".join(lines) + "\n"


def zsh_script() -> str:
    """zsh reads the bash script through its bash completion layer."""
    return ("# kldtui completion for zsh (made by `kldtui completion zsh`)\n"
            "autoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit\n"
            + bash_script())


def fish_script() -> str:
    top, subs = commands()

    def desc(text: str) -> str:
        return shlex.quote(text[:120])

    lines = ["# kldtui completion for fish (made by `kldtui completion fish`)", "complete -c kldtui -f"]
    for c in subs:
        lines.append(f"complete -c kldtui -n '__fish_use_subcommand' -a {shlex.quote(c.name)} "
                     f"-d {desc(c.help)}")
    for c in [top, *subs]:
        cond = "__fish_use_subcommand" if not c.name else f"__fish_seen_subcommand_from {c.name}"
        for flag, text in sorted(c.flags.items()):
            spec = f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}"
            value = ""
            if flag in c.choices:
                value = f" -x -a {shlex.quote(' '.join(c.choices[flag]))}"
            elif flag in c.takes_value:
                value = " -r -F"
            lines.append(f"complete -c kldtui -n {shlex.quote(cond)} {spec}{value} -d {desc(text)}")
        if c.name and c.positional_choices:
            lines.append(f"complete -c kldtui -n {shlex.quote(cond)} -x "
                         f"-a {shlex.quote(' '.join(c.positional_choices))}")
        elif c.name:
            lines.append(f"complete -c kldtui -n {shlex.quote(cond)} -F")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    script = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}[args.shell]()
    print(script, end="")
    return 0
