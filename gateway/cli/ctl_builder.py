"""The pieces `gatewayctl`'s command table is built from (`gateway.cli.ctl_parser`): the parser
class whose usage errors are one line, the connection and output options every command takes,
the builder of command groups and leaf commands, and argument types."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from gateway.cli.ctl_errors import ExitCode

EXIT_CODES = """\
exit codes:
  0  ok
  1  the call failed (the gateway answered with an error, or the run ended in error or aborted)
  2  bad usage (unknown command or option, invalid --params JSON, invalid config file)
  3  cannot reach the gateway (nothing listening, handshake failed, connection lost)
  4  the gateway refused the credentials (or the token lacks the scope the method needs)
"""

SECRET_OPTIONS = ("--token", "--password")
"""Options whose value may well start with `-` (a generated token can)."""


class CtlParser(argparse.ArgumentParser):
    """Usage errors in one line that says where to look, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        hint = f"see `{self.prog} --help`"
        for option in SECRET_OPTIONS:
            if f"argument {option}:" in message:
                hint = f"give a value that starts with - as {option}=VALUE"
        self.exit(int(ExitCode.USAGE), f"{self.prog}: error: {message} ({hint})\n")


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value


def count_between(low: int, high: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}")
        return value

    return parse


def common_options() -> argparse.ArgumentParser:
    # SUPPRESS: an option given before the command is not reset by the subcommand's default.
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection and output")
    group.add_argument(
        "--url", default=argparse.SUPPRESS, help="gateway URL, e.g. ws://host:18789/ (default: the local one)"
    )
    group.add_argument("--token", default=argparse.SUPPRESS, help="auth token (default: found locally)")
    group.add_argument("--password", default=argparse.SUPPRESS, help="auth password, for password auth")
    group.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print one JSON document (JSON lines for `sessions tail`), no colour",
    )
    group.add_argument(
        "--timeout",
        type=positive,
        default=argparse.SUPPRESS,
        metavar="SECONDS",
        help="wait at most this long to connect and for each answer (default 30)",
    )
    group.add_argument("--no-color", action="store_true", default=argparse.SUPPRESS, help="no colours")
    return common


class Builder:
    def __init__(self) -> None:
        self.common = common_options()

    def group(self, parent: Any, name: str, help_text: str) -> Any:
        parser = parent.add_parser(name, help=help_text, description=help_text, parents=[self.common])
        return parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND", required=True)

    def leaf(self, parent: Any, name: str, help_text: str, handler: Any, epilog: str = "") -> CtlParser:
        parser: CtlParser = parent.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=(epilog + "\n\n" if epilog else "") + EXIT_CODES,
            parents=[self.common],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.set_defaults(handler=handler)
        return parser
