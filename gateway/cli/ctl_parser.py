"""The command line of `gatewayctl`: every command, its options and its `--help`.

Connection and output options (`--url`, `--token`, `--password`, `--json`, `--timeout`,
`--no-color`) are accepted before or after the command (`gatewayctl --json status` and
`gatewayctl status --json` are the same). Each leaf command sets `handler`, an
`async (ctl, args) -> exit code`.
"""

from __future__ import annotations

import argparse
from typing import Any

from gateway import __version__
from gateway.cli import ctl_approvals as approvals
from gateway.cli import ctl_cluster as cluster
from gateway.cli import ctl_cron as cron
from gateway.cli import ctl_extensions as extensions
from gateway.cli import ctl_models as models
from gateway.cli import ctl_sessions as sessions
from gateway.cli import ctl_system as system
from gateway.cli import ctl_tokens as tokens
from gateway.cli.ctl_builder import EXIT_CODES, SECRET_OPTIONS, Builder, CtlParser, count_between

ENVIRONMENT = """\
environment:
  GATEWAY_URL        the gateway to talk to (like --url)
  GATEWAY_TOKEN      its token (like --token); GATEWAY_PASSWORD for password auth
  GATEWAY_HOME       state directory of the local gateway (default ~/.gateway): its token file
  GATEWAY_CONFIG     config file of the local gateway ([gateway] host, port, token)
  GATEWAY_HOST       address of the local gateway (default 127.0.0.1)
  GATEWAY_PORT       port of the local gateway (default 18789)
  NO_COLOR           no colours, even on a terminal
"""

KEY_HELP = "session key, e.g. agent:main:main"
SESSION_KINDS = ("main", "direct", "group", "channel", "branch", "subagent", "custom")
SESSION_STATUSES = ("idle", "running", "interrupted", "archived")
QUEUE_MODES = ("steer", "followup", "collect", "interrupt")


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of `parser` and its subcommands."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action.choices, dict):
            for sub in action.choices.values():
                if isinstance(sub, argparse.ArgumentParser):
                    found |= option_strings(sub)
    return found


def join_secret_values(argv: list[str], options: set[str]) -> list[str]:
    """`--token -abc` as `--token=-abc`: argparse reads a separate value that starts with `-` as
    an option and refuses it. A value that is one of our own options (`--token --json`: the
    token was forgotten) is left alone for argparse to report."""
    out: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            out += argv[index:]
            break
        following = argv[index + 1] if index + 1 < len(argv) else None
        if (
            arg in SECRET_OPTIONS
            and following is not None
            and following.startswith("-")
            and following != "--"
            and following.split("=", 1)[0] not in options
        ):
            out.append(f"{arg}={following}")
            index += 2
            continue
        out.append(arg)
        index += 1
    return out


