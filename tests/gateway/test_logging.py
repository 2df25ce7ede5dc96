from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from gateway.logging import configure_logging, get_logger, is_secret_key, redact, redact_text, reset_logging


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    yield
    reset_logging()
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_json_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    configure_logging("info", stream=out)
    get_logger("gateway.test").info("connected", conn_id="c1", scopes=["operator.read"])
    [record] = lines(out)
    assert record["event"] == "connected"
    assert record["conn_id"] == "c1"
    assert record["scopes"] == ["operator.read"]
    assert record["level"] == "info"
    assert record["logger"] == "gateway.test"
    assert "timestamp" in record


def test_console_format_on_a_terminal() -> None:
    out = Terminal()
    configure_logging("info", stream=out)
    get_logger("gateway.test").info("hello there", n=1)
    text = out.getvalue()
    assert "hello there" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.splitlines()[0])


def test_explicit_format_wins_over_terminal_detection() -> None:
    out = Terminal()
    configure_logging("info", "json", stream=out)
    get_logger().info("x")
    assert lines(out)[0]["event"] == "x"


def test_level_filtering_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    configure_logging("warning", stream=out)
    log = get_logger("t")
    log.info("quiet")
    log.warning("loud")
    assert [r["event"] for r in lines(out)] == ["loud"]

    monkeypatch.setenv("GATEWAY_LOG_LEVEL", "DEBUG")
    out = io.StringIO()
    configure_logging(stream=out)
    get_logger("t").debug("details")
    assert [r["event"] for r in lines(out)] == ["details"]

    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("chatty", stream=out)


def test_secrets_are_redacted_by_key_anywhere_in_the_event() -> None:
    out = io.StringIO()
    configure_logging("info", stream=out)
    get_logger("t").info(
        "connect",
        token="tok-123456",
        auth={"password": "pw-123456", "nested": [{"apiKey": "k-123456"}]},
        headers={"Authorization": "xyz-123456", "X-Request-Id": "r1"},
        client_secret="cs-123456",
        max_tokens=4096,
        api_key_env="OPENAI_API_KEY",
    )
    raw = out.getvalue()
    for secret in ("tok-123456", "pw-123456", "k-123456", "xyz-123456", "cs-123456"):
        assert secret not in raw
    [record] = lines(out)
    assert record["token"] == "***"
    assert record["auth"]["password"] == "***"
    assert record["auth"]["nested"][0]["apiKey"] == "***"
    assert record["headers"] == {"Authorization": "***", "X-Request-Id": "r1"}
    assert record["max_tokens"] == 4096  # tokens counts are not secrets
    assert record["api_key_env"] == "OPENAI_API_KEY"  # the name of a variable is not the secret


def test_credential_looking_values_are_redacted_whatever_the_key() -> None:
    out = io.StringIO()
    configure_logging("info", stream=out)
    get_logger("t").info(
        "calling provider with Authorization: Bearer abcdefghijklmnop1234",
        detail="key was sk-proj-abcdefghijklmnop1234 and slack xoxb-123456789-abcdef",
        url="https://api.example/v1?api_key=zzzzzzzz&x=1",
    )
    raw = out.getvalue()
    for secret in ("abcdefghijklmnop1234", "xoxb-123456789", "zzzzzzzz"):
        assert secret not in raw
    [record] = lines(out)
    assert "Bearer ***" in record["event"]
    assert record["url"] == "https://api.example/v1?api_key=***&x=1"


def test_standard_library_records_are_routed_and_redacted() -> None:
    out = io.StringIO()
    configure_logging("info", stream=out)
    uvicorn_logger = logging.getLogger("uvicorn.error")
    uvicorn_logger.addHandler(logging.NullHandler())  # uvicorn's own handler would be removed too
    configure_logging("info", stream=out)
    assert uvicorn_logger.handlers == []
    uvicorn_logger.info("Started server; token=%s", "sk-abcdefghijklmnop123")
    logging.getLogger("websockets.server").debug("hidden at info level")
    [record] = lines(out)
    assert record["logger"] == "uvicorn.error"
    assert record["level"] == "info"
    assert "sk-abcdefghijklmnop123" not in out.getvalue()


