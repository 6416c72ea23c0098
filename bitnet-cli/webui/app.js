// The chat page of `bitnet serve`: conversations kept in this browser (localStorage),
// replies streamed from /v1/chat/completions (server-sent events), the model's name and
// context from /v1/models and /props, and the API key asked for on a 401 and kept for the
// tab (sessionStorage). Every text shown (model output, stored and imported conversations,
// server errors) goes into the page as text nodes or through markdown.js, never as HTML.

import { renderMarkdown } from "./markdown.js";

const STORE_KEY = "bitnet.webui.v1";
const API_KEY_KEY = "bitnet.webui.apiKey";
const ROLES = new Set(["user", "assistant", "system"]);
/// Share of the context at which the page warns.
const CTX_WARN = 0.8;
/// Caps on what a stored or imported conversation may hold.
const MAX_TITLE = 200;
const MAX_CONTENT = 1 << 20;
const MAX_MESSAGES = 10000;

const $ = (id) => document.getElementById(id);
const ui = {
  sidebar: $("sidebar"),
  conversations: $("conversations"),
  newConv: $("new-conv"),
  exportConv: $("export-conv"),
  importConv: $("import-conv"),
  toggleSidebar: $("toggle-sidebar"),
  closeSidebar: $("close-sidebar"),
  toggleSettings: $("toggle-settings"),
  settings: $("settings"),
  systemPrompt: $("system-prompt"),
  temperature: $("temperature"),
  topP: $("top-p"),
  maxTokens: $("max-tokens"),
  seed: $("seed"),
  modelName: $("model-name"),
  ctxSize: $("ctx-size"),
  ctxWarning: $("ctx-warning"),
  notice: $("notice"),
  noticeText: $("notice-text"),
  noticeClose: $("notice-close"),
  messages: $("messages"),
  composer: $("composer"),
  prompt: $("prompt"),
  send: $("send"),
  stop: $("stop"),
  keyDialog: $("api-key-dialog"),
  keyInput: $("api-key"),
  keyError: $("api-key-error"),
  keySave: $("api-key-save"),
  keyCancel: $("api-key-cancel"),
};

/// What the server told us: filled by loadServerInfo().
const server = { model: null, nCtx: null, defaults: {} };

/// The reply being streamed: { controller, conv, msg, index, node }.
let streaming = null;

// ---- storage -------------------------------------------------------------------------

function newId() {
  // crypto.randomUUID is missing outside secure contexts (a phone on http://LAN-ADDRESS).
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 10);
}

function str(v, cap) {
  return typeof v === "string" ? v.slice(0, cap) : "";
}

