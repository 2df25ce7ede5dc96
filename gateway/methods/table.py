"""The method handlers by name, imported as `gateway.methods.HANDLERS` with the first method call.
Each `Route` names the params model its handler takes, which must be the method's model in
`gateway.protocol.methods.METHODS` (the scope is there too)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gateway.methods import approval_methods as approval
from gateway.methods import chat_methods as chat
from gateway.methods import cluster_methods as cluster
from gateway.methods import cron_methods as cron
from gateway.methods import extensions_methods as ext
from gateway.methods import mcp_methods as mcp
from gateway.methods import sessions_methods as sess
from gateway.methods import subscribe_methods as sub
from gateway.methods import system_methods as system
from gateway.methods import tokens_methods as tokens
from gateway.methods.base import Route
from gateway.protocol import approval_params as ap
from gateway.protocol import cron_params as cp
from gateway.protocol import params as p

ROUTES: Mapping[str, Route[Any]] = MappingProxyType(
    {
        "health": Route(p.EmptyParams, system.health),
        "status": Route(p.EmptyParams, system.status),
        "system-presence": Route(p.EmptyParams, system.system_presence),
        "agents.list": Route(p.EmptyParams, system.agents_list),
        "models.list": Route(p.ModelsListParams, system.models_list),
        "usage.summary": Route(p.UsageSummaryParams, system.usage_summary),
        "commands.list": Route(p.CommandsListParams, system.commands_list),
        "config.get": Route(p.EmptyParams, system.config_get),
        "config.reload": Route(p.NativeEmptyParams, system.config_reload),
        "channels.status": Route(p.ChannelsStatusParams, system.channels_status),
        "cluster.status": Route(p.NativeEmptyParams, cluster.cluster_status),
        "pairing.list": Route(p.PairingListParams, system.pairing_list),
        "pairing.approve": Route(p.PairingApproveParams, system.pairing_approve),
        "tokens.create": Route(p.TokensCreateParams, tokens.tokens_create),
        "tokens.list": Route(p.NativeEmptyParams, tokens.tokens_list),
        "tokens.revoke": Route(p.TokensRevokeParams, tokens.tokens_revoke),
        "mcp.list": Route(p.NativeEmptyParams, mcp.mcp_list),
        "mcp.restart": Route(p.McpRestartParams, mcp.mcp_restart),
        "extensions.list": Route(p.NativeEmptyParams, ext.extensions_list),
        "extensions.enable": Route(p.ExtensionNameParams, ext.extensions_enable),
        "extensions.disable": Route(p.ExtensionNameParams, ext.extensions_disable),
        "question.list": Route(p.EmptyParams, system.question_list),
        "plugin.approval.list": Route(p.EmptyParams, system.plugin_approval_list),
        "exec.approval.list": Route(ap.ExecApprovalListParams, approval.approval_list),
        "exec.approval.get": Route(ap.ExecApprovalGetParams, approval.approval_get),
        "exec.approval.resolve": Route(ap.ExecApprovalResolveParams, approval.approval_resolve),
        "exec.approval.waitDecision": Route(ap.ExecApprovalWaitDecisionParams, approval.approval_wait),
        "sessions.list": Route(p.SessionsListParams, sess.sessions_list),
        "sessions.describe": Route(p.SessionsDescribeParams, sess.sessions_describe),
        "sessions.tree": Route(p.SessionsTreeParams, sess.sessions_tree),
        "sessions.create": Route(p.SessionsCreateParams, sess.sessions_create),
        "sessions.patch": Route(p.SessionsPatchParams, sess.sessions_patch),
        "sessions.fork": Route(p.SessionsForkParams, sess.sessions_fork),
        "sessions.branch": Route(p.SessionsBranchParams, sess.sessions_branch),
        "sessions.switch": Route(p.SessionsSwitchParams, sess.sessions_switch),
        "sessions.abort": Route(p.SessionsAbortParams, sess.sessions_abort),
        "sessions.reset": Route(p.SessionsResetParams, sess.sessions_reset),
        "sessions.delete": Route(p.SessionsDeleteParams, sess.sessions_delete),
        "sessions.compact": Route(p.SessionsCompactParams, sess.sessions_compact),
        "sessions.subscribe": Route(p.SessionsSubscribeParams, sub.sessions_subscribe),
        "sessions.unsubscribe": Route(p.EmptyParams, sub.sessions_unsubscribe),
        "sessions.messages.subscribe": Route(
            p.SessionsMessagesSubscribeParams, sub.sessions_messages_subscribe
        ),
        "sessions.messages.unsubscribe": Route(
            p.SessionsMessagesUnsubscribeParams, sub.sessions_messages_unsubscribe
        ),
        "sessions.events.subscribe": Route(p.SessionsEventsSubscribeParams, sub.sessions_events_subscribe),
        "sessions.events.unsubscribe": Route(
            p.SessionsEventsUnsubscribeParams, sub.sessions_events_unsubscribe
        ),
        "sessions.send": Route(p.SessionsSendParams, chat.sessions_send),
        "chat.send": Route(p.ChatSendParams, chat.chat_send),
        "chat.history": Route(p.ChatHistoryParams, chat.chat_history),
        "chat.abort": Route(p.ChatAbortParams, chat.chat_abort),
        "chat.inject": Route(p.ChatInjectParams, chat.chat_inject),
        "agent": Route(p.AgentParams, chat.agent),
        "agent.wait": Route(p.AgentWaitParams, chat.agent_wait),
        "cron.list": Route(cp.CronListParams, cron.cron_list),
        "cron.get": Route(cp.CronGetParams, cron.cron_get),
        "cron.status": Route(p.EmptyParams, cron.cron_status),
        "cron.runs": Route(cp.CronRunsParams, cron.cron_runs),
        "cron.add": Route(cp.CronAddParams, cron.cron_add),
        "cron.update": Route(cp.CronUpdateParams, cron.cron_update),
        "cron.remove": Route(cp.CronRemoveParams, cron.cron_remove),
        "cron.run": Route(cp.CronRunParams, cron.cron_run),
    }
)

__all__ = ["ROUTES"]
