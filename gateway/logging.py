"""Logging: structlog for our code, the standard library (uvicorn, websockets) routed through it,
one output format for both, secrets redacted on the way out.

`configure_logging()` is called once at start (again on reload). Output goes to stderr: JSON lines
when it is not a terminal (services, containers, tests), a readable console format otherwise.
Every record, ours or a library's, passes `redact_secrets` last, so a token that ends up in a log
call by mistake is masked rather than written.

Uvicorn installs its own handlers unless it is started with `log_config=None`; pass that, and
`configure_logging` also strips handlers from the `uvicorn*` loggers so their records propagate
here. Their routine lines (every WebSocket accepted, opened and closed; every start-up and
shutdown step, which `gatewayd` reports in its own words) are logged at debug instead of info,
and the `color_message` uvicorn attaches to some records is dropped: at info a terminal shows
what an operator acts on.

structlog is imported on first use, not with this module: the configuration modules import the
redaction functions here, and structlog pulls in rich and pygments (its console exception
formatter) whenever they are installed. `configure_logging` hides rich from that first import
unless the console format writes to a terminal; `gatewayd` calls `import_structlog_for` before
it loads anything else, since its configuration's modules may import structlog themselves.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TextIO

if TYPE_CHECKING:
    from structlog.typing import EventDict, Processor, WrappedLogger

LogFormat = Literal["auto", "json", "console"]
REDACTED = "***"

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}

# Words that make a key secret wherever it appears in a key name (split on case, `_`, `-`, `.`).
_SECRET_WORDS = frozenset(
    {
        "token",
        "password",
        "passwd",
        "passphrase",
        "secret",
        "authorization",
        "cookie",
        "credential",
        "credentials",
    }
)
_SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key"), ("client", "secret")})
_SECRET_COMPOUNDS = frozenset({"apikey", "privatekey", "accesskey"})
_WORD_SPLIT = re.compile(r"[_\-.\s]+|(?<=[a-z0-9])(?=[A-Z])")

# Values that look like credentials whatever key they sit under.
_VALUE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\b(bearer|bot|basic)(\s+)[A-Za-z0-9._~+/=\-]{8,}"), r"\1\2" + REDACTED),
    (re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{12,}"), "sk-" + REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{8,}"), "xox-" + REDACTED),
    (re.compile(r"\bxapp-[A-Za-z0-9\-]{8,}"), "xapp-" + REDACTED),
    (re.compile(r"\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{16,}"), "gh-" + REDACTED),
    (re.compile(r"(?i)([?&](?:token|access_token|api_key|key|password)=)[^&\s]+"), r"\1" + REDACTED),
)


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a secret: `token`, `apiKey`, `GATEWAY_PASSWORD`,
    `Authorization`, `client_secret`, ... but not `max_tokens` or `api_key_env` (the *name* of an
    environment variable is not the secret)."""
    words = [w.lower() for w in _WORD_SPLIT.split(key) if w]
    if not words or words[-1] == "env":
        return False
    if any(w in _SECRET_WORDS or w in _SECRET_COMPOUNDS for w in words):
        return True
    return any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words))


