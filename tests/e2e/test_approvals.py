"""Approvals against the real daemon: the faux model calls `bash` with a risky command
(`!tool bash {...}`), the call waits, and a decision made over the protocol ends the wait —
approve, deny with a reason, allow for the session, no decision in time, and a daemon that
crashes while a request is pending."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.client import CallError, GatewayClient
from tests.daemon import Daemon, start_daemon
from tests.reliability._support import connected, event_log, tool_message

RISKY = "touch notes.txt && chmod 777 notes.txt && echo changed"
"""Classified medium (world-writable chmod): asks under `risky`, below the deny threshold."""
CONFIG = """
[runs]
idle_timeout_s = 1

[[agents]]
id = "main"
approvals = "risky"
approval_timeout_s = 60

[[agents]]
id = "quick"
approvals = "risky"
approval_timeout_s = 1
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    # A test that fails while a call waits for a decision leaves that run in flight, and the stop
    # would give it the default grace (30 s) before the next module could start.
    config = "[gateway]\nshutdown_grace_s = 1\n" + CONFIG
    started = start_daemon(tmp_path_factory.mktemp("approvals"), config=config)
    try:
        yield started
    finally:
        started.stop()


async def _send(client: GatewayClient, key: str, command: str) -> None:
    params = {"sessionKey": key, "message": tool_message("bash", {"command": command}), "idempotencyKey": key}
    sent = await client.call("chat.send", params)
    assert sent["status"] == "started", sent


async def requested(client: GatewayClient, key: str, timeout: float = 20.0) -> dict[str, Any]:
    """The next `exec.approval.requested` payload for session `key`."""
    deadline = time.monotonic() + timeout
    while True:
        frame = await client.next_event(timeout=max(0.01, deadline - time.monotonic()))
        assert frame is not None, f"no approval request for {key}"
        payload = frame.get("payload") or {}
        if frame.get("event") == "exec.approval.requested" and payload.get("sessionKey") == key:
            return dict(payload)


async def _wait_run(client: GatewayClient, run_id: str) -> dict[str, Any]:
    outcome = await client.call("agent.wait", {"runId": run_id, "timeoutMs": 30_000}, timeout=35)
    return dict(outcome)


async def _tool_finished(daemon: Daemon, key: str) -> list[dict[str, Any]]:
    return [e for e in await event_log(daemon, key) if e["name"] == "tool.finished"]


def _text(finished: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in finished["result"]["content"])


async def test_an_approved_call_runs_after_waiting_longer_than_the_idle_timeout(daemon: Daemon) -> None:
    key = "agent:main:approve"
    async with connected(daemon) as client:
        await _send(client, key, RISKY)
        request = await requested(client, key)
        assert request["status"] == "pending" and request["tool"] == "bash" and request["command"] == RISKY
        assert request["risk"] == "medium"
        assert request["rule"] == "risk medium is at or above ask_threshold medium"
        assert request["presentation"]["commandText"] == RISKY
        assert request["presentation"]["allowedDecisions"] == ["allow-once", "allow-always", "deny"]
        assert request["urlPath"] == f"/ui/#/session/{request['sessionId']}"
        pending = await client.call("exec.approval.list")
        assert [a["id"] for a in pending["approvals"]] == [request["id"]]
        await asyncio.sleep(2.0)  # twice the run's idle timeout: the wait does not count
        early = await client.call("exec.approval.waitDecision", {"id": request["id"], "timeoutMs": 10})
        assert early["approval"]["status"] == "pending"
        waiting = asyncio.ensure_future(
            client.call("exec.approval.waitDecision", {"id": request["id"], "timeoutMs": 20_000}, timeout=25)
        )
        answer = await client.call("exec.approval.resolve", {"id": request["id"], "decision": "allow-once"})
        assert (await waiting)["approval"]["decidedBy"] == "operator"
        assert answer["applied"] is True and answer["approval"]["status"] == "allowed"
        outcome = await _wait_run(client, key)
        assert outcome["status"] == "ok", outcome
        again = await client.call("exec.approval.resolve", {"id": request["id"], "decision": "deny"})
        assert again["applied"] is False and again["approval"]["decision"] == "allow-once"
        history = await client.call("exec.approval.list", {"history": True, "sessionKey": key})
    (finished,) = await _tool_finished(daemon, key)
    assert finished["isError"] is False and _text(finished).strip() == "changed", finished
    (row,) = history["approvals"]
    assert row["decidedBy"] == "operator" and row["surface"] == "gateway-client"
    assert (
        row["resolver"] == {"kind": "device", "id": "operator"} and row["resolvedAtMs"] >= row["createdAtMs"]
    )


