// The chat page of `bitnet serve`: the conversations (kept by store.js), replies streamed
// from /v1/chat/completions (through api.js, which also asks for the API key), the model's
// name and context from /v1/models and /props (a picker when the server serves several
// models, the choice kept with the settings), settings, and the page's controls. Every
// text shown (model output, stored and imported conversations, server errors) goes into the
// page as text nodes or through markdown.js, never as HTML.

import { api, describe, errorInfo, errorOf, readEvents } from "./api.js";
import { renderMarkdown } from "./markdown.js";
import { MAX_TITLE, STORE_KEY, cleanConversation, loadStore, newId, titleFrom } from "./store.js";

/// Share of the context at which the page warns.
const CTX_WARN = 0.8;
/// Tokens a character, before a reply has measured it (a first guess; a refusal corrects it).
const TOKENS_PER_CHAR = 0.3;
/// Tokens a message costs beside its text (the chat template's role markers).
const MESSAGE_OVERHEAD = 4;

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
  modelSelect: $("model-select"),
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
};

/// What the server told us: filled by loadServerInfo().
const server = { model: null, nCtx: null, defaults: {} };

/// The reply being streamed: { controller, conv, msg, index, node }.
let streaming = null;

// ---- storage -------------------------------------------------------------------------

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

// ---- server --------------------------------------------------------------------------

async function loadServerInfo() {
  for (let tries = 0; tries < 60; tries++) {
    try {
      const models = await api("/v1/models");
      const ids = models.ok ? modelIds(await models.json()) : [];
      const chosen = ids.includes(store.settings.model) ? store.settings.model : ids[0] || null;
      // One model: /props without a name, as a server of one model always answered it.
      const props = await api(ids.length > 1 ? propsPath(chosen) : "/props");
      if (props.status === 503) {
        ui.modelName.textContent = "loading the model…";
        await new Promise((r) => setTimeout(r, 1000));
        continue;
      }
      if (!props.ok) throw new Error(await errorOf(props));
      showPicker(ids, chosen);
      applyProps(await props.json(), chosen);
      return;
    } catch (e) {
      ui.modelName.textContent = "(server unavailable)";
      notify("Could not read the model's details: " + e.message);
      return;
    }
  }
}

/// The model ids of a /v1/models answer.
function modelIds(list) {
  if (!list || !Array.isArray(list.data)) return [];
  return list.data.map((m) => m && m.id).filter((id) => typeof id === "string");
}

function propsPath(model) {
  return model ? "/props?model=" + encodeURIComponent(model) : "/props";
}

/// The model picker: shown only when there is a choice.
function showPicker(ids, chosen) {
  ui.modelSelect.replaceChildren();
  for (const id of ids) {
    const o = document.createElement("option");
    o.value = id;
    o.textContent = id;
    ui.modelSelect.append(o);
  }
  const choice = ids.length > 1;
  ui.modelSelect.hidden = !choice;
  ui.modelName.hidden = choice;
  if (choice && chosen) ui.modelSelect.value = chosen;
}

/// What /props says of the model in use: its name, context and defaults.
function applyProps(p, chosen) {
  server.nCtx = Number.isInteger(p.n_ctx) ? p.n_ctx : null;
  server.model = chosen || (typeof p.model === "string" ? p.model : null);
  const params = (p.default_generation_settings && p.default_generation_settings.params) || {};
  server.defaults = params;
  ui.modelName.textContent = server.model || "(unnamed model)";
  ui.ctxSize.textContent = server.nCtx === null ? "?" : String(server.nCtx);
  setPlaceholder(ui.temperature, params.temperature);
  setPlaceholder(ui.topP, params.top_p);
  setPlaceholder(ui.maxTokens, params.n_predict);
  updateCtxWarning();
}

/// Another model picked: remembered, and its context read (the server loads it if need be).
async function pickModel() {
  const model = ui.modelSelect.value;
  store.settings.model = model;
  save();
  server.model = model;
  ui.ctxSize.textContent = "?";
  try {
    const props = await api(propsPath(model));
    if (!props.ok) throw new Error(await errorOf(props));
    if (ui.modelSelect.value === model) applyProps(await props.json(), model);
  } catch (e) {
    notify("Could not read the model's details: " + e.message);
  }
}

function setPlaceholder(input, value) {
  if (typeof value === "number") input.placeholder = String(value);
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
    const newlyDropped = (m.dropped || 0) - droppedBefore(conv, i);
    if (newlyDropped > 0) {
      const note = document.createElement("div");
      note.className = "msg-dropped";
      note.setAttribute("role", "note");
      const n = m.dropped;
      note.textContent =
        `The ${n} oldest message${n === 1 ? "" : "s"} of this conversation no longer ` +
        `fit the model's ${server.nCtx || "?"}-token context beside a reply: ` +
        "this reply and the ones after it were written without them.";
      node.insertBefore(note, body);
    }
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
      `The last request did not fit the model's ${n}-token context: start a new chat, ` +
      "edit an earlier message, or lower Max tokens.";
    ui.ctxWarning.hidden = false;
    return;
  }
  const share = used.total / n;
  ui.ctxWarning.hidden = share < CTX_WARN;
  ui.ctxWarning.textContent =
    `This conversation uses ${used.total} of the model's ${n}-token context ` +
    `(${Math.round(share * 100)}%): ` +
    "the oldest messages will be left out of what the model reads to make room " +
    "(the conversation says when). Start a new chat to keep them all.";
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

