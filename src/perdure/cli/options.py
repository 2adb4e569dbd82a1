"""Options every command shares: ``--json``, and the global options given after a subcommand.

``--json`` is accepted by every command that prints, before the subcommand
(``perdure --json runs list``) or after it (``perdure runs list --json``); with
it the command prints one JSON document on stdout and nothing else, on stdout
or stderr. The global options (``--database-url``, ``--schema``,
``--direct-url``, ``--read-url``, ``--json``) may follow the subcommand:
``hoist`` moves them in front of it before click parses the line, unless
the command has an option of that name of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

#: The group's options that take a value, accepted after the subcommand too.
GLOBAL_VALUES = ("--database-url", "--schema", "--direct-url", "--read-url", "--as")
#: The group's flags accepted after the subcommand too.
GLOBAL_FLAGS = ("--json",)


def json_option(help: str = "Print JSON, and nothing else.") -> Callable[[F], F]:
    """``--json`` as ``as_json``: true with the command's own flag or the global ``--json``."""

    def either(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        root = ctx.find_root().obj
        return bool(value or getattr(root, "json", False))

    return click.option("--json", "as_json", is_flag=True, callback=either, help=help)


def emit(as_json: bool, document: Any, line: str) -> None:
    """Print ``document`` as JSON with ``as_json``, else the human ``line``."""
    from perdure.cli import render

    if as_json:
        render.echo_json(document)
    else:
        click.echo(line)


def hoist(group: click.Group, ctx: click.Context, args: list[str]) -> list[str]:
    """``args`` with the global options found after the subcommand moved in front of it.

    The command path (``runs list``) is followed through the groups; an option
    that the command (or a group on its path) defines itself stays where it
    is, as does everything after ``--``.
    """
    start = 0
    while start < len(args) and args[start].startswith("-"):
        given = args[start]
        start += 2 if given in GLOBAL_VALUES else 1
    if start >= len(args):
        return args
    end = start
    command: click.Command = group
    own: set[str] = set()
    while end < len(args) and isinstance(command, click.Group):
        found = command.get_command(ctx, args[end])
        if found is None:
            break
        command = found
        own |= {
            name for param in found.get_params(ctx) for name in (*param.opts, *param.secondary_opts)
        }
        end += 1
    moved: list[str] = []
    rest: list[str] = []
    index = end
    while index < len(args):
        given = args[index]
        if given == "--":
            rest += args[index:]
            break
        name = given.split("=", 1)[0]
        if name in GLOBAL_VALUES and name not in own:
            if "=" in given:
                moved.append(given)
                index += 1
                continue
            if index + 1 < len(args):
                moved += args[index : index + 2]
                index += 2
                continue
        elif given in GLOBAL_FLAGS and given not in own:
            moved.append(given)
            index += 1
            continue
        rest.append(given)
        index += 1
    return [*args[:start], *moved, *args[start:end], *rest]
