// Rendering of a Transcript into the DOM. Each item (committed message, streaming message,
// pending send) is one node keyed by its id and rebuilt only when its revision changes; the list is
// then put in transcript order. Nothing is ever appended blindly, so the DOM shows each message
// exactly once whatever order or how many times events arrived.

import { clear, formatClock, formatCost, formatDuration, formatNumber, h, prettyJson } from "./dom.js";
import { RESULT_ROLES, Transcript } from "./transcript.js";

const ROLE_LABELS = { user: "You", assistant: "Assistant", toolResult: "Tool result", system: "System" };

/**
 * @param {HTMLElement} list  the container of message nodes
 * @param {Transcript} transcript
 * @param {object} view  {pending: [...], actions: {branch(entryId), retry(item), dismiss(item)},
 *                        openDetails: Map<string, boolean> (what the user opened or closed),
 *                        canBranch: boolean,
 *                        awaiting: Set<string> (tool call ids waiting for an approval)}
 */
export function renderTranscript(list, transcript, view) {
  const nodes = list._nodes || (list._nodes = new Map());
  const shownInCards = transcript.resultsShownInCards();
  const hiddenResults = new Set(shownInCards.values());
  const items = [];
  const notices = transcript.notices;
  const noticeItem = (notice) => ({
    key: notice.key,
    sig: "notice",
    build: () => h(`div.notice.notice-${notice.tone}`, { role: "note" }, notice.text),
  });
  transcript.order.forEach((id, index) => {
    for (const notice of notices) if (notice.after === index) items.push(noticeItem(notice));
    if (hiddenResults.has(id)) return;
    const message = transcript.entries.get(id);
    if (!message) return;
    const waits = awaitingIn(message, view.awaiting);
    items.push({ key: id, sig: `${transcript.rev(id)}|${view.canBranch}|${waits}`, build: () => messageNode(id, message, transcript, shownInCards, view) });
  });
  for (const notice of notices) if (notice.after >= transcript.order.length) items.push(noticeItem(notice));
  for (const partial of transcript.partials.values()) {
    items.push({ key: partial.id, sig: `p${transcript.rev(partial.id)}`, build: () => partialNode(partial, view) });
  }
  for (const item of view.pending) {
    items.push({ key: `pending:${item.idempotencyKey}`, sig: `${item.state}|${item.disposition}|${item.error}`, build: () => pendingNode(item, view) });
  }
  if (transcript.running && !transcript.partials.size) {
    items.push({ key: "activity", sig: "activity", build: () => h("div.activity", { role: "status" }, h("span.spinner"), "Working…") });
  }

  const wanted = new Set(items.map((item) => item.key));
  for (const [key, entry] of nodes) {
    if (!wanted.has(key)) {
      entry.node.remove();
      nodes.delete(key);
    }
  }
  let cursor = list.firstElementChild;
  for (const item of items) {
    let entry = nodes.get(item.key);
    if (!entry || entry.sig !== item.sig) {
      const node = item.build();
      node.dataset.key = item.key;
      if (entry) {
        if (entry.node === cursor) cursor = node;
        entry.node.replaceWith(node);
      }
      entry = { sig: item.sig, node };
      nodes.set(item.key, entry);
    }
    if (entry.node !== cursor) list.insertBefore(entry.node, cursor);
    else cursor = cursor.nextElementSibling;
  }
}

export function resetTranscriptView(list) {
  list._nodes = new Map();
  clear(list);
}

// --- committed messages -------------------------------------------------------------------------

function messageNode(id, message, transcript, shownInCards, view) {
  const role = message.role || "assistant";
  const node = h(`article.msg.msg-${RESULT_ROLES.has(role) ? "tool" : role}`, {
    dataset: { role, entryId: id },
  });
  const head = h("header.msg-head", h("span.msg-role", ROLE_LABELS[role] || role));
  if (message.timestamp) head.append(h("time.msg-time", { datetime: new Date(message.timestamp).toISOString() }, formatClock(message.timestamp)));
  head.append(h("span.msg-spacer"));
  if (view.canBranch && !transcript.isTransient(id)) {
    head.append(
      h(
        "button.msg-action",
        { type: "button", title: "Start a new branch that ends with this message", onclick: () => view.actions.branch(id) },
        "Branch here",
      ),
    );
  }
  node.append(head);
  const body = h("div.msg-body");
  if (RESULT_ROLES.has(role)) {
    body.append(toolResultStandalone(message));
  } else {
    const content = typeof message.content === "string" ? [{ type: "text", text: message.content }] : message.content || [];
    content.forEach((block, index) => {
      const rendered = blockNode(block, `${id}:${index}`, transcript, shownInCards, view);
      if (rendered) body.append(rendered);
    });
  }
  node.append(body);
  if (message.errorMessage || message.stopReason === "error" || message.stopReason === "aborted") {
    node.append(stopNotice(message));
  }
  if (role === "assistant") node.append(usageLine(message));
  return node;
}

