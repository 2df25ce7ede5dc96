"""`gateway.commands.front_matter`: the `---` block of skill and template files."""

from __future__ import annotations

from gateway.commands.front_matter import split_front_matter


def test_plain_quoted_and_block_values_and_the_body() -> None:
    matter = split_front_matter(
        "---\n"
        "name: deploy\n"
        "description: 'Ship it: build, test, release'\n"
        'label: "say \\"hi\\""\n'
        "notes: |\n"
        "  first line\n"
        "  second line\n"
        "summary: >\n"
        "  folded\n"
        "  into one\n"
        "metadata:\n"
        "  owner: ops\n"
        "disable-model-invocation: true  # only by name\n"
        "---\n"
        "\n"
        "# Body\n"
        "text\n"
    )
    assert matter.get("name") == "deploy"
    assert matter.get("description") == "Ship it: build, test, release"
    assert matter.get("label") == 'say "hi"'
    assert matter.get("notes") == "first line\nsecond line"
    assert matter.get("summary") == "folded into one"
    assert matter.get("owner") is None  # nested tables are skipped
    assert matter.flag("disable-model-invocation") is True
    assert matter.flag("name") is False
    assert matter.body == "# Body\ntext"


def test_without_a_closing_line_the_whole_text_is_the_body() -> None:
    text = "---\nname: x\nno end here\n"
    matter = split_front_matter(text)
    assert matter.fields == {}
    assert matter.body == text.strip("\n")


def test_a_file_without_front_matter() -> None:
    matter = split_front_matter("\ufeffJust a prompt about $1.\n")
    assert matter.fields == {} and matter.body == "Just a prompt about $1."
