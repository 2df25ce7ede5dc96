// The session tree in the sidebar: roots newest first, branches and sub-agents under their
// parent, each with its status and last activity. Rebuilt from the SessionDirectory on change.

import { clear, formatAgo, formatTokens, h } from "./dom.js";
import { displayStatus, treeName } from "./sessions.js";

const KIND_LABELS = { branch: "branch", subagent: "sub-agent", group: "group", channel: "channel", direct: "direct" };

/**
 * @param {HTMLElement} container
 * @param {import("./sessions.js").SessionDirectory} directory
 * @param {object} view  {selected: sessionId|null, filter: string, collapsed: Set<string>,
 *                        onSelect(sessionId), onToggle(sessionId)}
 */
export function renderTree(container, directory, view) {
  clear(container);
  const filter = view.filter.trim().toLowerCase();
  const matches = (row) =>
    !filter ||
    [row.label, row.key, ...(row.keys || []), row.sessionId, row.kind, row.agentId]
      .filter(Boolean)
      .some((text) => String(text).toLowerCase().includes(filter));
  const visible = (node) => matches(node.row) || node.children.some(visible);
  const roots = directory.forest().filter(visible);
  if (!roots.length) {
    container.append(h("p.tree-empty", filter ? "No session matches." : "No sessions yet. Start one with “New session”."));
    return;
  }
  const list = h("ul.tree", { role: "tree", "aria-label": "Sessions" });
  for (const root of roots) list.append(nodeItem(root, null, view, visible, 1));
  container.append(list);
}

function nodeItem(node, parent, view, visible, level) {
  const row = node.row;
  const status = displayStatus(row);
  const children = node.children.filter(visible);
  const collapsed = view.collapsed.has(row.sessionId);
  const selected = view.selected === row.sessionId;
  const kind = KIND_LABELS[row.kind];
  const item = h("li.tree-item", {
    role: "treeitem",
    "aria-level": level,
    "aria-selected": selected ? "true" : "false",
    "aria-expanded": children.length ? String(!collapsed) : null,
    dataset: { sessionId: row.sessionId, key: row.key || "", status, kind: row.kind || "" },
  });
  const toggle = children.length
    ? h(
        "button.tree-toggle",
        {
          type: "button",
          "aria-label": collapsed ? "Show branches" : "Hide branches",
          onclick: (event) => {
            event.stopPropagation();
            view.onToggle(row.sessionId);
          },
        },
        collapsed ? "▸" : "▾",
      )
    : h("span.tree-toggle.placeholder");
  const title = [row.key || "(no key)", row.sessionId, row.model ? `model ${row.model}` : null].filter(Boolean).join("\n");
  const activity = status === "running" ? "running" : status === "idle" ? formatAgo(row.updatedAt) : status;
  const facts = [activity];
  if (row.totalTokens) facts.push(`${formatTokens(row.totalTokens)} tokens`);
  const button = h(
    `button.tree-node${selected ? ".selected" : ""}`,
    { type: "button", title, onclick: () => view.onSelect(row.sessionId) },
    toggle,
    h(`span.status-dot.status-${status}`, { "aria-label": status, title: status }),
    h(
      "span.tree-text",
      h("span.tree-line", h("span.tree-name", treeName(row, parent)), kind ? h(`span.tree-kind.kind-${row.kind}`, kind) : null),
      h("span.tree-activity", facts.join(" · ")),
    ),
  );
  item.append(button);
  if (children.length && !collapsed) {
    const group = h("ul.tree-group", { role: "group" });
    for (const child of children) group.append(nodeItem(child, row, view, visible, level + 1));
    item.append(group);
  }
  return item;
}