function blockNode(block, detailsKey, transcript, shownInCards, view) {
  if (!block) return null;
  switch (block.type) {
    case "text":
      return block.text ? textNode(block.text) : null;
    case "thinking":
      return thinkingNode(block.thinking || "", detailsKey, view, false);
    case "toolCall": {
      const tool = transcript.tools.get(block.id);
      const resultId = shownInCards.get(block.id);
      const result = resultId ? transcript.entries.get(resultId) : null;
      return toolCard({
        callId: block.id,
        name: block.name,
        args: block.arguments,
        tool,
        result,
        resultId,
        running: transcript.running,
        view,
        detailsKey,
      });
    }
    case "image":
      if (typeof block.data === "string" && /^image\/[\w.+-]+$/.test(block.mimeType || "")) {
        return h("img.msg-image", { src: `data:${block.mimeType};base64,${block.data}`, alt: "attached image" });
      }
      return h("div.msg-note", "[image]");
    default:
      return null;
  }
}

/** Text with ``` fenced blocks shown as code; everything else as wrapped plain text. */
export function textNode(text) {
  const node = h("div.msg-text");
  const parts = text.split(/^```[^\n]*\n?/m);
  parts.forEach((part, index) => {
    if (!part) return;
    if (index % 2 === 1) node.append(h("pre.code", h("code", part.replace(/\n$/, ""))));
    else node.append(h("span.prose", part));
  });
  return node;
}

function thinkingNode(text, detailsKey, view, streaming) {
  const key = `thinking:${detailsKey}`;
  const words = text.trim() ? text.trim().split(/\s+/).length : 0;
  const details = h(
    "details.thinking",
    { open: view.openDetails.get(key) ?? false },
    h("summary", streaming ? "Thinking…" : "Thinking", h("span.muted", ` · ${words} word${words === 1 ? "" : "s"}`)),
    h("div.thinking-text", text),
  );
  details.addEventListener("toggle", () => view.openDetails.set(key, details.open));
  return details;
}

/** The ids of `message`'s tool calls that wait for an approval, as one string (for a node's signature). */
function awaitingIn(message, awaiting) {
  if (!awaiting?.size || !Array.isArray(message.content)) return "";
  return message.content
    .filter((block) => block?.type === "toolCall" && awaiting.has(block.id))
    .map((block) => block.id)
    .join(",");
}

function contentText(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "string") return value;
  if (Array.isArray(value)) return value.map(contentText).join("");
  if (typeof value === "object") {
    if (value.type === "text") return value.text || "";
    if (value.content !== undefined) return contentText(value.content);
    return prettyJson(value);
  }
  return String(value);
}

function argsPreview(name, args) {
  if (!args || typeof args !== "object") return typeof args === "string" ? args : "";
  for (const field of ["command", "path", "file_path", "query", "url", "prompt", "pattern"]) {
    if (typeof args[field] === "string") return args[field];
  }
  const json = JSON.stringify(args);
  return json === "{}" ? "" : json;
}

function toolCard({ callId, name, args, tool, result, resultId, running, view, detailsKey }) {
  let state = "pending";
  let output = "";
  let isError = false;
  if (result) {
    state = result.isError ? "error" : "ok";
    isError = Boolean(result.isError);
    output = contentText(result.content);
  } else if (tool?.done) {
    state = tool.isError ? "error" : "ok";
    isError = Boolean(tool.isError);
    output = contentText(tool.result);
  } else if (tool) {
    state = "running";
    output = contentText(tool.output);
  } else if (running) {
    state = "running";
  }
  if (state === "running" && view.awaiting?.has(callId)) state = "awaiting";
  const labels = { running: "running…", awaiting: "awaiting approval", ok: "done", error: "failed", pending: "no result" };
  let stateText = labels[state];
  if ((state === "ok" || state === "error") && typeof tool?.durationMs === "number") {
    stateText += ` · ${formatDuration(tool.durationMs)}`;
  }
  const preview = argsPreview(name, args);
  const head = h(
    "div.tool-head",
    h("span.tool-icon", { "aria-hidden": "true" }, "›_"),
    h("span.tool-name", name || "tool"),
    preview ? h("code.tool-preview", preview) : null,
    h("span.msg-spacer"),
    h(`span.tool-state.state-${state}`, state === "running" ? h("span.spinner") : null, stateText),
  );
  if (resultId && view.canBranch) {
    head.append(
      h(
        "button.msg-action",
        { type: "button", title: "Start a new branch that ends with this tool result", onclick: () => view.actions.branch(resultId) },
        "Branch here",
      ),
    );
  }
  const argsKey = `args:${detailsKey}`;
  const argsText = prettyJson(args ?? {});
  const argsDetails = h(
    "details.tool-args",
    { open: view.openDetails.get(argsKey) ?? argsText.length < 240 },
    h("summary", "Arguments"),
    h("pre.code", h("code", argsText)),
  );
  argsDetails.addEventListener("toggle", () => view.openDetails.set(argsKey, argsDetails.open));
  return h(
    `section.tool.tool-${state}`,
    { dataset: { toolCallId: callId || "" } },
    head,
    argsDetails,
    output || state === "running"
      ? h(`pre.tool-output${isError ? ".is-error" : ""}`, { "aria-label": "Tool output" }, output || " ")
      : null,
  );
}

function toolResultStandalone(message) {
  const text = contentText(message.content);
  return h(
    `section.tool.tool-${message.isError ? "error" : "ok"}`,
    h("div.tool-head", h("span.tool-icon", "›_"), h("span.tool-name", message.toolName || "tool")),
    h(`pre.tool-output${message.isError ? ".is-error" : ""}`, text),
  );
}

function stopNotice(message) {
  if (message.stopReason === "aborted") {
    const detail = message.errorMessage && message.errorMessage !== "Request was aborted" ? ` — ${message.errorMessage}` : "";
    return h("div.msg-stop.stop-aborted", { role: "note" }, `Stopped${detail}`);
  }
  return h("div.msg-stop.stop-error", { role: "note" }, `Error: ${message.errorMessage || "the model call failed"}`);
}

function usageLine(message) {
  const usage = message.usage || {};
  const parts = [];
  if (message.model) parts.push(h("span", message.provider ? `${message.provider}/${message.model}` : message.model));
  if (typeof usage.input === "number") parts.push(h("span", { title: "input tokens" }, `${formatNumber(usage.input)} in`));
  if (typeof usage.output === "number") parts.push(h("span", { title: "output tokens" }, `${formatNumber(usage.output)} out`));
  if (usage.cacheRead) parts.push(h("span", { title: "cached input tokens" }, `${formatNumber(usage.cacheRead)} cached`));
  const cost = formatCost(typeof usage.cost === "object" ? usage.cost?.total : usage.cost);
  if (cost) parts.push(h("span.cost", { title: "cost of this message" }, cost));
  if (message.stopReason && !["stop", "toolUse", "aborted", "error"].includes(message.stopReason)) {
    parts.push(h("span", `stop: ${message.stopReason}`));
  }
  return h("footer.msg-meta", parts.flatMap((part, index) => (index ? [h("span.sep", "·"), part] : [part])));
}

// --- streaming messages ---------------------------------------------------------------------------

function partialNode(partial, view) {
  const role = partial.role || "assistant";
  const node = h(`article.msg.msg-${role}.streaming`, { dataset: { role, messageId: partial.id }, "aria-busy": "true" });
  node.append(
    h(
      "header.msg-head",
      h("span.msg-role", ROLE_LABELS[role] || role),
      h("span.msg-live", h("span.pulse"), "streaming"),
    ),
  );
  const body = h("div.msg-body");
  if (partial.incomplete) {
    body.append(h("div.msg-note", "Part of this reply was not replayed after the reconnect; the full text appears when it completes."));
  }
  if (partial.base) body.append(textNode(partial.base));
  partial.blocks.forEach((block, index) => {
    if (!block) return;
    if (block.kind === "thinking") body.append(thinkingNode(block.text, `${partial.id}:${index}`, view, true));
    else if (block.kind === "toolcall") {
      body.append(
        h(
          "section.tool.tool-running",
          h("div.tool-head", h("span.tool-icon", "›_"), h("span.tool-name", "preparing a tool call"), h("span.msg-spacer"), h("span.tool-state.state-running", h("span.spinner"), "writing arguments…")),
          h("pre.code", h("code", block.text)),
        ),
      );
    } else if (block.text) body.append(textNode(block.text));
  });
  if (!Transcript.partialText(partial) && !partial.blocks.some(Boolean)) body.append(h("span.caret", { "aria-hidden": "true" }));
  node.append(body);
  return node;
}

// --- sends not yet in the transcript --------------------------------------------------------------

function pendingNode(item, view) {
  const labels = {
    sending: "Sending…",
    accepted: item.disposition && item.disposition !== "queued" ? `Queued · ${item.disposition}` : "Waiting to start…",
    failed: "Not sent",
  };
  const node = h(`article.msg.msg-user.pending.pending-${item.state}`, { dataset: { role: "pending" } });
  node.append(h("header.msg-head", h("span.msg-role", "You"), h("span.msg-live", labels[item.state] || item.state)));
  node.append(h("div.msg-body", textNode(item.text)));
  if (item.state === "failed") {
    node.append(
      h(
        "div.msg-stop.stop-error",
        `Not sent: ${item.error || "the gateway refused it"} `,
        h("button.link", { type: "button", onclick: () => view.actions.retry(item) }, "Retry"),
        " · ",
        h("button.link", { type: "button", onclick: () => view.actions.dismiss(item) }, "Dismiss"),
      ),
    );
  }
  return node;
}
