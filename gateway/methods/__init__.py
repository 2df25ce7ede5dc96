"""Method handlers by name, and the scope each requires."""

from __future__ import annotations

from gateway.methods import chat_methods as chat
from gateway.methods import sessions_methods as sess
from gateway.methods import system_methods as system
from gateway.methods.base import Call, ConnState, Handler, MethodError

READ, WRITE, ADMIN = "operator.read", "operator.write", "operator.admin"

HANDLERS: dict[str, tuple[Handler, str]] = {
    "health": (system.health, READ),
    "status": (system.status, READ),
    "system-presence": (system.system_presence, READ),
    "agents.list": (system.agents_list, READ),
    "models.list": (system.models_list, READ),
    "commands.list": (system.commands_list, READ),
    "config.get": (system.config_get, READ),
    "config.reload": (system.config_reload, ADMIN),
    "channels.status": (system.channels_status, READ),
    "pairing.list": (system.pairing_list, ADMIN),
    "pairing.approve": (system.pairing_approve, ADMIN),
    "question.list": (system.question_list, "operator.questions"),
    "plugin.approval.list": (system.plugin_approval_list, "operator.approvals"),
    "sessions.list": (sess.sessions_list, READ),
    "sessions.describe": (sess.sessions_describe, READ),
    "sessions.tree": (sess.sessions_tree, READ),
    "sessions.subscribe": (sess.sessions_subscribe, READ),
    "sessions.unsubscribe": (sess.sessions_unsubscribe, READ),
    "sessions.messages.subscribe": (sess.sessions_messages_subscribe, READ),
    "sessions.messages.unsubscribe": (sess.sessions_messages_unsubscribe, READ),
    "sessions.events.subscribe": (sess.sessions_events_subscribe, READ),
    "sessions.events.unsubscribe": (sess.sessions_events_unsubscribe, READ),
    "sessions.create": (sess.sessions_create, WRITE),
    "sessions.send": (chat.sessions_send, WRITE),
    "sessions.patch": (sess.sessions_patch, WRITE),
    "sessions.fork": (sess.sessions_branch, WRITE),
    "sessions.branch": (sess.sessions_branch, WRITE),
    "sessions.switch": (sess.sessions_switch, WRITE),
    "sessions.abort": (sess.sessions_abort, WRITE),
    "sessions.reset": (sess.sessions_reset, ADMIN),
    "sessions.delete": (sess.sessions_delete, ADMIN),
    "sessions.compact": (sess.sessions_compact, ADMIN),
    "chat.send": (chat.chat_send, WRITE),
    "chat.history": (chat.chat_history, READ),
    "chat.abort": (chat.chat_abort, WRITE),
    "chat.inject": (chat.chat_inject, ADMIN),
    "agent": (chat.agent, WRITE),
    "agent.wait": (chat.agent_wait, WRITE),
}

METHOD_SCOPES: dict[str, str] = {name: scope for name, (_, scope) in HANDLERS.items()}

__all__ = ["HANDLERS", "METHOD_SCOPES", "Call", "ConnState", "Handler", "MethodError"]