async def test_a_denied_call_tells_the_model_who_denied_it_and_why(daemon: Daemon) -> None:
    key = "agent:main:deny"
    async with (
        connected(daemon) as client,
        connected(daemon, scopes=["operator.read", "operator.write"]) as plain,
    ):
        await _send(client, key, RISKY)
        request = await requested(client, key)
        # Only connections with operator.approvals hear of requests.
        while (frame := await plain.next_event(timeout=0.5)) is not None:
            assert not str(frame.get("event")).startswith("exec.approval."), frame
        resolved = asyncio.ensure_future(_resolved_event(client, request["id"]))
        params = {"id": request["id"], "decision": "deny", "reason": "not on this machine"}
        answer = await client.call("exec.approval.resolve", params)
        assert answer["applied"] is True and answer["approval"]["status"] == "denied"
        event = await resolved
        assert event["status"] == "denied" and event["note"] == "not on this machine"
        await _wait_run(client, key)
    (finished,) = await _tool_finished(daemon, key)
    assert finished["isError"] is True
    assert "denied by operator (gateway-client): not on this machine" in _text(finished)


async def _resolved_event(client: GatewayClient, approval_id: str) -> dict[str, Any]:
    while True:
        frame = await client.next_event(timeout=20)
        assert frame is not None, "no exec.approval.resolved event"
        payload = frame.get("payload") or {}
        if frame.get("event") == "exec.approval.resolved" and payload.get("id") == approval_id:
            return dict(payload)


async def test_allow_for_the_session_covers_the_same_command_shape_only(daemon: Daemon) -> None:
    key = "agent:main:session-grant"
    async with connected(daemon) as client:
        await _send(client, key, "chmod 777 a.txt; echo one")
        first = await requested(client, key)
        await client.call("exec.approval.resolve", {"id": first["id"], "decision": "allow-always"})
        assert (await _wait_run(client, key))["status"] == "ok"
        # Same programs and options, another file: runs without asking.
        two = tool_message("bash", {"command": "chmod 777 b.txt; echo two"})
        second = {"sessionKey": key, "message": two, "idempotencyKey": f"{key}-2"}
        await client.call("chat.send", second)
        assert (await _wait_run(client, f"{key}-2"))["status"] == "ok"
        # Another shape (chmod with an option) asks again.
        third = {"sessionKey": key, "message": tool_message("bash", {"command": "chmod -v 777 c.txt"}),
                 "idempotencyKey": f"{key}-3"}  # fmt: skip
        await client.call("chat.send", third)
        asked = await requested(client, key)
        await client.call("exec.approval.resolve", {"id": asked["id"], "decision": "deny"})
        await _wait_run(client, f"{key}-3")
        history = await client.call("exec.approval.list", {"history": True, "sessionKey": key})
    assert [a["command"] for a in history["approvals"]] == ["chmod -v 777 c.txt", "chmod 777 a.txt; echo one"]
    results = await _tool_finished(daemon, key)
    assert [r["isError"] for r in results] == [False, False, True]
    assert "two" in _text(results[1])


async def test_no_decision_in_time_denies_the_call(daemon: Daemon) -> None:
    key = "agent:quick:timeout"
    async with connected(daemon) as client:
        await _send(client, key, RISKY)
        request = await requested(client, key)
        event = await _resolved_event(client, request["id"])
        assert event["status"] == "expired" and event["reason"] == "timeout"
        assert event["resolver"] == {"kind": "system"}
        await _wait_run(client, key)
    (finished,) = await _tool_finished(daemon, key)
    assert finished["isError"] is True and "it needed approval and no one decided within 1 s" in _text(
        finished
    )


