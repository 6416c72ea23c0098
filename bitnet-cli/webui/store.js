// The conversations as this browser keeps them (localStorage) and as files carry them:
// every conversation read from storage or an imported file is untrusted and passes through
// cleanConversation, which keeps known fields of known types, capped in size.

export const STORE_KEY = "bitnet.webui.v1";
const ROLES = new Set(["user", "assistant", "system"]);
/// Caps on what a stored or imported conversation may hold.
export const MAX_TITLE = 200;
const MAX_CONTENT = 1 << 20;
const MAX_MESSAGES = 10000;

export function newId() {
  // crypto.randomUUID is missing outside secure contexts (a phone on http://LAN-ADDRESS).
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 10);
}

function str(v, cap) {
  return typeof v === "string" ? v.slice(0, cap) : "";
}

/// A conversation from untrusted JSON (storage or an imported file), or null.
export function cleanConversation(c) {
  if (!c || typeof c !== "object" || !Array.isArray(c.messages)) return null;
  const messages = [];
  for (const m of c.messages.slice(0, MAX_MESSAGES)) {
    if (!m || typeof m !== "object" || !ROLES.has(m.role)) continue;
    const msg = { role: m.role, content: str(m.content, MAX_CONTENT) };
    if (m.role === "assistant") {
      if (m.stopped === true) msg.stopped = true;
      if (typeof m.error === "string" && m.error) msg.error = str(m.error, 4000);
      if (typeof m.finish === "string") msg.finish = str(m.finish, 40);
      if (Number.isInteger(m.dropped) && m.dropped > 0) msg.dropped = m.dropped;
      if (m.stats && typeof m.stats === "object") {
        const s = {};
        for (const k of ["prompt", "completion", "total", "tps"]) {
          if (Number.isFinite(m.stats[k]) && m.stats[k] >= 0) s[k] = m.stats[k];
        }
        msg.stats = s;
      }
    }
    messages.push(msg);
  }
  const title = str(c.title, MAX_TITLE).trim();
  return {
    id: typeof c.id === "string" && /^[\w-]{1,64}$/.test(c.id) ? c.id : newId(),
    title: title || titleFrom(messages) || "New chat",
    titleSet: c.titleSet === true,
    updated: Number.isFinite(c.updated) ? c.updated : Date.now(),
    messages,
  };
}

export function loadStore() {
  let raw = null;
  try {
    raw = JSON.parse(localStorage.getItem(STORE_KEY) || "null");
  } catch {
    raw = null;
  }
  const store = { version: 1, current: null, conversations: [], settings: {} };
  if (raw && typeof raw === "object") {
    if (Array.isArray(raw.conversations)) {
      const seen = new Set();
      for (const c of raw.conversations) {
        const clean = cleanConversation(c);
        if (clean && !seen.has(clean.id)) {
          seen.add(clean.id);
          store.conversations.push(clean);
        }
      }
    }
    if (typeof raw.current === "string") store.current = raw.current;
    if (raw.settings && typeof raw.settings === "object") {
      for (const k of ["system", "temperature", "topP", "maxTokens", "seed", "model"]) {
        if (typeof raw.settings[k] === "string") store.settings[k] = raw.settings[k].slice(0, MAX_CONTENT);
      }
    }
  }
  return store;
}

export function titleFrom(messages) {
  const first = messages.find((m) => m.role === "user" && m.content.trim());
  if (!first) return "";
  const line = first.content.trim().split("\n")[0];
  return line.length > 48 ? line.slice(0, 47) + "…" : line;
}