/// A conversation from untrusted JSON (storage or an imported file), or null.
function cleanConversation(c) {
  if (!c || typeof c !== "object" || !Array.isArray(c.messages)) return null;
  const messages = [];
  for (const m of c.messages.slice(0, MAX_MESSAGES)) {
    if (!m || typeof m !== "object" || !ROLES.has(m.role)) continue;
    const msg = { role: m.role, content: str(m.content, MAX_CONTENT) };
    if (m.role === "assistant") {
      if (m.stopped === true) msg.stopped = true;
      if (typeof m.error === "string" && m.error) msg.error = str(m.error, 4000);
      if (typeof m.finish === "string") msg.finish = str(m.finish, 40);
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

function loadStore() {
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
      for (const k of ["system", "temperature", "topP", "maxTokens", "seed"]) {
        if (typeof raw.settings[k] === "string") store.settings[k] = raw.settings[k].slice(0, MAX_CONTENT);
      }
    }
  }
  return store;
}

const store = loadStore();

function save() {
  try {
    localStorage.setItem(STORE_KEY, JSON.stringify(store));
  } catch (e) {
    notify("Could not save the conversations in this browser: " + e.message);
  }
}

function current() {
  let c = store.conversations.find((x) => x.id === store.current);
  if (!c) {
    c = store.conversations[0] || addConversation();
    store.current = c.id;
  }
  return c;
}

function addConversation() {
  const c = { id: newId(), title: "New chat", titleSet: false, updated: Date.now(), messages: [] };
  store.conversations.unshift(c);
  return c;
}

function titleFrom(messages) {
  const first = messages.find((m) => m.role === "user" && m.content.trim());
  if (!first) return "";
  const line = first.content.trim().split("\n")[0];
  return line.length > 48 ? line.slice(0, 47) + "…" : line;
}

// ---- server --------------------------------------------------------------------------

let keyPrompt = null;

/// fetch() with the API key; on a 401 asks for a key (once for all requests waiting) and
/// tries again.
async function api(path, options = {}) {
  for (let attempt = 0; ; attempt++) {
    const key = sessionStorage.getItem(API_KEY_KEY);
    const headers = new Headers(options.headers || {});
    if (key) headers.set("Authorization", "Bearer " + key);
    const resp = await fetch(path, { ...options, headers });
    if (resp.status !== 401 || attempt >= 5) return resp;
    await askKey(key ? "The server refused this key." : "");
  }
}

function askKey(error) {
  if (!keyPrompt) {
    keyPrompt = new Promise((resolve, reject) => {
      ui.keyError.textContent = error;
      ui.keyError.hidden = !error;
      ui.keyInput.value = "";
      const done = (ok) => {
        ui.keySave.removeEventListener("click", onSave);
        ui.keyCancel.removeEventListener("click", onCancel);
        ui.keyInput.removeEventListener("keydown", onKey);
        ui.keyDialog.removeEventListener("cancel", onCancel);
        if (ui.keyDialog.open) ui.keyDialog.close();
        keyPrompt = null;
        if (ok) resolve();
        else reject(new Error("no API key given"));
      };
      const onSave = () => {
        const k = ui.keyInput.value.trim();
        if (!k) {
          ui.keyError.textContent = "Enter the key the server was started with (--api-key).";
          ui.keyError.hidden = false;
          return;
        }
        sessionStorage.setItem(API_KEY_KEY, k);
        done(true);
      };
      const onCancel = (e) => {
        e.preventDefault();
        done(false);
      };
      const onKey = (e) => {
        if (e.key === "Enter") {
          e.preventDefault();
          onSave();
        }
      };
      ui.keySave.addEventListener("click", onSave);
      ui.keyCancel.addEventListener("click", onCancel);
      ui.keyInput.addEventListener("keydown", onKey);
      ui.keyDialog.addEventListener("cancel", onCancel);
      ui.keyDialog.showModal();
      ui.keyInput.focus();
    });
  }
  return keyPrompt;
}

/// A server error answer as one line of text: `message (code)`.
async function errorOf(resp) {
  let text = "";
  try {
    text = await resp.text();
    const e = JSON.parse(text).error;
    if (e && typeof e.message === "string") return describe(e, resp.status);
  } catch {
    // not JSON: the text itself
  }
  return `HTTP ${resp.status}` + (text ? ": " + text.slice(0, 500) : "");
}

function describe(e, status) {
  const code = typeof e.code === "string" ? e.code : typeof e.type === "string" ? e.type : "";
  return (status ? `HTTP ${status}: ` : "") + e.message + (code ? ` (${code})` : "");
}

async function loadServerInfo() {
  for (let tries = 0; tries < 60; tries++) {
    try {
      const [props, models] = await Promise.all([api("/props"), api("/v1/models")]);
      if (props.status === 503) {
        ui.modelName.textContent = "loading the model…";
        await new Promise((r) => setTimeout(r, 1000));
        continue;
      }
      if (!props.ok) throw new Error(await errorOf(props));
      const p = await props.json();
      server.nCtx = Number.isInteger(p.n_ctx) ? p.n_ctx : null;
      server.model = typeof p.model === "string" ? p.model : null;
      const params = (p.default_generation_settings && p.default_generation_settings.params) || {};
      server.defaults = params;
      if (models.ok) {
        const m = await models.json();
        const id = m && Array.isArray(m.data) && m.data[0] && m.data[0].id;
        if (typeof id === "string") server.model = id;
      }
      ui.modelName.textContent = server.model || "(unnamed model)";
      ui.ctxSize.textContent = server.nCtx === null ? "?" : String(server.nCtx);
      setPlaceholder(ui.temperature, params.temperature);
      setPlaceholder(ui.topP, params.top_p);
      setPlaceholder(ui.maxTokens, params.n_predict, "server default: ");
      updateCtxWarning();
      return;
    } catch (e) {
      ui.modelName.textContent = "(server unavailable)";
      notify("Could not read the model's details: " + e.message);
      return;
    }
  }
}

function setPlaceholder(input, value, prefix = "") {
  if (typeof value === "number") input.placeholder = prefix + String(value);
}

// ---- rendering -----------------------------------------------------------------------

function notify(text) {
  ui.noticeText.textContent = text;
  ui.notice.hidden = false;
}

function button(cls, label, title) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = cls;
  b.textContent = label;
  if (title) {
    b.title = title;
    b.setAttribute("aria-label", title);
  }
  return b;
}

