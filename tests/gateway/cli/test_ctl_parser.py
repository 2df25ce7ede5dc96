"""The command line of `gatewayctl`: a secret that starts with `-`."""

from __future__ import annotations

import argparse

import pytest

from gateway.cli.ctl_parser import build_parser, join_secret_values, option_strings


def parse(*argv: str) -> argparse.Namespace:
    parser = build_parser()
    return parser.parse_args(join_secret_values(list(argv), option_strings(parser)))


@pytest.mark.parametrize(
    "argv",
    [
        ("--token=-abc", "health"),
        ("--token", "-abc", "health"),
        ("health", "--token", "-abc"),
        ("health", "--token", "--abc"),
    ],
)
def test_a_token_that_starts_with_a_dash(argv: tuple[str, ...]) -> None:
    assert parse(*argv).token.lstrip("-") == "abc"


def test_a_password_that_starts_with_a_dash() -> None:
    assert parse("--password", "-pw", "health").password == "-pw"


def test_a_missing_token_is_still_an_error_that_says_how_to_give_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse("health", "--token", "--json")  # the token was forgotten: --json is our own option
    assert exit_info.value.code == 2
    assert "give a value that starts with - as --token=VALUE" in capsys.readouterr().err


def test_arguments_after_a_double_dash_are_left_alone() -> None:
    args = ["sessions", "send", "k", "--", "--token", "-x"]
    assert join_secret_values(args, {"--token"}) == args
