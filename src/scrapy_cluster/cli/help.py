"""``scrapy-cluster --help`` lists every subcommand with all of its options on one screen."""

from __future__ import annotations

import click


def _option_summary(param: click.Parameter) -> str:
    if isinstance(param, click.Argument):
        return param.human_readable_name if param.required else f"[{param.human_readable_name}]"
    names = "/".join(param.opts + getattr(param, "secondary_opts", []))
    if isinstance(param, click.Option) and not param.is_flag and param.metavar:
        return f"[{names} {param.metavar}]"
    if isinstance(param, click.Option) and not param.is_flag:
        return f"[{names} {param.type.name.upper()}]"
    return f"[{names}]"


def _usage_lines(prefix: str, command: click.Command, ctx: click.Context) -> list[tuple[str, str]]:
    if isinstance(command, click.Group):
        lines = []
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                lines.extend(_usage_lines(f"{prefix} {name}", sub, ctx))
        return lines
    pieces = [_option_summary(p) for p in command.params
              if not (isinstance(p, click.Option) and p.name == "help")]
    return [(f"{prefix} " + " ".join(pieces), command.get_short_help_str(limit=70))]


class OneScreenGroup(click.Group):
    """A group whose help shows each subcommand's full usage, not just its name."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: list[tuple[str, str]] = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            rows.extend(_usage_lines(name, command, ctx))
        if rows:
            with formatter.section("Commands (every option shown)"):
                for usage, help_text in rows:
                    formatter.write_text(usage)
                    with formatter.indentation():
                        formatter.write_text(help_text)