function renderConversations() {
  const cur = current();
  const items = [...store.conversations].sort((a, b) => b.updated - a.updated);
  ui.conversations.replaceChildren(
    ...items.map((c) => {
      const li = document.createElement("li");
      li.className = "conv" + (c.id === cur.id ? " active" : "");
      li.dataset.id = c.id;
      const t = button("conv-title", c.title);
      t.title = c.title;
      if (c.id === cur.id) t.setAttribute("aria-current", "true");
      t.addEventListener("click", () => switchTo(c.id));
      const r = button("conv-rename small", "✎", "Rename");
      r.addEventListener("click", () => rename(c.id));
      const d = button("conv-delete small", "✕", "Delete");
      d.addEventListener("click", () => remove(c.id));
      li.append(t, r, d);
      return li;
    }),
  );
}

function renderMessages() {
  const conv = current();
  if (conv.messages.length === 0) {
    const p = document.createElement("p");
    p.className = "empty";
    p.textContent = "Type a message below to start.";
    ui.messages.replaceChildren(p);
  } else {
    ui.messages.replaceChildren(...conv.messages.map((m, i) => messageNode(conv, m, i)));
  }
  updateCtxWarning();
}

function messageNode(conv, m, i) {
  const node = document.createElement("article");
  node.className = "msg";
  node.dataset.role = m.role;
  node.dataset.index = String(i);
  const role = document.createElement("div");
  role.className = "msg-role";
  role.textContent = m.role === "assistant" ? "Assistant" : m.role === "user" ? "You" : "System";
  const body = document.createElement("div");
  body.className = "msg-body";
  renderMarkdown(m.content, body);
  node.append(role, body);
  const isStreaming = streaming && streaming.msg === m;
  if (isStreaming) node.dataset.streaming = "true";
  if (m.role === "assistant") {
    if (m.stopped) node.dataset.stopped = "true";
    if (m.error) {
      const err = document.createElement("div");
      err.className = "msg-error";
      err.setAttribute("role", "alert");
      err.textContent = m.error;
      node.append(err);
    }
    const foot = document.createElement("div");
    foot.className = "msg-foot";
    const stats = document.createElement("span");
    stats.className = "msg-stats";
    stats.textContent = isStreaming ? "" : statsText(m);
    foot.append(stats);
    if (m.stopped || m.finish === "length") {
      const note = document.createElement("span");
      note.className = "msg-note";
      note.textContent = m.stopped ? "stopped" : "cut off (max tokens or a full context)";
      foot.append(note);
    }
    const copy = button("msg-copy small", "Copy", "Copy the reply");
    copy.addEventListener("click", () => copyText(m.content, copy));
    foot.append(copy);
    if (i === conv.messages.length - 1 && !isStreaming) {
      const regen = button("msg-regen small", "Regenerate", "Generate this reply again");
      regen.disabled = !!streaming;
      regen.addEventListener("click", () => regenerate(conv));
      foot.append(regen);
    }
    node.append(foot);
  } else if (m.role === "user") {
    const foot = document.createElement("div");
    foot.className = "msg-foot";
    const edit = button("msg-edit small", "Edit", "Edit and resend");
    edit.disabled = !!streaming;
    edit.addEventListener("click", () => startEdit(conv, i, node));
    foot.append(edit);
    node.append(foot);
  }
  return node;
}