async def test_stopping_the_run_cancels_its_request(daemon: Daemon) -> None:
    key = "agent:main:abort"
    async with connected(daemon) as client:
        await _send(client, key, RISKY)
        request = await requested(client, key)
        resolved = asyncio.ensure_future(_resolved_event(client, request["id"]))
        await client.call("chat.abort", {"sessionKey": key})
        event = await resolved
        outcome = await _wait_run(client, key)
    assert event["status"] == "cancelled" and event["reason"] == "run-aborted", event
    assert outcome["status"] != "ok", outcome


async def test_scope_operator_approvals_alone_may_decide_but_not_chat(daemon: Daemon) -> None:
    async with connected(daemon, scopes=["operator.approvals"]) as client:
        assert (await client.call("exec.approval.list"))["approvals"] == []
    async with connected(daemon, scopes=["operator.read", "operator.write"]) as client:
        with pytest.raises(CallError, match=r"missing scope: operator\.approvals"):
            await client.call("exec.approval.list")


async def test_a_request_pending_when_the_daemon_crashes_is_cancelled_with_a_note(tmp_path: Path) -> None:
    home = tmp_path / "crash"
    key = "agent:main:crash"
    first = start_daemon(home, config=CONFIG)
    try:
        async with connected(first) as client:
            await _send(client, key, RISKY)
            request = await requested(client, key)
    finally:
        first.kill()
    second = start_daemon(home, config=CONFIG)
    try:
        async with connected(second) as client:
            assert (await client.call("exec.approval.list"))["approvals"] == []
            got = (await client.call("exec.approval.get", {"id": request["id"]}))["approval"]
            late = await client.call("exec.approval.resolve", {"id": request["id"], "decision": "allow-once"})
            described = await client.call("sessions.describe", {"key": key})
        assert got["status"] == "cancelled" and got["reason"] == "gateway-restart"
        assert "restarted while this request waited" in got["note"]
        assert late["applied"] is False
        assert described["status"] == "interrupted", described
        events = await event_log(second, key)
        completed = [e["message"] for e in events if e["name"] == "message.completed"]
        (result,) = [m for m in completed if m["role"] == "toolResult"]
        assert result["isError"] is True and result["toolName"] == "bash"
        finished = [e for e in events if e["name"] == "agent.finished"]
        assert finished[-1]["terminationReason"] == "interrupted", finished
        assert not (home / "workspaces" / "main" / "notes.txt").exists()
    finally:
        second.stop()


async def test_a_graceful_stop_cancels_the_pending_request(tmp_path: Path) -> None:
    home = tmp_path / "stop"
    key = "agent:main:stop"
    config = "[gateway]\nshutdown_grace_s = 0.5\n" + CONFIG
    first = start_daemon(home, config=config)
    try:
        async with connected(first) as client:
            await _send(client, key, RISKY)
            request = await requested(client, key)
    finally:
        assert first.stop() == 0, first.logs()
    second = start_daemon(home, config=config)
    try:
        async with connected(second) as client:
            got = (await client.call("exec.approval.get", {"id": request["id"]}))["approval"]
    finally:
        second.stop()
    assert got["status"] == "cancelled" and got["reason"] == "gateway-restart", got
    assert got["note"] == "The gateway stopped during the run."


CTL = [sys.executable, "-m", "gateway.cli.gatewayctl"]


def _ctl_env(daemon: Daemon) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(PYTHONUNBUFFERED="1", GATEWAY_URL=daemon.url, GATEWAY_TOKEN=daemon.token)
    return env


