"""`gatewayctl`: the admin CLI of the agent gateway.

    gatewayctl [--url URL] [--token TOKEN] [--json] COMMAND ...

It speaks the gateway's WebSocket protocol like every other client (see docs/gatewayctl.md for
every command, option, environment variable and exit code). Exit codes: 0 ok, 1 the call failed,
2 bad usage, 3 cannot reach the gateway, 4 credentials refused.
"""

from __future__ import annotations

import asyncio
import os
import sys

from gateway.cli.ctl_context import Ctl
from gateway.cli.ctl_errors import CtlError, ExitCode
from gateway.cli.ctl_output import Output
from gateway.cli.ctl_parser import build_parser, join_secret_values, option_strings


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    given = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(join_secret_values(given, option_strings(parser)))
    out = Output(json_mode=getattr(args, "json", False), color=not getattr(args, "no_color", False))
    ctl = Ctl(
        out,
        url=getattr(args, "url", None),
        token=getattr(args, "token", None),
        password=getattr(args, "password", None),
        timeout=getattr(args, "timeout", 30.0),
    )
    try:
        return int(asyncio.run(args.handler(ctl, args)))
    except CtlError as exc:
        out.error(exc)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        out.stop_waiting()
        if ctl.interrupt_hint:
            out.note(f"interrupted; {ctl.interrupt_hint}")
        return int(ctl.interrupt_exit)
    except BrokenPipeError:
        # The reader went away (`gatewayctl ... | head`): stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(ExitCode.FAILED)
    except Exception as exc:  # a bug: still one line, never a traceback
        out.error(
            CtlError(
                f"internal error: {type(exc).__name__}: {exc}",
                hint="please report it with the command you ran",
            )
        )
        return int(ExitCode.FAILED)


if __name__ == "__main__":
    sys.exit(main())