function statsText(m) {
  const s = m.stats;
  if (!s) return "";
  const parts = [];
  if (Number.isFinite(s.tps) && s.tps > 0) parts.push(s.tps.toFixed(1) + " tokens/s");
  if (Number.isFinite(s.total)) {
    let t = `${s.total} tokens used (${s.prompt} prompt + ${s.completion} reply)`;
    if (server.nCtx) t += ` of ${server.nCtx}`;
    parts.push(t);
  } else if (Number.isFinite(s.completion)) {
    parts.push(`${s.completion} tokens`);
  }
  return parts.join(" · ");
}

/// The share of the context the conversation used at its last reply with figures.
function ctxUsed(conv) {
  for (let i = conv.messages.length - 1; i >= 0; i--) {
    const m = conv.messages[i];
    if (m.role !== "assistant") continue;
    if (m.error && /context_length_exceeded/.test(m.error)) return { full: true };
    if (m.stats && Number.isFinite(m.stats.total)) return { total: m.stats.total };
  }
  return null;
}

function updateCtxWarning() {
  const used = ctxUsed(current());
  const n = server.nCtx;
  if (!used || !n) {
    ui.ctxWarning.hidden = true;
    return;
  }
  if (used.full) {
    ui.ctxWarning.textContent =
      "The conversation no longer fits the model's context: start a new chat, or edit an earlier message.";
    ui.ctxWarning.hidden = false;
    return;
  }
  const share = used.total / n;
  ui.ctxWarning.hidden = share < CTX_WARN;
  ui.ctxWarning.textContent =
    `This conversation uses ${used.total} of the model's ${n}-token context ` +
    `(${Math.round(share * 100)}%): replies may soon be cut short. Start a new chat to free it.`;
}

function renderAll() {
  renderConversations();
  renderMessages();
}

function setStreaming(on) {
  ui.messages.dataset.streaming = on ? "true" : "false";
  ui.send.disabled = on;
  ui.stop.hidden = !on;
  ui.stop.disabled = !on;
  for (const b of ui.messages.querySelectorAll(".msg-edit, .msg-regen")) b.disabled = on;
}

/// Re-renders the streaming reply's body (at most once a frame).
let frame = 0;
function refreshStreaming() {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    if (!streaming || streaming.conv.id !== store.current) return;
    const node = ui.messages.querySelector(`.msg[data-index="${streaming.index}"]`);
    if (!node) return;
    renderMarkdown(streaming.msg.content, node.querySelector(".msg-body"));
    const nearBottom = ui.messages.scrollHeight - ui.messages.scrollTop - ui.messages.clientHeight < 80;
    if (nearBottom) ui.messages.scrollTop = ui.messages.scrollHeight;
  });
}

function scrollToEnd() {
  ui.messages.scrollTop = ui.messages.scrollHeight;
}

// ---- chat ----------------------------------------------------------------------------

function readNumber(input, { integer = false, min = -Infinity, max = Infinity } = {}) {
  const v = input.value.trim();
  if (v === "") return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || (integer && !Number.isInteger(n)) || n < min || n > max) {
    throw new Error(`${input.labels[0].firstChild.textContent.trim()}: ${v} is not allowed`);
  }
  return n;
}