def test_uvicorn_colour_copies_of_messages_are_not_fields() -> None:
    for out in (io.StringIO(), Terminal()):
        configure_logging("info", stream=out)
        logging.getLogger("uvicorn.error").info(
            "Uvicorn running on %s", "http://x", extra={"color_message": "Uvicorn running on \x1b[1m%s"}
        )
        assert "Uvicorn running on http://x" in out.getvalue()
        assert "color_message" not in out.getvalue()


def test_routine_connection_lines_show_at_debug_only() -> None:
    library = logging.getLogger("uvicorn.error")
    out = io.StringIO()
    configure_logging("info", stream=out)
    library.info('%s - "WebSocket %s" [accepted]', "127.0.0.1:5000", "/")
    library.info("connection open")
    library.info("connection closed")
    library.info("Application startup complete.")
    library.warning("connection open")  # a warning is never demoted
    assert [(r["event"], r["level"]) for r in lines(out)] == [("connection open", "warning")]

    out = io.StringIO()
    configure_logging("debug", stream=out)
    library.info("connection open")
    assert [(r["event"], r["level"]) for r in lines(out)] == [("connection open", "debug")]

    reset_logging()
    assert not [f for f in library.filters if type(f).__name__ == "RoutineAtDebug"]


def test_exceptions_are_formatted_and_redacted() -> None:
    out = io.StringIO()
    configure_logging("info", stream=out)
    try:
        raise RuntimeError("upstream refused Bearer abcdefghijklmnop9999")
    except RuntimeError:
        get_logger("t").exception("request failed")
    [record] = lines(out)
    assert "RuntimeError" in record["exception"]
    assert "abcdefghijklmnop9999" not in out.getvalue()


def test_reconfiguring_does_not_duplicate_output() -> None:
    out = io.StringIO()
    configure_logging("info", stream=out)
    configure_logging("info", stream=out)
    get_logger().info("once")
    assert len(lines(out)) == 1


def test_reset_removes_our_handler() -> None:
    configure_logging("info", stream=io.StringIO())
    reset_logging()
    assert all(h.get_name() != "gateway" for h in logging.getLogger().handlers)
    assert structlog.is_configured() is False


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("token", True),
        ("deviceToken", True),
        ("GATEWAY_TOKEN", True),
        ("password", True),
        ("api_key", True),
        ("apiKey", True),
        ("x-api-key", True),
        ("Authorization", True),
        ("client_secret", True),
        ("private_key", True),
        ("cookie", True),
        ("max_tokens", False),
        ("totalTokens", False),
        ("api_key_env", False),
        ("token_env", False),
        ("key", False),
        ("sessionKey", False),
        ("idempotencyKey", False),
        ("", False),
    ],
)
def test_is_secret_key(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_redact_helpers_leave_ordinary_data_alone() -> None:
    data = {"sessionKey": "agent:main:main", "count": 3, "items": ("a", {"token": None})}
    assert redact(data) == {"sessionKey": "agent:main:main", "count": 3, "items": ("a", {"token": None})}
    assert redact_text("nothing to see") == "nothing to see"
    assert redact({"token": "t-1"}) == {"token": "***"}


_FRESH_PROCESS = textwrap.dedent(
    """
    import io, json, sys
    from gateway.logging import configure_logging, get_logger

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal() if sys.argv[1] == "terminal" else io.StringIO()
    configure_logging("info", sys.argv[2], stream=out)
    loaded = "rich" in sys.modules
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        get_logger("t").exception("failed")
    import rich.text  # still importable by whoever needs it later

    print(json.dumps({"rich_with_structlog": loaded, "log": out.getvalue()}))
    """
)


def _fresh(stream: str, fmt: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, stream, fmt],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_console_extras_load_only_for_the_console_on_a_terminal() -> None:
    for stream, fmt in (("file", "auto"), ("terminal", "json"), ("file", "console")):
        result = _fresh(stream, fmt)
        assert result["rich_with_structlog"] is False, (stream, fmt)
        assert "RuntimeError: boom" in result["log"]
    on_terminal = _fresh("terminal", "auto")
    assert on_terminal["rich_with_structlog"] is True
    assert "boom" in on_terminal["log"]
