// The session directory: every SessionRow the dashboard knows (from sessions.list, sessions.tree
// and sessions.changed), and the forest they form (branches and sub-agents under their parent).
// No DOM here. Rows are keyed by session id; a session key belongs to one session at a time, so a
// row that arrives holding a key takes it away from any other row.

export function displayStatus(row) {
  if (!row) return "idle";
  if (row.hasActiveRun) return "running";
  // The stored status can lag behind the run (it is written with the run's first events).
  if (row.status === "running") return "idle";
  return row.status || "idle";
}

export function displayName(row) {
  if (!row) return "";
  if (row.label) return row.label;
  if (row.key) return row.key;
  return `session ${String(row.sessionId).slice(0, 8)}`;
}

/** A shorter name for a node under `parent`: what its key adds to the parent's key. */
export function treeName(row, parent) {
  if (row?.label) return row.label;
  const key = row?.key;
  if (key && parent?.key && key.startsWith(`${parent.key}:`)) return key.slice(parent.key.length + 1).replaceAll(":", " ");
  return displayName(row);
}

export class SessionDirectory {
  constructor() {
    /** session id -> SessionRow */
    this.rows = new Map();
    /** session id -> `stamp` of its last upsert (to keep rows newer than a listing) */
    this.stamps = new Map();
    this.stamp = 0;
    this.version = 0;
  }

  upsert(row) {
    if (!row || !row.sessionId) return;
    const previous = this.rows.get(row.sessionId);
    if (previous && typeof previous.updatedAt === "number" && typeof row.updatedAt === "number") {
      // sessions.changed rows are read in the background: never let an older read win.
      if (row.updatedAt < previous.updatedAt && previous.lastSeq > (row.lastSeq ?? 0)) return;
    }
    const clean = { ...row };
    delete clean.children;
    this.rows.set(row.sessionId, clean);
    this.stamps.set(row.sessionId, ++this.stamp);
    const keys = new Set(clean.keys || (clean.key ? [clean.key] : []));
    if (keys.size) {
      for (const [id, other] of this.rows) {
        if (id === row.sessionId) continue;
        const held = other.keys || (other.key ? [other.key] : []);
        if (!held.some((key) => keys.has(key))) continue;
        const left = held.filter((key) => !keys.has(key));
        this.rows.set(id, { ...other, keys: left, key: left[0] ?? null });
      }
    }
    this.version += 1;
  }

  remove(sessionId) {
    this.stamps.delete(sessionId);
    if (this.rows.delete(sessionId)) this.version += 1;
  }

  /**
   * Replace everything with a listing requested when `stamp` was `since`: sessions it does not
   * name are dropped, except those announced after the request was sent.
   */
  replaceAll(rows, since = Infinity) {
    const listed = new Set(rows.map((row) => row.sessionId));
    for (const id of [...this.rows.keys()]) {
      if (!listed.has(id) && !((this.stamps.get(id) ?? 0) > since)) this.remove(id);
    }
    const freshKeys = new Set();
    for (const [id, row] of this.rows) {
      if ((this.stamps.get(id) ?? 0) > since) for (const key of row.keys || []) freshKeys.add(key);
    }
    for (const row of rows) {
      if ((this.stamps.get(row.sessionId) ?? 0) > since) continue; // a fresher row arrived meanwhile
      const keys = (row.keys || (row.key ? [row.key] : [])).filter((key) => !freshKeys.has(key));
      this.upsert({ ...row, keys, key: keys[0] ?? null });
    }
    this.version += 1;
  }

  /** Add a `sessions.tree` node and all its descendants. */
  addTree(node) {
    if (!node) return;
    this.upsert(node);
    for (const child of node.children || []) this.addTree(child);
  }

  get(sessionId) {
    return this.rows.get(sessionId) || null;
  }

  byKey(key) {
    for (const row of this.rows.values()) {
      if (row.key === key || (row.keys || []).includes(key)) return row;
    }
    return null;
  }

  /** Root rows, newest activity first; each node `{row, children}` with children oldest first. */
  forest() {
    const nodes = new Map();
    for (const row of this.rows.values()) nodes.set(row.sessionId, { row, children: [] });
    const roots = [];
    for (const node of nodes.values()) {
      const parent = node.row.parentId ? nodes.get(node.row.parentId) : null;
      if (parent) parent.children.push(node);
      else roots.push(node);
    }
    const latest = (node) => Math.max(node.row.updatedAt || 0, ...node.children.map(latest));
    const byCreation = (a, b) => (a.row.createdAt || 0) - (b.row.createdAt || 0);
    for (const node of nodes.values()) node.children.sort(byCreation);
    roots.sort((a, b) => latest(b) - latest(a));
    return roots;
  }

  /** The root of the tree holding `sessionId` (itself when it has no known parent). */
  rootOf(sessionId) {
    let row = this.rows.get(sessionId);
    const seen = new Set();
    while (row && row.parentId && this.rows.has(row.parentId) && !seen.has(row.parentId)) {
      seen.add(row.sessionId);
      row = this.rows.get(row.parentId);
    }
    return row || null;
  }
}