function requestBody(conv, upTo) {
  const messages = [];
  const system = ui.systemPrompt.value.trim();
  const history = conv.messages.slice(0, upTo);
  if (system && !(history[0] && history[0].role === "system")) {
    messages.push({ role: "system", content: system });
  }
  for (const m of history) {
    // A failed reply with no text is left out of what the model reads.
    if (m.role === "assistant" && !m.content) continue;
    messages.push({ role: m.role, content: m.content });
  }
  const body = { messages, stream: true, stream_options: { include_usage: true } };
  if (server.model) body.model = server.model;
  const t = readNumber(ui.temperature, { min: 0, max: 2 });
  if (t !== undefined) body.temperature = t;
  const p = readNumber(ui.topP, { min: 0, max: 1 });
  if (p !== undefined) body.top_p = p;
  const n = readNumber(ui.maxTokens, { integer: true, min: 1 });
  if (n !== undefined) body.max_tokens = n;
  const s = readNumber(ui.seed, { integer: true, min: 0, max: Number.MAX_SAFE_INTEGER });
  if (s !== undefined) body.seed = s;
  return body;
}

async function sendPrompt() {
  if (streaming) return;
  const text = ui.prompt.value;
  if (!text.trim()) return;
  const conv = current();
  conv.messages.push({ role: "user", content: text });
  if (!conv.titleSet) conv.title = titleFrom(conv.messages) || conv.title;
  ui.prompt.value = "";
  autoGrow();
  await generate(conv);
}

/// Streams a new assistant reply at the end of `conv`.
async function generate(conv) {
  const msg = { role: "assistant", content: "" };
  let body;
  try {
    body = requestBody(conv, conv.messages.length);
  } catch (e) {
    msg.error = e.message;
    conv.messages.push(msg);
    save();
    renderAll();
    return;
  }
  conv.messages.push(msg);
  conv.updated = Date.now();
  const controller = new AbortController();
  streaming = { controller, conv, msg, index: conv.messages.length - 1 };
  save();
  renderAll();
  setStreaming(true);
  scrollToEnd();
  const t0 = performance.now();
  let first = 0;
  let pieces = 0;
  try {
    const resp = await api("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!resp.ok) {
      msg.error = await errorOf(resp);
    } else {
      await readEvents(resp, (ev) => {
        if (ev.error) {
          msg.error = describe(ev.error, 0);
          return;
        }
        const choice = Array.isArray(ev.choices) ? ev.choices[0] : null;
        if (choice) {
          const piece = choice.delta && choice.delta.content;
          if (typeof piece === "string" && piece) {
            if (!first) first = performance.now();
            pieces++;
            msg.content += piece;
            refreshStreaming();
          }
          if (typeof choice.finish_reason === "string") msg.finish = choice.finish_reason;
        }
        if (ev.timings && Number.isFinite(ev.timings.predicted_per_second)) {
          msg.stats = { ...(msg.stats || {}), tps: ev.timings.predicted_per_second };
        }
        if (ev.usage && typeof ev.usage === "object") {
          msg.stats = {
            ...(msg.stats || {}),
            prompt: ev.usage.prompt_tokens,
            completion: ev.usage.completion_tokens,
            total: ev.usage.total_tokens,
          };
        }
      });
    }
  } catch (e) {
    if (e.name === "AbortError") {
      msg.stopped = true;
      // No figures come from the server for a stopped reply: the page's own count.
      const secs = first ? (performance.now() - first) / 1000 : 0;
      msg.stats = { completion: pieces };
      if (secs > 0 && pieces > 1) msg.stats.tps = (pieces - 1) / secs;
    } else {
      msg.error = "The request failed: " + e.message;
    }
  } finally {
    if (!msg.stats && pieces && !msg.error) {
      const secs = (performance.now() - (first || t0)) / 1000;
      msg.stats = { completion: pieces, tps: secs > 0 ? pieces / secs : undefined };
    }
    streaming = null;
    conv.updated = Date.now();
    save();
    setStreaming(false);
    renderAll();
    if (conv.id === store.current) scrollToEnd();
  }
}

