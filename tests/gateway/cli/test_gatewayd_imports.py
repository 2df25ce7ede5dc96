"""What `gatewayd`'s start-up path imports: uvicorn's server without its command line, the method
table and its params models only with the first method call, the approval policy only with the
first run of an agent whose policy asks, exec mediation and its bash grammar only with the first
run's tools. And what `gatewayctl` imports to start: a client of the protocol, it loads neither
the session model (SQLAlchemy with it) nor the engine. Each probe runs in a fresh interpreter
(this one has imported everything already)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]

LATER = (
    "click",  # uvicorn's command line
    "uvicorn.main",
    "uvicorn.supervisors",
    "multiprocessing",
    "gateway.methods.table",  # the handlers: with the first method call
    "gateway.methods.sessions_methods",
    "gateway.protocol.params",  # the methods' params models: with the first method call
    "gateway.protocol.cron_params",
    "gateway.protocol.approval_params",
    "gateway.approvals.layer",  # the approval policy: with the first run of an agent that asks
    "gateway.approvals.policy",
    "gateway.sandbox.exec_mediation",  # exec mediation and its bash grammar: with the first run
    "gateway.sandbox.layer",
    "tree_sitter",
)


def _probe(code: str) -> Any:
    env = {key: value for key, value in os.environ.items() if key != "GATEWAY_CONFIG"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(done.stdout.splitlines()[-1])


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def test_the_start_up_path_leaves_the_cli_the_method_table_and_the_policy_for_later() -> None:
    state = _probe(
        """
        import json, sys
        from gateway.cli import gatewayd
        import gateway.app, gateway.connection, gateway.state, gateway.tools.factory
        from gateway.protocol.handshake import validate_connect
        print(json.dumps(sorted(sys.modules)))
        """
    )
    assert [name for name in state if _within(name, LATER)] == []


CTL_NEVER = ("sessions", "sqlalchemy", "agent_core.agent", "agent_core.loop", "agent_core.messages")


def test_gatewayctl_starts_without_the_session_model_or_the_engine() -> None:
    state = _probe(
        """
        import json, sys
        from gateway.cli import gatewayctl
        from gateway.protocol.methods import OPERATOR_SCOPES
        print(json.dumps(sorted(sys.modules)))
        """
    )
    assert [name for name in state if _within(name, CTL_NEVER)] == []


def test_uvicorn_without_its_command_line_is_uvicorn_with_every_name_on_first_use() -> None:
    state = _probe(
        """
        import json, sys
        from gateway.cli import gatewayd
        import uvicorn
        from uvicorn.config import Config
        from uvicorn.server import Server
        before = {
            "config": uvicorn.Config is Config and gatewayd.uvicorn is uvicorn,
            "server": issubclass(gatewayd.GatewayServer, Server) and uvicorn.Server is Server,
            "version": uvicorn.__version__,
            "click": "click" in sys.modules,
        }
        run = uvicorn.run  # not set up front: the package's own __init__ runs now
        try:
            uvicorn.no_such_name
            missing = None
        except AttributeError as exc:
            missing = str(exc)
        source = open(uvicorn.__file__).read()
        print(json.dumps({
            **before,
            "run": run is sys.modules["uvicorn.main"].run and callable(uvicorn.main),
            "click_after": "click" in sys.modules,
            "same_classes": uvicorn.Config is Config and uvicorn.Server is Server,
            "version_in_init": f'__version__ = "{uvicorn.__version__}"' in source,
            "missing": missing,
        }))
        """
    )
    assert state == {
        "config": True,
        "server": True,
        "version": state["version"],
        "click": False,
        "run": True,
        "click_after": True,
        "same_classes": True,
        "version_in_init": True,
        "missing": "module 'uvicorn' has no attribute 'no_such_name'",
    }


def test_the_first_method_call_imports_its_handler_and_params_model() -> None:
    state = _probe(
        """
        import json, sys
        import gateway.connection
        from gateway.methods import HANDLERS
        from gateway.protocol.methods import METHODS, validate_params
        loaded = lambda: sorted(m for m in ("gateway.methods.table", "gateway.protocol.params",
                                            "gateway.protocol.cron_params") if m in sys.modules)
        before = loaded()
        route = HANDLERS.get("cron.add")
        checked = validate_params("cron.add", {})
        print(json.dumps({
            "before": before,
            "after": loaded(),
            "route": route.params is METHODS["cron.add"].params,
            "model": type(checked).__name__,
            "unknown": HANDLERS.get("no.such.method"),
            "count": len(HANDLERS) == len(METHODS),
        }))
        """
    )
    assert state == {
        "before": [],
        "after": ["gateway.methods.table", "gateway.protocol.cron_params", "gateway.protocol.params"],
        "route": True,
        "model": "InvalidParams",
        "unknown": None,
        "count": True,
    }


def test_the_approval_policy_is_imported_with_its_first_name() -> None:
    state = _probe(
        """
        import json, sys
        import gateway.approvals as approvals
        before = "gateway.approvals.policy" in sys.modules
        from gateway.approvals import ApprovalGate, policy_for
        try:
            approvals.no_such_name
            missing = None
        except AttributeError as exc:
            missing = str(exc)
        print(json.dumps({
            "before": before,
            "after": "gateway.approvals.policy" in sys.modules,
            "same": policy_for.__module__ == "gateway.approvals.policy"
            and ApprovalGate.__module__ == "gateway.approvals.layer",
            "missing": missing,
        }))
        """
    )
    assert state == {
        "before": False,
        "after": True,
        "same": True,
        "missing": "module 'gateway.approvals' has no attribute 'no_such_name'",
    }
