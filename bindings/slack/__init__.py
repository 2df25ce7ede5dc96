"""Slack: Socket Mode (or the signed Events API) in, the Web API out."""

from bindings.slack.binding import SlackBinding
from bindings.slack.events_api import EventsEndpoint, verify_slack_request
from bindings.slack.shell import SocketModeShell
from bindings.slack.socket_mode import Disconnect, Envelope, Hello, SocketEvent, SocketModeProtocol
from bindings.slack.transport import SlackTransport
from bindings.slack.web import AuthInfo, SlackWeb

__all__ = [
    "AuthInfo",
    "Disconnect",
    "Envelope",
    "EventsEndpoint",
    "Hello",
    "SlackBinding",
    "SlackTransport",
    "SlackWeb",
    "SocketEvent",
    "SocketModeProtocol",
    "SocketModeShell",
    "verify_slack_request",
]