async def _ctl(daemon: Daemon, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *CTL, *args, env=_ctl_env(daemon), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert b"Traceback" not in out + err, (out, err)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_gatewayctl_shows_lists_and_decides_requests(daemon: Daemon) -> None:
    key = "agent:main:ctl"
    message = tool_message("bash", {"command": RISKY})
    async with connected(daemon) as client:
        await client.call("chat.send", {"sessionKey": key, "message": "hello", "idempotencyKey": f"{key}-0"})
        await _wait_run(client, f"{key}-0")
        tail = await asyncio.create_subprocess_exec(
            *CTL, "sessions", "tail", key, env=_ctl_env(daemon), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        await asyncio.sleep(1.0)  # `tail` subscribes (it shows only what happens from now on)
        send = asyncio.ensure_future(_ctl(daemon, "sessions", "send", key, message))
        request = await requested(client, key)
        rc, out, _ = await _ctl(daemon, "approvals", "list", "--json")
        assert rc == 0 and [a["id"] for a in json.loads(out)["approvals"]] == [request["id"]]
        rc, out, _ = await _ctl(daemon, "approvals", "list")
        assert rc == 0 and "chmod 777" in out and "ask_threshold" in out, out
        rc, out, err = await _ctl(daemon, "approvals", "deny", request["id"], "--reason", "use 644")
        assert rc == 0, err
        assert "denied: bash touch notes.txt" in out, out
        rc, _, err = await _ctl(daemon, "approvals", "approve", request["id"])
        assert rc == 1 and f"approval {request['id']} was already denied" in err, err
        rc, _, send_err = await send
        await asyncio.sleep(0.5)
        tail.terminate()
        tail_out, _ = await tail.communicate()
        rc, out, _ = await _ctl(daemon, "approvals", "list", "--all", "--session", key, "--json")
    assert "approval needed bash: " + RISKY in " ".join(send_err.split()), send_err
    assert f"gatewayctl approvals approve {request['id']}" in send_err
    assert "approval denied bash: deny by operator via gatewayctl: use 644" in " ".join(send_err.split())
    shown = " ".join(tail_out.decode().split())
    assert "approval needed bash: " + RISKY in shown and "approval denied" in shown, shown
    (row,) = json.loads(out)["approvals"]
    assert row["status"] == "denied" and row["surface"] == "gatewayctl" and row["note"] == "use 644"


@pytest.mark.browser
@pytest.mark.timeout(120)
async def test_the_dashboard_card_shows_the_request_and_decides_it(daemon: Daemon, tmp_path: Path) -> None:
    """In headless Chromium: the card of a waiting call (tool, command, risk, the rule that
    asked), Deny with a reason, Allow for this session, then Approve. Set
    GATEWAY_APPROVALS_SCREENSHOT=docs/images/approvals-card.png to refresh the screenshot."""
    from playwright.async_api import async_playwright, expect

    from tests.e2e.test_dashboard import CHROMIUM, CHROMIUM_ARGS, _require_chromium

    _require_chromium()
    key = "agent:main:dashboard"
    async with connected(daemon) as client:
        await client.call("chat.send", {"sessionKey": key, "message": "hello", "idempotencyKey": f"{key}-0"})
        await _wait_run(client, f"{key}-0")
        session_id = (await client.call("sessions.describe", {"key": key}))["sessionId"]
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = await (await browser.new_context(viewport={"width": 1280, "height": 800})).new_page()
                errors: list[str] = []
                page.on("pageerror", lambda error: errors.append(str(error)))
                await page.goto(f"{daemon.http_url}/ui/#/session/{session_id}")
                await page.fill("#auth-secret", daemon.token)
                await page.click("#auth-submit")
                await expect(page.locator("#session")).to_have_attribute("data-feed", "live", timeout=15_000)

                async def ask(command: str, run_id: str) -> Any:
                    message = tool_message("bash", {"command": command})
                    await client.call(
                        "chat.send", {"sessionKey": key, "message": message, "idempotencyKey": run_id}
                    )
                    card = page.locator("#approvals section.approval-card")
                    await expect(card).to_have_count(1, timeout=15_000)
                    return card

                card = await ask(RISKY, f"{key}-1")
                await expect(card.locator(".tool-name")).to_have_text("bash")
                await expect(card.locator(".approval-command")).to_have_text(RISKY)
                await expect(card.locator(".pill")).to_have_text("risk medium")
                await expect(card.locator(".approval-rule")).to_contain_text("ask_threshold medium")
                # The call's own card in the transcript says what it waits for.
                waiting = page.locator("#messages .tool-state.state-awaiting")
                await expect(waiting).to_have_text("awaiting approval", timeout=15_000)
                shot = Path(os.environ.get("GATEWAY_APPROVALS_SCREENSHOT") or tmp_path / "approvals-card.png")
                shot.parent.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(shot))
                # A page opened while the call waits finds the request (`exec.approval.list`).
                await page.reload()
                await expect(page.locator("#session")).to_have_attribute("data-feed", "live", timeout=15_000)
                await expect(card).to_have_count(1)
                await card.locator(".approval-reason").fill("not before the release")
                await card.locator(".approval-deny").click()
                await expect(card).to_have_count(0)
                await expect(waiting).to_have_count(0)
                notice = page.locator("#toasts .toast", has_text="Denied by operator via dashboard")
                await expect(notice).to_contain_text("not before the release")
                assert (await _wait_run(client, f"{key}-1"))["status"] == "ok"

                card = await ask("chmod 777 x.txt; echo session", f"{key}-2")
                await card.locator(".approval-session").click()
                await expect(card).to_have_count(0)
                assert (await _wait_run(client, f"{key}-2"))["status"] == "ok"
                same = tool_message("bash", {"command": "chmod 777 y.txt; echo again"})
                await client.call(
                    "chat.send", {"sessionKey": key, "message": same, "idempotencyKey": f"{key}-3"}
                )
                assert (await _wait_run(client, f"{key}-3"))["status"] == "ok"

                card = await ask("ls /usr/bin > /dev/null && echo listed", f"{key}-4")
                await expect(card.locator(".approval-rule")).to_contain_text("path /usr/bin is outside")
                await card.locator(".approval-approve").click()
                await expect(card).to_have_count(0)
                assert (await _wait_run(client, f"{key}-4"))["status"] == "ok"
                assert errors == []
            finally:
                await browser.close()
        history = await client.call("exec.approval.list", {"history": True, "sessionKey": key})
    rows = list(reversed(history["approvals"]))
    assert [(r["status"], r["decision"], r["surface"]) for r in rows] == [
        ("denied", "deny", "dashboard"),
        ("allowed", "allow-always", "dashboard"),
        ("allowed", "allow-once", "dashboard"),
    ]
    results = await _tool_finished(daemon, key)
    assert [r["isError"] for r in results] == [True, False, False, False], [_text(r) for r in results]
    assert "denied by operator (dashboard): not before the release" in _text(results[0])
    assert "again" in _text(results[2])


async def test_a_token_with_only_operator_approvals_decides_with_gatewayctl(daemon: Daemon) -> None:
    key = "agent:main:approver"
    async with connected(daemon) as client:
        made = await client.call("tokens.create", {"name": "approver", "scopes": ["operator.approvals"]})
        await _send(client, key, RISKY)
        request = await requested(client, key)
        env = {**_ctl_env(daemon), "GATEWAY_TOKEN": made["token"]}
        proc = await asyncio.create_subprocess_exec(
            *CTL, "approvals", "approve", request["id"], env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await proc.communicate()
        assert proc.returncode == 0, err
        assert (await _wait_run(client, key))["status"] == "ok"
        got = (await client.call("exec.approval.get", {"id": request["id"]}))["approval"]
    assert got["decidedBy"] == "token approver" and got["surface"] == "gatewayctl"


async def test_config_reload_applies_a_changed_policy_to_later_runs(tmp_path: Path) -> None:
    home = tmp_path / "reload"
    started = start_daemon(home, config=CONFIG.replace('approvals = "risky"', 'approvals = "never"', 1))
    try:
        async with connected(started) as client:
            await _send(client, "agent:main:before", RISKY)
            assert (await _wait_run(client, "agent:main:before"))["status"] == "ok"
            (config_path,) = home.glob("gateway*.toml")
            config_path.write_text(CONFIG)
            await client.call("config.reload")
            await _send(client, "agent:main:after", RISKY)
            request = await requested(client, "agent:main:after")
            await client.call("exec.approval.resolve", {"id": request["id"], "decision": "deny"})
            await _wait_run(client, "agent:main:after")
            history = await client.call("exec.approval.list", {"history": True})
    finally:
        started.stop()
    assert [a["sessionKey"] for a in history["approvals"]] == ["agent:main:after"]
