"""Discord: the Gateway WebSocket (or the signed Interactions endpoint) in, REST out."""

from bindings.discord.binding import DiscordBinding
from bindings.discord.gateway import (
    CloseRequest,
    ConnectPlan,
    DiscordGatewayProtocol,
    Dispatch,
    GatewayEvent,
    GatewayTimings,
    Op,
    Ready,
    Resumed,
)
from bindings.discord.interactions import InteractionsEndpoint, load_public_key, verify_interaction
from bindings.discord.rest import DiscordRest, GatewayBot
from bindings.discord.shell import GatewayShell
from bindings.discord.transport import DiscordTransport

__all__ = [
    "CloseRequest",
    "ConnectPlan",
    "DiscordBinding",
    "DiscordGatewayProtocol",
    "DiscordRest",
    "DiscordTransport",
    "Dispatch",
    "GatewayBot",
    "GatewayEvent",
    "GatewayShell",
    "GatewayTimings",
    "InteractionsEndpoint",
    "Op",
    "Ready",
    "Resumed",
    "load_public_key",
    "verify_interaction",
]