def redact_text(text: str) -> str:
    """`text` with credential-looking substrings (bearer tokens, `sk-...` keys, ...) masked."""
    for pattern, replacement in _VALUE_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact(value: Any, *, _depth: int = 0) -> Any:
    """A copy of `value` with secret keys' values and credential-looking strings masked.
    Mappings, lists and tuples are walked (to a depth of 20); other objects are left as they are."""
    if _depth > 20:
        return value
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and is_secret_key(key) and item is not None and item != "":
                out[key] = REDACTED
            else:
                out[key] = redact(item, _depth=_depth + 1)
        return out
    if isinstance(value, list | tuple):
        items = [redact(item, _depth=_depth + 1) for item in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def redact_secrets(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: mask secrets anywhere in the event dict (keys and values)."""
    cleaned = redact(dict(event_dict))
    event_dict.clear()
    event_dict.update(cleaned)
    return event_dict


def _level_number(level: str | int | None) -> int:
    if isinstance(level, int):
        return level
    name = (level or os.environ.get("GATEWAY_LOG_LEVEL") or "info").strip().lower()
    try:
        return _LEVELS[name]
    except KeyError:
        raise ValueError(
            f"unknown log level {level!r}: use debug, info, warning, error or critical"
        ) from None


_HANDLER_NAME = "gateway"

_ROUTINE_LIBRARY_LINES = frozenset(
    {
        '%s - "WebSocket %s" [accepted]',
        "connection open",
        "connection closed",
        "Started server process [%d]",
        "Finished server process [%d]",
        "Waiting for application startup.",
        "Application startup complete.",
        "Waiting for application shutdown.",
        "Application shutdown complete.",
        "Shutting down",
        "Waiting for connections to close. (CTRL+C to force quit)",
        "Waiting for background tasks to complete. (CTRL+C to force quit)",
    }
)
"""uvicorn's (and the websockets protocol's, which logs through uvicorn's logger) info lines
that say nothing an operator acts on."""
_ROUTINE_LOGGERS = ("uvicorn", "uvicorn.error")


class RoutineAtDebug(logging.Filter):
    """Logs `_ROUTINE_LIBRARY_LINES` at debug: dropped unless the root logger shows debug."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not isinstance(record.msg, str):
            return True
        if record.msg not in _ROUTINE_LIBRARY_LINES:
            return True
        if not logging.getLogger().isEnabledFor(logging.DEBUG):
            return False
        record.levelno = logging.DEBUG
        record.levelname = "DEBUG"
        return True


def drop_color_message(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: uvicorn's `extra={"color_message": ...}` is its own formatter's copy
    of the message with colour codes, not a field of the event."""
    event_dict.pop("color_message", None)
    return event_dict


def configure_logging(
    level: str | int | None = None,
    fmt: LogFormat = "auto",
    *,
    stream: TextIO | None = None,
) -> None:
    """Set up structlog and the standard library's root logger.

    `level` is a name (`debug` ... `critical`) or a number; None reads `GATEWAY_LOG_LEVEL`,
    default `info`. `fmt="auto"` picks JSON lines unless `stream` (default stderr) is a terminal.
    Calling it again replaces the previous setup. Raises ValueError for an unknown level name.
    """
    number = _level_number(level)
    out = stream if stream is not None else sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not _isatty(out))
    _import_structlog(with_rich=not use_json and _isatty(out))
    import structlog

    from gateway.telemetry.trace_ids import add_trace_id  # a run's trace id, while tracing is on

    # JSON lines carry the full UTC timestamp; a terminal shows local wall-clock time.
    stamper = (
        structlog.processors.TimeStamper(fmt="iso", utc=True)
        if use_json
        else structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S", utc=False)
    )
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        add_trace_id,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        stamper,
        structlog.stdlib.ExtraAdder(),
    ]
    renderer: Processor
    if use_json:
        renderer = structlog.processors.JSONRenderer(ensure_ascii=False, default=str)
        tail: list[Processor] = [structlog.processors.format_exc_info]
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=_isatty(out))
        tail = []

    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, drop_color_message, structlog.processors.StackInfoRenderer()],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *tail,
            redact_secrets,
            renderer,
        ],
    )
    handler = logging.StreamHandler(out)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)

    root = logging.getLogger()
    for existing in list(root.handlers):
        if existing.get_name() == _HANDLER_NAME:
            root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(number)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "websockets"):
        library_logger = logging.getLogger(name)
        library_logger.handlers.clear()
        library_logger.propagate = True
        # uvicorn's own dictConfig (run by any earlier server in the process) may have set a
        # level or disabled the logger; ours decides.
        library_logger.setLevel(logging.NOTSET)
        library_logger.disabled = False
    for name in _ROUTINE_LOGGERS:
        _replace_routine_filter(logging.getLogger(name), install=True)
    # Alembic narrates every migration step at INFO; only its warnings are worth a line.
    logging.getLogger("alembic").setLevel(max(number, logging.WARNING))

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.UnicodeDecoder(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def reset_logging() -> None:
    """Undo `configure_logging` (tests call this to leave no global state behind)."""
    root = logging.getLogger()
    for existing in list(root.handlers):
        if existing.get_name() == _HANDLER_NAME:
            root.removeHandler(existing)
    for name in _ROUTINE_LOGGERS:
        _replace_routine_filter(logging.getLogger(name), install=False)
    if "structlog" in sys.modules:  # nothing to undo otherwise
        import structlog

        structlog.reset_defaults()


def _replace_routine_filter(logger: logging.Logger, *, install: bool) -> None:
    for existing in [f for f in logger.filters if isinstance(f, RoutineAtDebug)]:
        logger.removeFilter(existing)
    if install:
        logger.addFilter(RoutineAtDebug())


def get_logger(name: str | None = None, **initial: Any) -> Any:
    """A structlog logger bound to `initial` values."""
    import structlog

    return structlog.get_logger(name, **initial)


def import_structlog_for(stream: TextIO | None = None) -> None:
    """Import structlog now, with its console extras only if `stream` (default stderr) is a
    terminal. For a program whose modules may import structlog before it can call
    `configure_logging` (which makes the same choice, if structlog is not imported yet)."""
    _import_structlog(with_rich=_isatty(stream if stream is not None else sys.stderr))


def _import_structlog(*, with_rich: bool) -> None:
    """Import structlog if nothing has yet, with rich hidden from it unless `with_rich`.

    structlog's first import also imports rich (and pygments) when installed, only to format
    exceptions on a console: 35 ms of the daemon's start-up and 4 MB. A `None` entry in
    `sys.modules` makes its `import rich` fail, so it falls back to plain tracebacks; the entry is
    removed at once, so that a later `import rich` still works. A process that imported structlog
    or rich before keeps what it has.
    """
    if with_rich or "structlog" in sys.modules or "rich" in sys.modules:
        import structlog

        return
    sys.modules["rich"] = None  # type: ignore[assignment]
    try:
        import structlog  # noqa: F401
    finally:
        if sys.modules.get("rich", False) is None:
            del sys.modules["rich"]


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
