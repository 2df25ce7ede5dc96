"""gateway: the daemon (`gatewayd`), its WebSocket protocol, fan-out hub, tool pipeline, auth,
config, the admin CLI (`gatewayctl`) and the dashboard."""

__version__ = "0.1.0"