/// The reply's token budget: Max tokens, else the server's default.
function replyBudget() {
  const n = readNumber(ui.maxTokens, { integer: true, min: 1 });
  if (n !== undefined) return n;
  const d = server.defaults.n_predict;
  return Number.isInteger(d) && d > 0 ? d : Math.floor((server.nCtx || 0) / 8);
}

/// Messages before index `upTo` that an earlier reply already left out (what was dropped
/// stays dropped: the model's view of the conversation only moves forward).
function droppedBefore(conv, upTo) {
  let n = 0;
  for (let i = 0; i < upTo; i++) {
    const m = conv.messages[i];
    if (m.role === "assistant" && Number.isInteger(m.dropped)) n = Math.max(n, m.dropped);
  }
  return n;
}

/// Where the request starts once the oldest turn it holds is left out (a user message and
/// the replies after it; a leading system message always stays), or null when only the
/// message being answered would be left.
function dropTurn(conv, skip, upTo) {
  let i = skip;
  if (i === 0 && conv.messages[0] && conv.messages[0].role === "system") i = 1;
  if (i < upTo && conv.messages[i].role === "user") i++;
  while (i < upTo && conv.messages[i].role !== "user") i++;
  return i >= upTo - 1 ? null : i;
}

/// The messages a request sends, in the model's view: the system prompt, then the
/// conversation before `upTo` without its first `skip` messages.
function sentMessages(conv, upTo, skip) {
  return conv.messages
    .slice(0, upTo)
    .filter((m, i) => i >= skip || (i === 0 && m.role === "system"));
}

/// The last reply before `upTo` with token figures: where it is, the tokens its request
/// and its text took, the messages it left out, and the tokens a character it measured.
function lastMeasured(conv, upTo) {
  for (let i = upTo - 1; i >= 0; i--) {
    const m = conv.messages[i];
    if (m.role !== "assistant" || !m.stats || !Number.isFinite(m.stats.total)) continue;
    const dropped = m.dropped || 0;
    const chars =
      ui.systemPrompt.value.trim().length +
      sentMessages(conv, i, dropped).reduce((a, x) => a + x.content.length, 0) +
      m.content.length;
    if (chars === 0) continue;
    return { index: i, total: m.stats.total, dropped, rate: m.stats.total / chars };
  }
  return null;
}

/// How many of the oldest messages to leave out so that the request and its reply's budget
/// fit the context: the last reply's measured tokens, less the messages left out since, plus
/// the ones after it at the rate it measured. An estimate: a refusal still drops one more
/// turn (see generate).
function fitSkip(conv, upTo) {
  let skip = droppedBefore(conv, upTo);
  const n = server.nCtx;
  if (!n) return skip;
  const last = lastMeasured(conv, upTo);
  const rate = last ? last.rate : TOKENS_PER_CHAR;
  const cost = (m) => m.content.length * rate + MESSAGE_OVERHEAD;
  const system = ui.systemPrompt.value.trim();
  const need = (s) => {
    let t;
    if (last) {
      t = last.total;
      for (let i = last.dropped; i < s; i++) {
        if (!(i === 0 && conv.messages[0].role === "system")) t -= cost(conv.messages[i]);
      }
      for (let i = last.index + 1; i < upTo; i++) t += cost(conv.messages[i]);
    } else {
      t = (system ? system.length * rate + MESSAGE_OVERHEAD : 0) +
        sentMessages(conv, upTo, s).reduce((a, m) => a + cost(m), 0);
    }
    return t + replyBudget();
  };
  while (need(skip) > n) {
    const next = dropTurn(conv, skip, upTo);
    if (next === null) break;
    skip = next;
  }
  return skip;
}

function requestBody(conv, upTo, skip = 0) {
  const messages = [];
  const system = ui.systemPrompt.value.trim();
  const history = sentMessages(conv, upTo, skip);
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
  // The send button is disabled while the reply streams: keep the focus where typing goes.
  ui.prompt.focus();
  await generate(conv);
}

/// Streams a new assistant reply at the end of `conv`.
async function generate(conv) {
  const msg = { role: "assistant", content: "" };
  const upTo = conv.messages.length;
  let body;
  let skip = 0;
  try {
    skip = fitSkip(conv, upTo);
    body = requestBody(conv, upTo, skip);
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
    let resp;
    for (;;) {
      resp = await api("/v1/chat/completions", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (resp.ok) break;
      const err = await errorInfo(resp);
      // The estimate let through more than fits: leave out one more turn and ask again.
      const next = err.code === "context_length_exceeded" ? dropTurn(conv, skip, upTo) : null;
      if (next === null) {
        msg.error = err.text;
        break;
      }
      skip = next;
      body = requestBody(conv, upTo, skip);
    }
    if (resp.ok) {
      if (skip > 0) {
        msg.dropped = skip;
        renderAll(); // the note saying so, above the reply
      }
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
document.querySelector(".main").addEventListener("pointerdown", () => {
  if (ui.sidebar.classList.contains("open")) closeSidebar();
});
ui.closeSidebar.addEventListener("click", () => {
  closeSidebar();
  ui.toggleSidebar.focus();
});
ui.toggleSettings.addEventListener("click", () => {
  ui.settings.hidden = !ui.settings.hidden;
  ui.toggleSettings.setAttribute("aria-expanded", String(!ui.settings.hidden));
});
ui.modelSelect.addEventListener("change", pickModel);
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