/// Reads a server-sent event stream, handing each `data:` JSON payload to `onEvent`.
async function readEvents(resp, onEvent) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let data = [];
  const dispatch = () => {
    if (data.length === 0) return false;
    const payload = data.join("\n");
    data = [];
    if (payload === "[DONE]") return true;
    let ev;
    try {
      ev = JSON.parse(payload);
    } catch {
      return false;
    }
    if (ev && typeof ev === "object") onEvent(ev);
    return false;
  };
  for (;;) {
    const { value, done } = await reader.read();
    buf += decoder.decode(value || new Uint8Array(), { stream: !done });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (dispatch()) {
          await reader.cancel().catch(() => {});
          return;
        }
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      }
    }
    if (done) {
      dispatch();
      return;
    }
  }
}

function stop() {
  if (streaming) streaming.controller.abort();
}

async function regenerate(conv) {
  if (streaming) return;
  const last = conv.messages[conv.messages.length - 1];
  if (last && last.role === "assistant") conv.messages.pop();
  if (conv.messages.length === 0) return;
  await generate(conv);
}

function startEdit(conv, i, node) {
  if (streaming) return;
  const body = node.querySelector(".msg-body");
  const foot = node.querySelector(".msg-foot");
  const box = document.createElement("textarea");
  box.className = "msg-edit-box";
  box.value = conv.messages[i].content;
  box.setAttribute("aria-label", "Edit the message");
  const send = button("msg-edit-send small primary", "Send");
  const cancel = button("msg-edit-cancel small", "Cancel");
  const buttons = document.createElement("div");
  buttons.className = "msg-edit-buttons";
  buttons.append(send, cancel);
  body.replaceChildren(box, buttons);
  foot.hidden = true;
  const resend = async () => {
    if (streaming || !box.value.trim()) return;
    conv.messages[i].content = box.value;
    conv.messages.splice(i + 1);
    if (!conv.titleSet) conv.title = titleFrom(conv.messages) || conv.title;
    await generate(conv);
  };
  send.addEventListener("click", resend);
  cancel.addEventListener("click", () => renderMessages());
  box.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      resend();
    } else if (e.key === "Escape") {
      e.preventDefault();
      e.stopPropagation();
      renderMessages();
    }
  });
  box.focus();
}

async function copyText(text, b) {
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    // No clipboard API outside secure contexts: the older way.
    const t = document.createElement("textarea");
    t.value = text;
    t.className = "visually-hidden";
    document.body.append(t);
    t.select();
    try {
      ok = document.execCommand("copy");
    } catch {
      ok = false;
    }
    t.remove();
  }
  b.textContent = ok ? "Copied" : "Copy failed";
  setTimeout(() => {
    b.textContent = "Copy";
  }, 1500);
}

// ---- conversations -------------------------------------------------------------------

function switchTo(id) {
  store.current = id;
  save();
  renderAll();
  closeSidebar();
  setStreaming(!!streaming);
  scrollToEnd();
}

function rename(id) {
  const c = store.conversations.find((x) => x.id === id);
  if (!c) return;
  const name = window.prompt("Rename the conversation", c.title);
  if (name === null || !name.trim()) return;
  c.title = name.trim().slice(0, MAX_TITLE);
  c.titleSet = true;
  save();
  renderConversations();
}

function remove(id) {
  const c = store.conversations.find((x) => x.id === id);
  if (!c || !window.confirm(`Delete the conversation "${c.title}"?`)) return;
  if (streaming && streaming.conv === c) stop();
  store.conversations = store.conversations.filter((x) => x !== c);
  if (store.current === id) store.current = null;
  save();
  renderAll();
}

