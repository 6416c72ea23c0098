// Talking to the server: the API key (asked for on a 401, once for all requests waiting,
// and kept for the tab in sessionStorage), server errors as one line of text, and the
// server-sent events of a streamed reply.

const API_KEY_KEY = "bitnet.webui.apiKey";
const $ = (id) => document.getElementById(id);
const ui = {
  prompt: $("prompt"),
  keyDialog: $("api-key-dialog"),
  keyInput: $("api-key"),
  keyError: $("api-key-error"),
  keySave: $("api-key-save"),
  keyCancel: $("api-key-cancel"),
};

let keyPrompt = null;

/// fetch() with the API key; on a 401 asks for a key (once for all requests waiting) and
/// tries again.
export async function api(path, options = {}) {
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
      const returnTo = document.activeElement;
      ui.keyError.textContent = error;
      ui.keyError.hidden = !error;
      ui.keyInput.value = "";
      const done = (ok) => {
        ui.keySave.removeEventListener("click", onSave);
        ui.keyCancel.removeEventListener("click", onCancel);
        ui.keyInput.removeEventListener("keydown", onKey);
        ui.keyDialog.removeEventListener("cancel", onCancel);
        if (ui.keyDialog.open) ui.keyDialog.close();
        // Back where the person was (the message box at first), focused anew once the
        // event is over: when a click on Save closes the dialog, Chromium restores the focus
        // in name only (keys reach the box but type nothing) until it is focused again.
        const back = returnTo && returnTo !== document.body && returnTo.isConnected ? returnTo : ui.prompt;
        setTimeout(() => {
          const at = document.activeElement;
          if (at !== back && at !== document.body && at !== null) return;
          back.blur();
          back.focus();
        }, 0);
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
export async function errorOf(resp) {
  return (await errorInfo(resp)).text;
}

/// A server error answer: its line of text and OpenAI's `code` (null when it has none).
export async function errorInfo(resp) {
  let text = "";
  try {
    text = await resp.text();
    const e = JSON.parse(text).error;
    if (e && typeof e.message === "string") {
      return { text: describe(e, resp.status), code: typeof e.code === "string" ? e.code : null };
    }
  } catch {
    // not JSON: the text itself
  }
  return { text: `HTTP ${resp.status}` + (text ? ": " + text.slice(0, 500) : ""), code: null };
}

export function describe(e, status) {
  const code = typeof e.code === "string" ? e.code : typeof e.type === "string" ? e.type : "";
  return (status ? `HTTP ${status}: ` : "") + e.message + (code ? ` (${code})` : "");
}

/// Reads a server-sent event stream, handing each `data:` JSON payload to `onEvent`.
export async function readEvents(resp, onEvent) {
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
