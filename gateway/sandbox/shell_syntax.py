"""A static reading of a shell command line for exec mediation, over the tree-sitter-bash grammar.

`read_script(text)` parses the line with tree-sitter-bash and walks the syntax tree in the order
the shell would run it, keeping the little shell state a static reader can know: variables given
literal values, the directory a ``cd`` moved to, the functions defined. It returns every simple
command it finds (inside pipelines, lists, loops, conditionals, subshells, function bodies and
command substitutions alike), each with its words after quote removal and its context: where its
standard input comes from, the pipeline stages before it, whether it runs in a loop, in the
background, inside a function or inside a substitution.

It also reports what a static reader cannot see through: functions, loops that start background
jobs, and parts of the line the grammar could not parse. The reader never runs anything and never
raises; the rules in `exec_mediation` and `exec_rules` judge what it found.

What it returns (`Script`, `Command`, ...) is defined in `shell_script`; decoding single words
lives in `shell_words`; parsing the line with the grammar, within a time budget, in
`shell_grammar`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from msgspec.structs import replace

from gateway.sandbox.shell_grammar import (
    first_error,
    has_expansion,
    node_text,
    parse,
    reading,
    snippet,
)
from gateway.sandbox.shell_script import Command, Function, Redirect, Script, Stdin
from gateway.sandbox.shell_state import ShellContext, ShellState, moved_to
from gateway.sandbox.shell_words import (
    EMPTY,
    Word,
    concat,
    decode_ansi_c,
    unescape_bare,
    unescape_double_quoted,
)

if TYPE_CHECKING:
    from tree_sitter import Node

_RESERVED_WORDS = frozenset(
    {"!", "{", "}", "[[", "]]", "if", "then", "elif", "else", "fi", "case", "esac", "for", "select",
     "while", "until", "do", "done", "in", "function"}
)  # fmt: skip
"""Bash's reserved words that are never a command's name (``time`` and ``coproc``, which the
grammar reads as commands, are handled as wrappers)."""

MAX_NODES = 200_000
"""A tree with more nodes is read only this far (the caller treats the rest as unreadable)."""
MAX_NESTING = 100
"""Statements nested deeper than this are not read (the caller treats them as unreadable)."""
_LOOPS = frozenset({"while_statement", "until_statement", "for_statement", "c_style_for_statement",
                    "select_statement"})  # fmt: skip
_DEFAULTING = (":-", "-", ":=", "=")
_ECHOES = frozenset({"echo", "printf"})


class _Reader:
    """Walks one tree; `script` collects what it finds."""

    def __init__(self) -> None:
        self.script = Script()
        self.state = ShellState()
        self._nodes = 0
        self._depth = 0
        self.repaired: set[int] = set()
        """Error nodes read as valid syntax the grammar lacks (``<>``)."""
        self._statements: dict[str, Callable[[Node, ShellContext], None]] = {
            "command": self._command,
            "redirected_statement": self._redirected,
            "pipeline": self._pipeline,
            "subshell": self._subshell,
            "function_definition": self._function,
            "variable_assignment": self._assignment,
            "variable_assignments": self._container,
            "declaration_command": self._declaration,
            "unset_command": self._unset,
            "command_substitution": self._substitution,
            "process_substitution": self._substitution,
            "heredoc_body": self._ignore,
            "comment": self._ignore,
        }

    # --- statements ---------------------------------------------------------------------------

    def statement(self, node: Node, ctx: ShellContext) -> None:
        self._nodes += 1
        if self._nodes > MAX_NODES or self._depth > MAX_NESTING:
            self._unreadable("(too long or too deeply nested to read)")
            return
        if node.is_error or node.is_missing:
            self.script.errors.append(snippet(node) or node.type)
        self._depth += 1
        try:
            if node.type in _LOOPS:
                self._loop(node, ctx)
            else:
                self._statements.get(node.type, self._container)(node, ctx)
        finally:
            self._depth -= 1

    def _unreadable(self, why: str) -> None:
        if why not in self.script.errors:
            self.script.errors.append(why)

    def _ignore(self, node: Node, ctx: ShellContext) -> None:
        return

    def _container(self, node: Node, ctx: ShellContext) -> None:
        """Any other node: its children in order; a child followed by ``&`` runs in the background."""
        children = node.children
        for index, child in enumerate(children):
            if not child.is_named:
                if child.is_missing:
                    self.script.errors.append(f"missing {child.type}")
                continue
            follows = children[index + 1].type if index + 1 < len(children) else ""
            child_ctx = replace(ctx, background=True) if follows in ("&", "|&&") else ctx
            self.statement(child, child_ctx)

    def _loop(self, node: Node, ctx: ShellContext) -> None:
        before = len(self.script.commands)
        self._container(node, replace(ctx, in_loop=True))
        if any(command.background for command in self.script.commands[before:]):
            self.script.spawning_loops.append(snippet(node))

    def _subshell(self, node: Node, ctx: ShellContext) -> None:
        saved = self.state
        self.state = saved.copy()
        try:
            self._container(node, ctx)
        finally:
            self.state = saved

    def _function(self, node: Node, ctx: ShellContext) -> None:
        name_node = node.child_by_field_name("name")
        function = Function(self.word(name_node, ctx).text if name_node is not None else "")
        self.script.functions.append(function)
        body = node.child_by_field_name("body")
        if body is not None:
            saved = self.state
            self.state = saved.copy()
            try:
                self.statement(body, replace(ctx, function=function))
            finally:
                self.state = saved

    def _pipeline(self, node: Node, ctx: ShellContext) -> None:
        upstream: list[Command] = list(ctx.upstream)
        first = True
        for child in node.named_children:
            before = len(self.script.commands)
            stage = replace(
                ctx,
                stdin=ctx.stdin if first else "pipe",
                upstream=tuple(upstream),
                in_pipeline=True,
            )
            saved = self.state
            self.state = saved.copy()  # every stage runs in a subshell
            try:
                self.statement(child, stage)
            finally:
                self.state = saved
            upstream.extend(self.script.commands[before:])
            first = False

    def _redirected(self, node: Node, ctx: ShellContext) -> None:
        """A statement with redirections. A here-document's node also carries what follows its
        start line (``cat <<EOF | sh``: the pipeline; ``cat <<EOF && rm x``: the list)."""
        body = node.child_by_field_name("body")
        redirects: list[Redirect] = []
        later: list[Node] = []
        for child in node.children_by_field_name("redirect"):
            redirect, rest = self._redirect(child, ctx)
            redirects.append(redirect)
            later.extend(rest)
        stdin: Stdin = ctx.stdin
        for redirect in redirects:
            if redirect.operator in ("<<", "<<-"):
                stdin = "heredoc"
            elif redirect.operator == "<<<":
                stdin = "herestring"
            elif redirect.operator == "<":
                stdin = "file"
        before = len(self.script.commands)
        if body is not None:
            self.statement(body, replace(ctx, stdin=stdin))
        produced = self.script.commands[before:]
        for command in produced:
            command.redirects.extend(redirects)
            if command.stdin == "inherited" or command is produced[0]:
                command.stdin = stdin if stdin != "inherited" else command.stdin
        for follow in later:
            piped = follow.prev_sibling is not None and follow.prev_sibling.type == "|"
            if follow.type == "pipeline" or piped:
                stage = replace(ctx, stdin="pipe", upstream=(*ctx.upstream, *produced), in_pipeline=True)
                if follow.type == "pipeline":
                    self._pipeline(follow, stage)
                else:
                    self.statement(follow, stage)
            else:
                self.statement(follow, ctx)

    def _redirect(self, node: Node, ctx: ShellContext) -> tuple[Redirect, list[Node]]:
        operator = ""
        target: Word | None = None
        body: str | None = None
        rest: list[Node] = []
        for child in node.children:
            if not child.is_named:
                if child.type in ("<<<", "<<", "<<-") or not operator:
                    operator = operator or child.type
                continue
            kind = child.type
            if kind == "ERROR" and operator == "<" and node_text(child) == ">" and target is None:
                operator = "<>"  # read-write redirection, which the grammar does not know
                self.repaired.add(child.id)
                continue
            if kind == "file_descriptor":
                continue
            if kind == "heredoc_start":
                continue
            if kind == "heredoc_body":
                body = self._heredoc_body(child, ctx)
            elif kind == "heredoc_end":
                continue
            elif node.type == "heredoc_redirect" and kind not in ("word", "string", "raw_string"):
                rest.append(child)
            elif target is None:
                target = self.word(child, ctx)
                if node.type == "herestring_redirect":
                    body = target.text
        if node.type == "heredoc_redirect" and operator not in ("<<", "<<-"):
            operator = "<<"
        return Redirect(operator, target, body), rest

    def _heredoc_body(self, node: Node, ctx: ShellContext) -> str:
        for child in node.named_children:
            if child.type in ("command_substitution", "expansion", "simple_expansion"):
                self.word(child, ctx)  # substitutions in an unquoted here-document run
        return node_text(node)

    def _assignment(self, node: Node, ctx: ShellContext) -> None:
        name, value = self._assigned(node, ctx)
        if name:
            self.state.variables[name] = value

    def _assigned(self, node: Node, ctx: ShellContext) -> tuple[str, Word]:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        name = node_text(name_node) if name_node is not None else ""
        value = self.word(value_node, ctx) if value_node is not None else EMPTY
        if value.dynamic and not value.substituted:
            value = Word(f"${{{name}}}", dynamic=True)
        return name, value

    def _declaration(self, node: Node, ctx: ShellContext) -> None:
        for child in node.named_children:
            if child.type == "variable_assignment":
                self._assignment(child, ctx)
            elif child.type not in ("variable_name", "word"):
                self.word(child, ctx)

    def _unset(self, node: Node, ctx: ShellContext) -> None:
        for child in node.named_children:
            self.state.variables.pop(node_text(child), None)

    def _substitution(self, node: Node, ctx: ShellContext) -> None:
        self.word(node, ctx)

    def _command(self, node: Node, ctx: ShellContext) -> None:
        assignments: list[tuple[str, Word]] = []
        words: list[Word] = []
        redirects: list[Redirect] = []
        later: list[Node] = []
        indirect = False
        first = len(self.script.commands)
        for child in node.named_children:
            kind = child.type
            if kind == "variable_assignment":
                assignments.append(self._assigned(child, ctx))
            elif kind == "command_name":
                words.extend(self._split(child.named_children[0], ctx) if child.named_children else [])
                indirect = indirect or has_expansion(child)
            elif kind in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                redirect, rest = self._redirect(child, ctx)
                redirects.append(redirect)
                later.extend(rest)
            elif kind == "subshell":
                self._subshell(child, ctx)
            else:
                words.extend(self._split(child, ctx))
        if not words:
            for name, value in assignments:
                self.state.variables[name] = value
            return
        if words[0].text in _RESERVED_WORDS:
            # Bash never runs a reserved word as a command: the grammar misread a compound
            # command (``! { ...; }`` reads as a command named ``{``), so this tree is not what
            # bash would run.
            self._unreadable(f"(the reserved word {words[0].text!r} as a command name)")
        stdin = ctx.stdin
        for redirect in redirects:
            stdin = {"<<<": "herestring", "<<": "heredoc", "<<-": "heredoc", "<": "file"}.get(
                redirect.operator, stdin
            )  # type: ignore[assignment]
        command = Command(
            words=words,
            assignments=assignments,
            redirects=redirects,
            cwd=self.state.cwd,
            stdin=stdin,
            upstream=list(ctx.upstream),
            in_loop=ctx.in_loop,
            background=ctx.background,
            in_function=ctx.function is not None,
            in_substitution=ctx.in_substitution,
            indirect_name=indirect,
            substitutions=self.script.commands[first:],
        )
        self.script.commands.append(command)
        self._after_command(command, ctx)
        for follow in later:
            self.statement(follow, ctx)

    def _after_command(self, command: Command, ctx: ShellContext) -> None:
        function = ctx.function
        if function is not None and command.words[0].text == function.name:
            function.calls_itself = True
            if ctx.background or ctx.in_pipeline:
                function.spawns_itself = True
        if command.name in ("cd", "pushd") and not command.words[0].dynamic:
            operands = [word for word in command.words[1:] if not word.text.startswith("-")]
            self.state.cwd = moved_to(self.state.cwd, operands[0] if operands else Word("~"))

    # --- words --------------------------------------------------------------------------------

    def _split(self, node: Node, ctx: ShellContext) -> list[Word]:
        """The words one argument node becomes: an unquoted expansion splits at whitespace."""
        word = self.word(node, ctx)
        if node.type in ("simple_expansion", "expansion", "command_substitution") and any(
            char in word.text.strip() for char in " \t\n"
        ):
            return [replace(word, text=part) for part in word.text.split()]
        return [word]

    def word(self, node: Node, ctx: ShellContext) -> Word:
        """The value of a word-like node; substitutions inside it are read as commands."""
        kind = node.type
        text = node_text(node)
        if kind == "raw_string":
            return Word(text[1:-1] if text.endswith("'") and len(text) >= 2 else text[1:])
        if kind == "ansi_c_string":
            return Word(decode_ansi_c(text[2:-1] if text.endswith("'") else text[2:]))
        if kind in ("string", "translated_string"):
            return self._string(node, ctx)
        if kind == "concatenation":
            return concat([self.word(child, ctx) for child in node.children])
        if kind == "simple_expansion":
            return self._variable(node_text(node)[1:], None, ctx)
        if kind == "expansion":
            return self._expansion(node, ctx)
        if kind == "command_substitution":
            return self._command_substitution(node, ctx)
        if kind == "process_substitution":
            self._nested(node, ctx)
            return Word("/dev/fd/63", process=True)
        if kind == "arithmetic_expansion":
            self._words_inside(node, ctx)
            return Word(text, dynamic=True)
        if kind in ("word", "number", "extglob_pattern", "special_variable_name", "variable_name"):
            return Word(unescape_bare(text))
        self._words_inside(node, ctx)
        return Word(unescape_bare(text), dynamic="$" in text)

    def _words_inside(self, node: Node, ctx: ShellContext) -> None:
        if self._depth > MAX_NESTING:
            self._unreadable("(too long or too deeply nested to read)")
            return
        self._depth += 1
        try:
            self._each_word_inside(node, ctx)
        finally:
            self._depth -= 1

    def _each_word_inside(self, node: Node, ctx: ShellContext) -> None:
        for child in node.named_children:
            if child.type in ("command_substitution", "process_substitution", "expansion",
                              "simple_expansion", "arithmetic_expansion"):  # fmt: skip
                self.word(child, ctx)
            else:
                self._words_inside(child, ctx)

    def _string(self, node: Node, ctx: ShellContext) -> Word:
        parts: list[Word] = []
        for child in node.children:
            if child.type in ('"', '$"'):
                continue
            if child.type == "string_content" or not child.is_named:
                parts.append(Word(unescape_double_quoted(node_text(child))))
            else:
                parts.append(self.word(child, ctx))
        return concat(parts)

    def _variable(self, name: str, default: Word | None, ctx: ShellContext) -> Word:
        known = self.state.variables.get(name)
        if known is not None:
            return known
        if default is not None:
            return replace(default, dynamic=True)
        return Word(f"${{{name}}}" if name.isidentifier() else f"${name}", dynamic=True)

    def _expansion(self, node: Node, ctx: ShellContext) -> Word:
        name = ""
        operator = ""
        default: Word | None = None
        plain = True
        for child in node.children:
            if child.type in ("variable_name", "special_variable_name") and not name:
                name = node_text(child)
            elif not child.is_named and child.type not in ("${", "}"):
                operator = operator or child.type
                plain = False
            elif child.is_named and child.type not in ("variable_name", "special_variable_name"):
                value = self.word(child, ctx)
                plain = False
                if operator in _DEFAULTING and default is None:
                    default = value
        if plain and name:
            return self._variable(name, None, ctx)
        if name and operator in _DEFAULTING:
            known = self.state.variables.get(name)
            return known if known is not None and known.text else replace(default or EMPTY, dynamic=True)
        return Word(node_text(node), dynamic=True)

    def _command_substitution(self, node: Node, ctx: ShellContext) -> Word:
        text = node_text(node)
        if text.startswith("`") and ("\\`" in text or "\\$" in text):
            # Inside backquotes bash drops the backslash before ` and $ and reads the result
            # again, so `\`rm -rf /\`` and `\$(...)` nest commands the grammar reads as words.
            self._unreadable("(escaped ` or $ inside a backquoted substitution)")
        commands = self._nested(node, ctx)
        if len(commands) == 1 and commands[0].name in _ECHOES and not commands[0].upstream:
            args = [word for word in commands[0].words[1:] if not word.text.startswith(("-", "%"))]
            if args and len(args) == len(commands[0].words) - 1:
                value = concat([Word(" ".join(word.text for word in args))])
                return Word(value.text, dynamic=any(w.dynamic for w in args), substituted=True)
        return Word("$(...)", dynamic=True, substituted=True)

    def _nested(self, node: Node, ctx: ShellContext) -> list[Command]:
        """Read the statements of a substitution (a subshell of their own)."""
        before = len(self.script.commands)
        saved = self.state
        self.state = saved.copy()
        inner = replace(ctx, stdin="inherited", upstream=(), background=False, in_substitution=True,
                        in_pipeline=False)  # fmt: skip
        try:
            self._container(node, inner)
        finally:
            self.state = saved
        return self.script.commands[before:]


def read_script(text: str) -> Script:
    """Read a command line (see the module docstring). Never raises. A line the grammar needs
    more than `PARSE_BUDGET_S` to parse (pathological error recovery) is reported unreadable."""
    data = text.encode("utf-8", errors="surrogateescape")
    root = parse(data)
    if root is None:
        return Script(errors=["(too slow to parse)"])
    reader = _Reader()
    with reading(data):
        reader.statement(root, ShellContext())
        if root.has_error and not reader.script.errors:
            error = first_error(root, reader.repaired)
            if error is not None:
                reader.script.errors.append(error)
    return reader.script
