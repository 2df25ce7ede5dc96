"""`gateway.commands.templates`: `/name args` expanded from `<name>.md`."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.commands.templates import (
    TemplateError,
    expand_template,
    load_template,
    scan_templates,
    split_arguments,
)


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("a b  c", ["a", "b", "c"]),
        ('one "two three" four', ["one", "two three", "four"]),
        ("it's 'quoted text'", ["its quoted", "text"]),
        ('empty "" arg', ["empty", "", "arg"]),
        ("", []),
        ("\ttabbed\targs\n", ["tabbed", "args"]),
    ],
)
def test_arguments_split_at_spaces_and_quotes_keep_them(text: str, args: list[str]) -> None:
    assert split_arguments(text) == args


def test_positional_all_and_sliced_placeholders() -> None:
    body = "1=$1 2=$2 9=$9 all=$@ ARGS=$ARGUMENTS from2=${@:2} one-from2=${@:2:1} none=${@:7}"
    assert expand_template(body, ["a", "b c", "d"]) == (
        "1=a 2=b c 9= all=a b c d ARGS=a b c d from2=b c d one-from2=b c none="
    )


def test_an_argument_that_looks_like_a_placeholder_stays_as_it_is() -> None:
    assert expand_template("[$1] [$2]", ["$2", "$@"]) == "[$2] [$@]"


def test_a_template_file_with_and_without_a_description(tmp_path: Path) -> None:
    (tmp_path / "review.md").write_text("---\ndescription: Review a file\n---\nReview $1 carefully.\n")
    (tmp_path / "plain.md").write_text("\n" + "Explain " + "very " * 30 + "slowly.\n")
    review = load_template(tmp_path / "review.md")
    assert (review.name, review.description, review.body) == (
        "review",
        "Review a file",
        "Review $1 carefully.",
    )
    assert review.expand('"src/a b.py"') == "Review src/a b.py carefully."
    plain = load_template(tmp_path / "plain.md")
    assert plain.description.startswith("Explain very") and plain.description.endswith("…")
    assert len(plain.description) == 80


def test_scanning_keeps_the_first_of_a_name_and_reports_unusable_files(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "fix.md").write_text("first fix")
    (second / "fix.md").write_text("second fix")
    (second / "empty.md").write_text("---\ndescription: nothing\n---\n")
    (second / "notes.txt").write_text("not a template")
    (second / ".hidden.md").write_text("hidden")

    templates, problems = scan_templates([first, tmp_path / "missing", second])

    assert [(t.name, t.body) for t in templates] == [("fix", "first fix")]
    assert len(problems) == 1 and "empty" in problems[0]
    with pytest.raises(TemplateError, match="is empty"):
        load_template(second / "empty.md")