function exportCurrent() {
  const c = current();
  const data = {
    title: c.title,
    messages: c.messages.map((m) => ({ role: m.role, content: m.content })),
  };
  const blob = new Blob([JSON.stringify(data, null, 2)], { type: "application/json" });
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = (c.title.replace(/[^\w -]+/g, "").trim().slice(0, 60) || "conversation") + ".json";
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

async function importFile(file) {
  let parsed;
  try {
    parsed = JSON.parse(await file.text());
  } catch (e) {
    notify(`${file.name} is not JSON: ${e.message}`);
    return;
  }
  const list = parsed && Array.isArray(parsed.conversations) ? parsed.conversations : [parsed];
  const added = [];
  for (const c of list) {
    const clean = cleanConversation(c);
    if (!clean) continue;
    // A fresh id: an imported file must not replace a conversation already here.
    clean.id = newId();
    clean.updated = Date.now();
    added.push(clean);
  }
  if (added.length === 0) {
    notify(`${file.name} holds no conversation: expected {"title", "messages": [{"role", "content"}]} or {"conversations": [...]}.`);
    return;
  }
  store.conversations.unshift(...added);
  store.current = added[0].id;
  save();
  renderAll();
}

// ---- settings and layout -------------------------------------------------------------

const SETTINGS = [
  ["system", ui.systemPrompt],
  ["temperature", ui.temperature],
  ["topP", ui.topP],
  ["maxTokens", ui.maxTokens],
  ["seed", ui.seed],
];

function loadSettings() {
  for (const [k, input] of SETTINGS) {
    if (typeof store.settings[k] === "string") input.value = store.settings[k];
    input.addEventListener("input", () => {
      store.settings[k] = input.value;
      save();
    });
  }
}

function closeSidebar() {
  ui.sidebar.classList.remove("open");
  ui.toggleSidebar.setAttribute("aria-expanded", "false");
}

function autoGrow() {
  ui.prompt.style.height = "auto";
  ui.prompt.style.height = Math.min(ui.prompt.scrollHeight + 2, window.innerHeight * 0.4) + "px";
}

// ---- wiring --------------------------------------------------------------------------

ui.composer.addEventListener("submit", (e) => {
  e.preventDefault();
  sendPrompt();
});
ui.prompt.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.ctrlKey && !e.altKey && !e.metaKey && !e.isComposing) {
    e.preventDefault();
    sendPrompt();
  }
});
ui.prompt.addEventListener("input", autoGrow);
ui.stop.addEventListener("click", () => {
  stop();
  ui.prompt.focus();
});
document.addEventListener("keydown", (e) => {
  if (e.key !== "Escape" || ui.keyDialog.open) return;
  if (streaming) {
    e.preventDefault();
    stop();
  } else if (ui.sidebar.classList.contains("open")) {
    closeSidebar();
    ui.toggleSidebar.focus();
  }
});
ui.newConv.addEventListener("click", () => {
  const c = addConversation();
  switchTo(c.id);
  ui.prompt.focus();
});
ui.exportConv.addEventListener("click", exportCurrent);
ui.importConv.addEventListener("change", async () => {
  const files = [...ui.importConv.files];
  ui.importConv.value = "";
  for (const f of files) await importFile(f);
});
ui.toggleSidebar.addEventListener("click", () => {
  const open = ui.sidebar.classList.toggle("open");
  ui.toggleSidebar.setAttribute("aria-expanded", String(open));
  if (open) ui.newConv.focus();
});
ui.closeSidebar.addEventListener("click", () => {
  closeSidebar();
  ui.toggleSidebar.focus();
});
ui.toggleSettings.addEventListener("click", () => {
  ui.settings.hidden = !ui.settings.hidden;
  ui.toggleSettings.setAttribute("aria-expanded", String(!ui.settings.hidden));
});
ui.noticeClose.addEventListener("click", () => {
  ui.notice.hidden = true;
});
window.addEventListener("storage", (e) => {
  // Another tab changed the conversations: show them, unless this one is mid-reply.
  if (e.key !== STORE_KEY || streaming) return;
  const fresh = loadStore();
  store.conversations = fresh.conversations;
  if (!store.conversations.some((c) => c.id === store.current)) store.current = fresh.current;
  renderAll();
});

loadSettings();
renderAll();
ui.prompt.focus();
loadServerInfo();