def build_parser() -> CtlParser:
    builder = Builder()
    parser = CtlParser(
        prog="gatewayctl",
        description="Administer an agent gateway over its WebSocket protocol. Without --url it talks "
        "to the local gatewayd and finds its token by itself.",
        epilog=EXIT_CODES + "\n" + ENVIRONMENT + "\nRun `gatewayctl COMMAND --help` for a command's options.",
        parents=[builder.common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gatewayctl {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    builder.leaf(
        commands,
        "status",
        "version, uptime, connections, sessions, runs, queues, channels, database",
        system.status,
    )
    builder.leaf(
        commands, "health", "whether the gateway is healthy (exit 1 when it says it is not)", system.health
    )
    _sessions(builder, commands)
    channels = builder.group(commands, "channels", "chat channels (Discord, Slack)")
    builder.leaf(
        channels,
        "status",
        "each channel's state and the time since its last inbound event",
        system.channels_status,
    )
    group = builder.group(commands, "cluster", "the gateway nodes sharing one database")
    builder.leaf(
        group,
        "status",
        "each node: state, heartbeat age, sessions, chat accounts and runs it holds",
        cluster.cluster_status,
        epilog="A single gateway answers with itself alone. --json prints the `cluster.status` answer.",
    )
    _models(builder, commands)
    _config(builder, commands)
    _pairing(builder, commands)
    _tokens(builder, commands)
    _approvals(builder, commands)
    _mcp(builder, commands)
    _extensions(builder, commands)
    _cron(builder, commands)
    call = builder.leaf(
        commands,
        "call",
        "call any method and print its answer as JSON",
        system.call,
        epilog="examples:\n  gatewayctl call health\n"
        '  gatewayctl call sessions.describe --params \'{"key": "agent:main:main"}\'\n'
        '  gatewayctl call agent --expect-final --params \'{"message": "hi", "idempotencyKey": "k1"}\'',
    )
    call.add_argument("method", metavar="METHOD", help="method name, e.g. sessions.list")
    call.add_argument("--params", metavar="JSON", help="params as a JSON object (- reads stdin)")
    call.add_argument(
        "--expect-final",
        action="store_true",
        help="wait for the final answer of a method that answers twice (agent)",
    )
    return parser


def _sessions(builder: Builder, commands: Any) -> None:
    group = builder.group(commands, "sessions", "list, inspect, drive and change sessions")
    listing = builder.leaf(
        group, "list", "list sessions, most recently updated first", sessions.sessions_list
    )
    listing.add_argument("--agent", metavar="ID", help="only this agent's sessions")
    listing.add_argument("--kind", choices=SESSION_KINDS, help="only sessions of this kind")
    listing.add_argument("--status", choices=SESSION_STATUSES, help="only sessions in this state")
    listing.add_argument("--search", metavar="TEXT", help="part of a key, label, session id or agent id")
    listing.add_argument("--all", action="store_true", help="include archived sessions")
    listing.add_argument(
        "--limit", type=count_between(1, 1000), default=50, metavar="N", help="page size (default 50)"
    )
    listing.add_argument(
        "--offset", type=count_between(0, 10_000_000), default=0, metavar="N", help="skip N sessions"
    )

    tree = builder.leaf(
        group, "tree", "the tree of branches and sub-agents that holds a session", sessions.sessions_tree
    )
    tree.add_argument("key", metavar="KEY", help=KEY_HELP)

    show = builder.leaf(
        group,
        "show",
        "a session's transcript: messages, tool calls and results, usage",
        sessions.sessions_show,
    )
    show.add_argument("key", metavar="KEY", help=KEY_HELP)
    show.add_argument(
        "--limit", type=count_between(1, 1000), default=200, metavar="N", help="last N messages (default 200)"
    )
    show.add_argument("--full", action="store_true", help="do not shorten long tool results")

    new = builder.leaf(group, "new", "create a session", sessions.sessions_new)
    new.add_argument(
        "key", metavar="KEY", nargs="?", help="its key (default: a new agent:<agent>:session:<id>)"
    )
    new.add_argument("--agent", metavar="ID", help="the agent (default: the default agent)")
    new.add_argument("--label", help="a label to show")
    new.add_argument("--model", metavar="PROVIDER/MODEL", help="a model other than the agent's")

    send = builder.leaf(
        group,
        "send",
        "send a message and stream the reply until the run ends",
        sessions.sessions_send,
        epilog="The reply's text goes to stdout as it streams; tool calls and the outcome go to stderr.\n"
        "A new KEY creates the session. Exit 1 when the run ends in error or is aborted.",
    )
    send.add_argument("key", metavar="KEY", help=KEY_HELP)
    send.add_argument("message", metavar="MESSAGE", help="the message (- reads stdin)")
    send.add_argument("--no-wait", action="store_true", help="print the run id and return at once")
    send.add_argument("--queue-mode", choices=QUEUE_MODES, help="what to do when a run is in flight")

    tail = builder.leaf(
        group,
        "tail",
        "follow a session's events; reconnects and resumes without losing or repeating any",
        sessions.sessions_tail,
        epilog='Ctrl-C stops (exit 0). With --json every event is one line of JSON: {"event", "payload"}.',
    )
    tail.add_argument("key", metavar="KEY", help=KEY_HELP)
    tail.add_argument(
        "--from",
        dest="from_seq",
        type=count_between(0, 2**62),
        metavar="SEQ",
        help="first replay the events after sequence number SEQ (0: all); default: new events only",
    )
    tail.add_argument(
        "--until-idle", action="store_true", help="exit when a run ends (the session goes idle)"
    )

    for name, help_text, handler in (
        ("abort", "abort the run in flight", sessions.sessions_abort),
        ("reset", "point KEY at a new, empty session (the old one is archived)", sessions.sessions_reset),
        ("compact", "summarise the older history to free context", sessions.sessions_compact),
    ):
        builder.leaf(group, name, help_text, handler).add_argument("key", metavar="KEY", help=KEY_HELP)

    branch = builder.leaf(
        group, "branch", "start a branch: a child session that forks the history", sessions.sessions_branch
    )
    branch.add_argument("key", metavar="KEY", help=KEY_HELP)
    branch.add_argument(
        "--at", metavar="ENTRY", help="fork after this entry id (see `sessions show`); default: the last"
    )
    branch.add_argument(
        "--key", dest="new_key", metavar="NEWKEY", help="the branch's key (default: KEY:branch:<id>)"
    )
    branch.add_argument("--label", help="a label for the branch")

    switch = builder.leaf(
        group, "switch", "point KEY at another session (a branch, an older session)", sessions.sessions_switch
    )
    switch.add_argument("key", metavar="KEY", help=KEY_HELP)
    switch.add_argument("session_id", metavar="SESSION_ID", help="the session KEY should name from now on")

    rm = builder.leaf(group, "rm", "delete a session", sessions.sessions_rm)
    rm.add_argument("key", metavar="KEY", help=KEY_HELP)
    rm.add_argument("--cascade", action="store_true", help="also delete its branches and sub-agents")


def _config(builder: Builder, commands: Any) -> None:
    group = builder.group(commands, "config", "the gateway's configuration")
    show = builder.leaf(group, "show", "the configuration in effect (secrets masked)", system.config_show)
    show.add_argument("key", metavar="KEY", nargs="?", help="only this dotted key, e.g. gateway.port")
    builder.leaf(group, "reload", "re-read the config file without a restart", system.config_reload)


def _pairing(builder: Builder, commands: Any) -> None:
    group = builder.group(commands, "pairing", "direct-message senders waiting for approval")
    builder.leaf(group, "list", "pending pairing requests", system.pairing_list)
    approve = builder.leaf(
        group, "approve", "let the sender with this code talk to the agent", system.pairing_approve
    )
    approve.add_argument(
        "channel",
        metavar="CHANNEL",
        nargs="?",
        choices=["discord", "slack"],
        help="the channel the sender wrote from (optional; the code must belong to it)",
    )
    approve.add_argument("code", metavar="CODE", help="the code the sender was given")


def _models(builder: Builder, commands: Any) -> None:
    group = builder.group(commands, "models", "the models the gateway knows")
    listing = builder.leaf(
        group,
        "list",
        "every model: prices, context window, and whether its provider has keys",
        models.models_list,
    )
    listing.add_argument("--provider", metavar="NAME", help="only this provider's models")
    usage = builder.leaf(
        commands,
        "usage",
        "tokens and cost of finished runs per agent and day",
        models.usage,
        epilog="example:\n  gatewayctl usage --days 7 --agent main",
    )
    usage.add_argument(
        "--days", type=int, default=30, metavar="N", help="the last N days, today included (1-366)"
    )
    usage.add_argument("--agent", metavar="ID", help="only this agent")


def _tokens(builder: Builder, commands: Any) -> None:
    group = builder.group(commands, "tokens", "named tokens with fewer rights than the root token")
    create = builder.leaf(
        group,
        "create",
        "create a token; prints its secret once",
        tokens.tokens_create,
        epilog="example:\n  gatewayctl tokens create dashboard-ro --scopes operator.read",
    )
    create.add_argument("name", metavar="NAME", help="its name: letters, digits, '.', '_', '-'")
    create.add_argument(
        "--scopes",
        required=True,
        metavar="SCOPES",
        help="what it grants, comma-separated: operator.read, operator.write, operator.admin, ...",
    )
    builder.leaf(group, "list", "the named tokens, their scopes and open connections", tokens.tokens_list)
    revoke = builder.leaf(
        group, "revoke", "delete a token and close every connection using it", tokens.tokens_revoke
    )
    revoke.add_argument("name", metavar="NAME", help="the token's name")


def _approvals(builder: Builder, commands: Any) -> None:
    group = builder.group(commands, "approvals", "tool calls waiting for a person's decision")
    listing = builder.leaf(group, "list", "the calls waiting for a decision", approvals.approvals_list)
    listing.add_argument("--all", action="store_true", help="every request, with who decided it and when")
    listing.add_argument("--session", dest="key", metavar="KEY", help="only this session's requests")
    listing.add_argument(
        "--limit", type=count_between(1, 500), default=100, help="at most this many (default 100)"
    )
    approve = builder.leaf(group, "approve", "let the call run", approvals.approvals_approve)
    approve.add_argument("id", metavar="ID", help="the request's id (from `approvals list`)")
    approve.add_argument(
        "--session", action="store_true", help="also allow calls of this shape for the rest of the session"
    )
    deny = builder.leaf(group, "deny", "refuse the call; the model is told why", approvals.approvals_deny)
    deny.add_argument("id", metavar="ID", help="the request's id (from `approvals list`)")
    deny.add_argument("--reason", metavar="TEXT", help="why (the model reads it)")


def _mcp(builder: Builder, commands: Any) -> None:
    group = builder.group(commands, "mcp", "MCP servers whose tools the agents use")
    builder.leaf(
        group, "list", "every configured server of every agent: state, tools, last error", extensions.mcp_list
    )
    restart = builder.leaf(
        group,
        "restart",
        "stop a server and start it again (a failed one retries at once)",
        extensions.mcp_restart,
        epilog="Exit 1 when the server is not ready afterwards (the table says why).",
    )
    restart.add_argument("name", metavar="NAME", help="the server's name (its [[mcp_servers]] name)")
    restart.add_argument("--agent", metavar="ID", help="only this agent's instance (default: every agent's)")


def _extensions(builder: Builder, commands: Any) -> None:
    group = builder.group(commands, "extensions", "Python extensions and whether they may run")
    builder.leaf(
        group,
        "list",
        "every extension found, its trust state (pending, enabled, disabled) and what it adds",
        extensions.extensions_list,
    )
    enable = builder.leaf(
        group,
        "enable",
        "let an extension run: it is imported and loaded at once",
        extensions.extensions_enable,
        epilog="The change is stored with who made it. Exit 1 when the extension failed to load.",
    )
    enable.add_argument("name", metavar="NAME", help="the extension's name (see `extensions list`)")
    disable = builder.leaf(
        group,
        "disable",
        "withdraw an extension's tools, hooks, commands and providers at once",
        extensions.extensions_disable,
    )
    disable.add_argument("name", metavar="NAME", help="the extension's name")


CRON_EXAMPLES = """examples:
  gatewayctl cron add morning-summary --cron "0 8 * * 1-5" --tz Europe/Berlin \\
      --message "Summarise yesterday's activity" --announce discord:123456789
  gatewayctl cron add heartbeat --every 30m --session main --message "Anything to report?"
  gatewayctl cron add reminder --at 2026-12-24T17:00:00+01:00 --message "Send the card" --delete-after-run"""


def _cron_schedule_options(parser: argparse.ArgumentParser) -> None:
    when = parser.add_argument_group("schedule (one of)")
    when.add_argument(
        "--cron", metavar="EXPR", help='a cron expression, e.g. "0 8 * * 1-5" (5 fields, or 6 with seconds)'
    )
    when.add_argument(
        "--tz", metavar="ZONE", help="the IANA time zone of --cron, e.g. Europe/Berlin (default UTC)"
    )
    when.add_argument("--every", metavar="DURATION", help="an interval: 90s, 5m, 1h, 2d")
    when.add_argument(
        "--at", metavar="WHEN", help="once, at an ISO 8601 time, e.g. 2026-12-24T17:00:00+01:00"
    )


def _cron_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--message", metavar="TEXT", help="what the job tells the agent (- reads stdin)")
    parser.add_argument(
        "--session",
        metavar="TARGET",
        help="where it goes: isolated (a new session each run, the default), main, or a session key",
    )
    parser.add_argument(
        "--catch-up",
        choices=("none", "latest", "all"),
        help="slots missed while the gateway was down: none, latest (the default) or all",
    )
    parser.add_argument(
        "--announce", metavar="PLATFORM:CHANNEL", help="also post the reply there, e.g. discord:123456789"
    )
    parser.add_argument(
        "--account", metavar="ID", help="the binding account of --announce (when there are several)"
    )
    parser.add_argument("--thread", metavar="ID", help="post into this thread (Slack thread_ts)")


def _cron(builder: Builder, commands: Any) -> None:
    group = builder.group(commands, "cron", "scheduled jobs: an agent gets a message on a schedule")
    listing = builder.leaf(
        group, "list", "every job with its next and last run and their outcome", cron.cron_list
    )
    listing.add_argument("--agent", metavar="ID", help="only this agent's jobs")
    listing.add_argument(
        "--limit", type=count_between(1, 200), default=200, metavar="N", help="at most N jobs (default 200)"
    )
    get = builder.leaf(group, "get", "one job in full", cron.cron_get)
    get.add_argument("id", metavar="ID", help="the job's id (see `cron list`)")
    builder.leaf(group, "status", "whether the scheduler runs, how many jobs, the next run", cron.cron_status)

    add = builder.leaf(group, "add", "add a job", cron.cron_add, epilog=CRON_EXAMPLES)
    add.add_argument("name", metavar="NAME", nargs="?", help="its name")
    _cron_schedule_options(add)
    _cron_run_options(add)
    add.add_argument("--agent", metavar="ID", help="the agent (default: the default agent)")
    add.add_argument("--description", metavar="TEXT", help="a note for people reading the list")
    add.add_argument("--disabled", action="store_true", help="add it switched off")
    add.add_argument("--delete-after-run", action="store_true", help="remove the job once a run succeeded")
    add.add_argument(
        "--params", metavar="JSON", help="the cron.add params as JSON (- reads stdin); options win"
    )

    update = builder.leaf(group, "update", "change a job; enable or disable it", cron.cron_update)
    update.add_argument("id", metavar="ID", help="the job's id")
    update.add_argument("--name", help="a new name")
    _cron_schedule_options(update)
    _cron_run_options(update)
    switch = update.add_mutually_exclusive_group()
    switch.add_argument(
        "--enable", action="store_true", help="switch it on (slots it slept through do not run)"
    )
    switch.add_argument("--disable", action="store_true", help="switch it off")
    update.add_argument("--no-announce", action="store_true", help="stop posting the reply anywhere")
    update.add_argument(
        "--patch", metavar="JSON", help="the cron.update patch as JSON (- reads stdin); options win"
    )

    remove = builder.leaf(group, "remove", "remove a job and its run history", cron.cron_remove)
    remove.add_argument("id", metavar="ID", help="the job's id")
    run = builder.leaf(group, "run", "run a job now (its schedule is not changed)", cron.cron_run)
    run.add_argument("id", metavar="ID", help="the job's id")
    run.add_argument("--due", action="store_true", help="only run it if a slot is due")
    runs = builder.leaf(
        group, "runs", "finished runs, newest first: outcome, delivery, reply", cron.cron_runs
    )
    runs.add_argument("id", metavar="ID", nargs="?", help="only this job's runs")
    runs.add_argument("--status", choices=("ok", "error"), help="only runs with this outcome")
    runs.add_argument(
        "--limit", type=count_between(1, 200), default=20, metavar="N", help="at most N runs (default 20)"
    )
