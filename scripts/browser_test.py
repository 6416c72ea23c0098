#!/usr/bin/env python3
"""The web page of `bitnet serve`, driven in a real browser (headless Chromium).

Run by scripts/browser-test.sh (which installs Chromium and chromedriver where missing).
Python's standard library only: a small client of chromedriver's W3C WebDriver HTTP API over
urllib, no Selenium. Starts `bitnet serve` on the shipped model (slowed with the hidden
--step-delay-ms, so a reply streams over a couple of seconds like a big model's) and goes
through the page:

  a  load      the model's name and context size show; / has a strict Content-Security-Policy
  b  stream    a reply grows over >= 3 snapshots while #messages is data-streaming="true";
               its figures show, and no context warning at half the context
  c  stop      #stop mid-reply: streaming ends, the reply is marked stopped, the server's
               bitnet_requests_processing goes back to 0 and its cancelled count up by 1
  d  reload    the conversation and its messages survive a reload
  e  switch    a new conversation (its long reply brings up #ctx-warning), then back to the
               first and again to the second
  g  shots     screenshots, desktop (1280x800) and phone (390 wide), of a Markdown reply, in
               target/browser-test/ (--docs-img docs/img: the README's, refreshed); at phone
               width nothing scrolls sideways and the composer is on screen; a dark system
               darkens the page (webui-desktop-dark.png)
  f  xss       typed (Shift+Enter between two lines) and imported payloads (<img onerror>,
               <script>, <svg onload>, javascript: and data: links) show as text, never run
  h  manage    export a conversation and import the file back (the same messages), rename
               and delete it, regenerate a reply, edit a question and resend it
  l  budget    Max tokens left empty: three turns, each request carrying the whole history
               and no max_tokens, all answered within the server's default reply budget
  k  api-key   a server with --api-key: the page asks for the key, keeps it in the tab's
               session storage only, and chats with it; Esc stops a reply
  n  models    a server of two models: #model-select lists both, the one picked (with a
               click) answers and goes as `model` with each request, and a reload keeps it

The page is reached only through the ids and data attributes it keeps stable for this test.
After every step, the page's uncaught errors and Content-Security-Policy refusals fail it.
Each step prints one line; the first failure prints what the page showed, saves
failure.png, and exits 1. The server, chromedriver and Chromium are stopped on every path;
every wait has a limit.
"""

import argparse
import base64
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

# The W3C key under which WebDriver hands out element references.
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
ENTER, SHIFT, RELEASE, ESCAPE = "\ue007", "\ue008", "\ue000", "\ue00c"
# A wait that takes longer than this is a failure, not a slow machine.
WAIT_S = 15
# The whole run: a safety net above the per-wait limits.
TOTAL_S = 150
API_KEY = "browser-test-key"


class Failure(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, headers=None, timeout=5):
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


def kill_group(proc, grace=3):
    """Stops a process started in its own group, and whatever it started in that group."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


# --- WebDriver ----------------------------------------------------------------------------

class WebDriverError(Exception):
    pass


class ChromeDriver:
    """The chromedriver process; it serves any number of browser sessions."""

    def __init__(self, path):
        port = free_port()
        # Its own process group: Chromium's processes join it, so one signal stops them all
        # even when a session was never deleted.
        self.proc = subprocess.Popen([path, f"--port={port}"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.time() + WAIT_S
        while True:
            try:
                if self.request("GET", "/status", timeout=2).get("ready"):
                    return
            except (OSError, WebDriverError):
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise Failure(f"chromedriver ({path}) did not start on port {port}")
            time.sleep(0.1)

    def request(self, method, path, body=None, timeout=30):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.load(r)["value"]
        except urllib.error.HTTPError as e:
            try:
                value = json.load(e)["value"]
                why = f"{value.get('error')}: {value.get('message', '').splitlines()[0]}"
            except (ValueError, KeyError, IndexError, AttributeError):
                why = f"HTTP {e.code}"
            raise WebDriverError(f"{method} {path}: {why}") from None

    def stop(self):
        kill_group(self.proc)


class Session:
    """One browser window, through the W3C commands this test needs."""

    def __init__(self, driver, chromium, width=1280, height=800, mobile=None, downloads=None):
        self.driver = driver
        args = ["--headless=new", f"--window-size={width},{height}",
                "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
                "--force-color-profile=srgb", "--hide-scrollbars"]
        if os.geteuid() == 0:
            # Chromium's sandbox refuses to run as root (containers, CI).
            args.append("--no-sandbox")
        options = {"args": args}
        if chromium:
            options["binary"] = chromium
        if mobile:
            options["mobileEmulation"] = {"deviceMetrics": mobile}
        if downloads:
            options["prefs"] = {"download.default_directory": downloads,
                                "download.prompt_for_download": False}
        caps = {"browserName": "chrome", "goog:chromeOptions": options,
                "timeouts": {"script": WAIT_S * 1000, "pageLoad": WAIT_S * 1000,
                             "implicit": 0}}
        value = driver.request("POST", "/session", {"capabilities": {"alwaysMatch": caps}},
                               timeout=60)
        self.id = value["sessionId"]
        self.version = value["capabilities"].get("browserVersion", "?")

    def cmd(self, method, path, body=None):
        if method == "POST" and body is None:
            body = {}
        return self.driver.request(method, f"/session/{self.id}{path}", body)

    def quit(self):
        try:
            self.driver.request("DELETE", f"/session/{self.id}", timeout=10)
        except (OSError, WebDriverError):
            pass

    def get(self, url):
        self.cmd("POST", "/url", {"url": url})

    def refresh(self):
        self.cmd("POST", "/refresh")

    def find_all(self, css):
        found = self.cmd("POST", "/elements", {"using": "css selector", "value": css})
        return [e[ELEMENT] for e in found]

    def find(self, css):
        found = self.find_all(css)
        if not found:
            raise Failure(f"no element matches {css!r}")
        return found[0]

    def click(self, el):
        self.cmd("POST", f"/element/{el}/click")

    def clear(self, el):
        self.cmd("POST", f"/element/{el}/clear")

    def send_keys(self, el, text):
        self.cmd("POST", f"/element/{el}/value", {"text": text})

    def type(self, text):
        """Types `text` on the keyboard: it goes wherever the page has put the focus."""
        actions = []
        for ch in text:
            actions += [{"type": "keyDown", "value": ch}, {"type": "keyUp", "value": ch}]
        self.cmd("POST", "/actions", {"actions": [{"type": "key", "id": "keyboard",
                                                   "actions": actions}]})
        self.cmd("DELETE", "/actions")

    def js(self, script, *args):
        """Runs `script` as a function body in the page; `arguments` holds `args`."""
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def screenshot(self, path):
        png = base64.b64decode(self.cmd("GET", "/screenshot"))
        with open(path, "wb") as f:
            f.write(png)
        return len(png)

    def set_rect(self, width, height):
        return self.cmd("POST", "/window/rect", {"width": width, "height": height})

    def url(self):
        return self.cmd("GET", "/url")

    def color_scheme(self, scheme):
        """Makes the page see the system's light or dark preference (Chrome's DevTools
        command, through chromedriver)."""
        self.cmd("POST", "/goog/cdp/execute", {
            "cmd": "Emulation.setEmulatedMedia",
            "params": {"features": [{"name": "prefers-color-scheme", "value": scheme}]}})

    def answer_dialog(self, text=None):
        """Answers the page's window.prompt/confirm (with `text`, if given); returns its
        message."""
        message = self.cmd("GET", "/alert/text")
        if text is not None:
            self.cmd("POST", "/alert/text", {"text": text})
        self.cmd("POST", "/alert/accept")
        return message

    def handles(self):
        return self.cmd("GET", "/window/handles")

    def problems(self):
        """The page's uncaught errors and security refusals since the last call: a blocked
        inline script or Trusted Types refusal means the renderer let markup through."""
        try:
            logs = self.cmd("POST", "/se/log", {"type": "browser"})
        except WebDriverError:
            return []  # a driver without Chrome's log endpoint
        bad = re.compile(r"Uncaught|Content Security Policy|Refused to|Trusted ?Type", re.I)
        return [e["message"] for e in logs
                if e.get("source") == "javascript" or bad.search(e.get("message", ""))]

    def wait(self, script, what, timeout=WAIT_S, *args):
        """Polls `script` until it returns something truthy; returns that."""
        deadline = time.time() + timeout
        while True:
            value = self.js(script, *args)
            if value:
                return value
            if time.time() > deadline:
                raise Failure(f"waited {timeout} s for {what}; the page shows: {page_state(self)}")
            time.sleep(0.05)


# --- the server ---------------------------------------------------------------------------

class Server:
    def __init__(self, binary, model, extra=()):
        cmd = [binary, "serve", "-m", model, "--port", "0", "-t", "1", "--no-pin",
               "--step-delay-ms", "10", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.log = []
        ready, _, _ = select.select([self.proc.stdout], [], [], WAIT_S)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("listening on http://"):
            self.stop()
            raise Failure(f"`{' '.join(cmd)}` did not start: {line!r} "
                          f"{self.proc.stderr.read()[-2000:]}")
        threading.Thread(target=self._read_log, daemon=True).start()
        self.url = line.split(" ", 2)[2].strip()
        self.headers = {"Authorization": f"Bearer {extra[-1]}"} if "--api-key" in extra else {}
        deadline = time.time() + WAIT_S
        while True:
            try:
                if http_get(self.url + "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            if time.time() > deadline:
                self.stop()
                raise Failure(f"{self.url}/health never answered 200")
            time.sleep(0.05)

    def _read_log(self):
        for line in self.proc.stderr:
            self.log.append(line.rstrip())

    def get_json(self, path):
        return json.loads(http_get(self.url + path, self.headers)[1])

    def metric(self, name):
        text = http_get(self.url + "/metrics", self.headers)[1].decode()
        m = re.search(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.M)
        if not m:
            raise Failure(f"/metrics has no {name} line")
        return float(m.group(1))

    def stop(self):
        kill_group(self.proc)


# --- the page -----------------------------------------------------------------------------

STATE_JS = """
const m = document.querySelector('#messages');
if (!m) return 'no #messages; body: ' + document.body.innerText.slice(0, 300);
const msgs = [...m.querySelectorAll('.msg')].map(e => e.dataset.role + ':' +
  JSON.stringify((e.querySelector('.msg-body') || e).textContent.slice(0, 60)));
return `data-streaming=${m.dataset.streaming} messages=[${msgs.join(', ')}] ` +
  `conversations=${document.querySelectorAll('#conversations .conv').length}`;
"""


def page_state(sess):
    try:
        return sess.js(STATE_JS)
    except (OSError, WebDriverError) as e:
        return f"(could not read the page: {e})"


MESSAGES_JS = """
return [...document.querySelectorAll('#messages .msg')].map(e =>
  [e.dataset.role, (e.querySelector('.msg-body') || e).textContent]);
"""

LAST_REPLY_JS = """
const b = document.querySelectorAll('#messages .msg[data-role="assistant"] .msg-body');
return b.length ? b[b.length - 1].textContent : null;
"""

# True once the reply to the message sent after `arguments[0]` messages shows some text.
REPLY_STARTED_JS = """
const m = document.querySelector('#messages');
const all = m.querySelectorAll('.msg');
const last = all[all.length - 1];
return m.dataset.streaming === 'true' && all.length >= arguments[0] + 2
  && last.dataset.role === 'assistant' && last.querySelector('.msg-body').textContent.length > 0;
"""

LAST_REPLY_STOPPED_JS = """
const a = document.querySelectorAll('#messages .msg[data-role="assistant"]');
const l = a[a.length - 1];
return [l.dataset.stopped, l.querySelector('.msg-body').textContent];
"""

EMPTY_CONV_JS = """
return document.querySelectorAll('#messages .msg:not([data-role="system"])').length === 0
  && (arguments[0] === undefined
      || document.querySelectorAll('#conversations .conv').length === arguments[0]);
"""

LAST_STATS_JS = """
const s = document.querySelectorAll('#messages .msg[data-role="assistant"] .msg-stats');
return s.length ? s[s.length - 1].textContent : null;
"""

# Records, on every change inside #messages, whether it streams and how long the last reply
# is: a reply from the shipped model takes a second or two, too fast to sample from outside.
OBSERVE_JS = """
window.__growth = [];
const m = document.querySelector('#messages');
if (window.__obs) window.__obs.disconnect();
window.__obs = new MutationObserver(() => {
  const b = m.querySelectorAll('.msg[data-role="assistant"] .msg-body');
  const n = b.length ? b[b.length - 1].textContent.length : -1;
  window.__growth.push([m.dataset.streaming, b.length, n]);
});
window.__obs.observe(m, {childList: true, subtree: true, characterData: true, attributes: true});
"""

# The unsafe things a rendered message could carry; returns what it finds.
XSS_FINDINGS_JS = """
const m = document.querySelector('#messages');
const found = [];
if (window.__xss !== undefined) found.push('window.__xss = ' + window.__xss);
for (const e of m.querySelectorAll('script, iframe, object, embed, form, base, meta, link'))
  found.push('<' + e.tagName.toLowerCase() + '>');
for (const e of m.querySelectorAll('.msg-body svg, .msg-body math'))
  found.push('<' + e.tagName.toLowerCase() + '> in a message');
for (const e of m.querySelectorAll('*'))
  for (const a of e.attributes)
    if (/^on/i.test(a.name)) found.push(`<${e.tagName.toLowerCase()} ${a.name}>`);
for (const a of m.querySelectorAll('a[href]'))
  if (!/^(https?|mailto):$/.test(a.protocol))
    found.push('<a href=' + JSON.stringify(a.getAttribute('href')) + '>');
for (const e of m.querySelectorAll('[src], [srcdoc], [formaction], [xlink\\\\:href]'))
  for (const n of ['src', 'srcdoc', 'formaction'])
    if (e.hasAttribute(n) && !/^https?:/i.test(e[n] || ''))
      found.push(`<${e.tagName.toLowerCase()} ${n}=${JSON.stringify(e.getAttribute(n))}>`);
return found;
"""


def ctx_warning(sess):
    """The text of #ctx-warning when it shows, else None."""
    return sess.js("""const w = document.querySelector('#ctx-warning');
        return w && !w.hidden && w.getClientRects().length ? w.textContent.trim() : null;""")


def messages(sess):
    return sess.js(MESSAGES_JS)


def send(sess, text):
    """Types `text` into #prompt and presses Enter; returns the number of messages before."""
    before = len(messages(sess))
    box = sess.find("#prompt")
    # Clicked first, as a person would (step k checks typing into the box the page focuses).
    sess.click(box)
    sess.clear(box)
    sess.send_keys(box, text + ENTER)
    return before


def wait_reply(sess, before, timeout=WAIT_S):
    """Waits until a reply to the message sent after `before` messages has finished."""
    sess.wait("""const m = document.querySelector('#messages');
        const all = m.querySelectorAll('.msg');
        return all.length >= arguments[0] + 2 && all[all.length - 1].dataset.role === 'assistant'
          && m.dataset.streaming === 'false'
          && all[all.length - 1].querySelector('.msg-body').textContent.length > 0;""",
              "the reply to end", timeout, before)
    reply = sess.js(LAST_REPLY_JS)
    # A reply that failed ends too, with an error in its place and no figures.
    stats = sess.js(LAST_STATS_JS)
    if not stats or not re.search(r"\d", stats):
        raise Failure(f"the reply ended without figures in .msg-stats ({stats!r}): {reply!r}")
    return reply


def check_turns(sess, n):
    """The page shows `n` turns (a message and its reply each), none of them failed."""
    roles = [m[0] for m in messages(sess)]
    if roles != ["user", "assistant"] * n:
        raise Failure(f"after {n} turns the page shows {messages(sess)}")
    errors = sess.js("return [...document.querySelectorAll('#messages .msg-error')]"
                     ".map(e => e.textContent)")
    if errors:
        raise Failure(f"a reply failed: {errors}")


def record_requests(sess):
    """From now on, keeps the body of every chat completion request the page sends."""
    sess.js("""window.__bodies = [];
        window.__fetch = window.fetch;
        window.fetch = (path, o) => {
          if (String(path).includes('chat/completions')) window.__bodies.push(o.body);
          return window.__fetch(path, o);
        };""")


def recorded_requests(sess):
    """The bodies kept since record_requests, parsed; the page's fetch is put back."""
    bodies = [json.loads(b) for b in sess.js("return window.__bodies")]
    sess.js("window.fetch = window.__fetch")
    return bodies


def set_input(sess, css, value):
    el = sess.find(css)
    # A collapsed settings panel hides its inputs: set them as a script would, with the
    # events a person's typing fires.
    sess.js("""const e = arguments[0]; e.value = arguments[1];
        e.dispatchEvent(new Event('input', {bubbles: true}));
        e.dispatchEvent(new Event('change', {bubbles: true}));""", {ELEMENT: el}, value)


def conv_ids(sess):
    return sess.js("return [...document.querySelectorAll('#conversations .conv')]"
                   ".map(e => [e.dataset.id, e.classList.contains('active')])")


def open_conv(sess, conv_id):
    active = ("return document.querySelector(`#conversations .conv[data-id=\"${arguments[0]}\"]`)"
              "?.classList.contains('active')")
    if sess.js(active, conv_id):
        return
    item = sess.find(f'#conversations .conv[data-id="{conv_id}"]')
    # The item itself or its title, whichever takes the click.
    titles = sess.find_all(f'#conversations .conv[data-id="{conv_id}"] .conv-title')
    sess.click(titles[0] if titles else item)
    sess.wait(active, f"conversation {conv_id} to be active", WAIT_S, conv_id)


def wait_page_ready(sess, server_model):
    return sess.wait("""const n = document.querySelector('#model-name');
        const c = document.querySelector('#ctx-size');
        return n && c && n.textContent.includes(arguments[0]) && /\\d/.test(c.textContent)
          && [n.textContent, c.textContent];""", "the model name and context size", WAIT_S,
                     server_model)


def import_file(sess, doc, tmpdir, name):
    path = os.path.join(tmpdir, name)
    with open(path, "w") as f:
        json.dump(doc, f)
    before = {c[0] for c in conv_ids(sess)}
    sess.send_keys(sess.find("input#import-conv"), path)
    sess.wait("return document.querySelectorAll('#conversations .conv').length > arguments[0]",
              f"{name} to be imported", WAIT_S, len(before))
    new = [c[0] for c in conv_ids(sess) if c[0] not in before]
    return new


# --- the steps ----------------------------------------------------------------------------

class Run:
    def __init__(self, args):
        self.args = args
        self.server = None
        self.key_server = None
        self.models_server = None
        self.driver = None
        self.sessions = []
        self.tmp = tempfile.mkdtemp(prefix="bitnet-browser-test-")
        self.downloads = os.path.join(self.tmp, "downloads")
        os.mkdir(self.downloads)
        self.model = None
        self.n_ctx = None
        self.first_conv = None
        self.first_msgs = None

    def session(self, **kw):
        s = Session(self.driver, self.args.chromium, **kw)
        self.sessions.append(s)
        return s

    def close(self):
        for s in self.sessions:
            s.quit()
        for thing in (self.driver, self.server, self.key_server, self.models_server):
            if thing:
                thing.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def step_a_load(self, sess):
        self.model = self.server.get_json("/v1/models")["data"][0]["id"]
        self.n_ctx = self.server.get_json("/props")["n_ctx"]
        try:
            with urllib.request.urlopen(self.server.url + "/", timeout=5) as r:
                csp = r.headers.get("Content-Security-Policy", "")
        except urllib.error.HTTPError as e:
            raise Failure(f"GET / answered {e.code}, not the page") from None
        script_src = re.search(r"(?:^|;)\s*script-src([^;]*)", csp)
        if not script_src or "unsafe-inline" in csp or "unsafe-eval" in csp:
            raise Failure(f"/ has no strict Content-Security-Policy: {csp!r}")
        sess.get(self.server.url + "/")
        name, ctx = wait_page_ready(sess, self.model)
        if str(self.n_ctx) not in ctx.replace(",", "").replace(" ", ""):
            raise Failure(f"#ctx-size shows {ctx!r}, /props has n_ctx {self.n_ctx}")
        if not sess.find_all("#messages"):
            raise Failure("the page has no #messages")
        return f"#model-name {name.strip()!r}, #ctx-size {ctx.strip()!r}"

    def step_b_stream(self, sess):
        # The context is 256 tokens: room for this reply and the start of the next.
        set_input(sess, "#max-tokens", "100")
        set_input(sess, "#seed", "1")
        sess.js(OBSERVE_JS)
        t0 = time.time()
        before = send(sess, "Tell me a long story, good sir.")
        reply = wait_reply(sess, before)
        took = time.time() - t0
        growth = sess.js("window.__obs.disconnect(); return window.__growth")
        # The lengths the last reply showed while streaming, in order; a Markdown renderer
        # may briefly shorten the text (a closed `**`), so count new highs.
        lens = [g[2] for g in growth if g[0] == "true" and g[1] > before // 2 and g[2] > 0]
        highs, top = [], -1
        for n in lens:
            if n > top:
                highs.append(n)
                top = n
        if len(highs) < 3:
            raise Failure(f"the reply grew through {len(highs)} lengths while streaming "
                          f"(need >= 3): {highs[:20]}; {len(growth)} mutations recorded")
        if len(reply) < highs[-1]:
            raise Failure(f"the final reply ({len(reply)} chars) is shorter than it was "
                          f"while streaming ({highs[-1]})")
        stats = sess.js(LAST_STATS_JS)
        if (warning := ctx_warning(sess)):
            raise Failure(f"#ctx-warning shows at about half the context: {warning!r}")
        return (f"reply grew through {len(highs)} lengths ({highs[0]}..{highs[-1]} chars) in "
                f"{took:.1f} s; stats {stats.strip()!r}")

    def step_c_stop(self, sess):
        cancelled = self.server.metric("bitnet_requests_cancelled_total")
        before = send(sess, "Speak again, and at length.")
        sess.wait(REPLY_STARTED_JS, "the second reply to start", WAIT_S, before)
        busy = self.server.metric("bitnet_requests_processing")
        if not sess.find_all("button#stop"):
            raise Failure("no button#stop while streaming")
        sess.click(sess.find("button#stop"))
        t0 = time.time()
        sess.wait("return document.querySelector('#messages').dataset.streaming === 'false'",
                  "data-streaming to be false after #stop", 5)
        last = sess.js(LAST_REPLY_STOPPED_JS)
        if last[0] != "true":
            raise Failure(f"the stopped reply has data-stopped={last[0]!r}, not 'true'")
        if not last[1]:
            raise Failure("the stopped reply lost its text")
        if busy < 1:
            raise Failure("bitnet_requests_processing was 0 while the page streamed")
        deadline = time.time() + 5
        while (n := self.server.metric("bitnet_requests_processing")) != 0:
            if time.time() > deadline:
                raise Failure(f"bitnet_requests_processing is still {n} 5 s after #stop")
            time.sleep(0.05)
        freed = time.time() - t0
        # Finished is not stopped: the server must have cancelled the request, not run it out.
        if (n := self.server.metric("bitnet_requests_cancelled_total")) != cancelled + 1:
            raise Failure(f"bitnet_requests_cancelled_total went {cancelled:g} -> {n:g} over "
                          f"the stop, not up by 1: the request was not cancelled")
        self.first_msgs = messages(sess)
        return (f"stopped after {len(last[1])} chars; data-stopped=true; "
                f"bitnet_requests_processing {busy:g} -> 0 in {freed:.2f} s, "
                f"bitnet_requests_cancelled_total +1")

    def step_d_reload(self, sess):
        convs = conv_ids(sess)
        self.first_conv = next(c[0] for c in convs if c[1])
        sess.refresh()
        wait_page_ready(sess, self.model)
        sess.wait("return document.querySelectorAll('#messages .msg').length >= arguments[0]",
                  "the messages after the reload", WAIT_S, len(self.first_msgs))
        after = messages(sess)
        if after != self.first_msgs:
            raise Failure(f"after the reload the messages are {after}, before {self.first_msgs}")
        if [c[0] for c in conv_ids(sess)] != [c[0] for c in convs]:
            raise Failure(f"after the reload the conversations are {conv_ids(sess)}, "
                          f"before {convs}")
        return f"{len(convs)} conversation(s), {len(after)} messages kept"

    def step_e_switch(self, sess):
        sess.click(sess.find("button#new-conv"))
        sess.wait(EMPTY_CONV_JS, "an empty second conversation", WAIT_S, 2)
        second = next(c[0] for c in conv_ids(sess) if c[1])
        if second == self.first_conv:
            raise Failure("#new-conv left the first conversation active")
        # 200 tokens: over 80% of the 256-token context, so the warning must show.
        set_input(sess, "#max-tokens", "200")
        before = send(sess, "A second conversation.")
        wait_reply(sess, before)
        set_input(sess, "#max-tokens", "100")
        second_msgs = messages(sess)
        stats = sess.js(LAST_STATS_JS)
        if not (warning := ctx_warning(sess)):
            raise Failure(f"no #ctx-warning with the context nearly full ({stats.strip()!r})")
        open_conv(sess, self.first_conv)
        sess.wait("return document.querySelectorAll('#messages .msg').length === arguments[0]",
                  "the first conversation's messages", WAIT_S, len(self.first_msgs))
        if messages(sess) != self.first_msgs:
            raise Failure(f"the first conversation shows {messages(sess)}")
        open_conv(sess, second)
        sess.wait("return document.querySelectorAll('#messages .msg').length === arguments[0]",
                  "the second conversation's messages", WAIT_S, len(second_msgs))
        if messages(sess) != second_msgs:
            raise Failure(f"the second conversation shows {messages(sess)}, "
                          f"it had {second_msgs}")
        return (f"new conversation; first (4 messages) and second (2) shown in turn; "
                f"#ctx-warning at {stats.split('·')[-1].strip()!r}")

    def step_f_xss(self, sess):
        # A conversation of its own: the first two fill the small context.
        sess.click(sess.find("button#new-conv"))
        sess.wait(EMPTY_CONV_JS, "an empty new conversation", WAIT_S)
        typed = '<img src=x onerror="window.__xss=1">'
        link = "[click](javascript:window.__xss=2)"
        box = sess.find("#prompt")
        sess.clear(box)
        sess.send_keys(box, typed + SHIFT + ENTER + RELEASE + link)
        value = sess.js("return document.querySelector('#prompt').value")
        if value != typed + "\n" + link:
            raise Failure(f"Shift+Enter should add a newline: #prompt holds {value!r}")
        before = len(messages(sess))
        sess.send_keys(box, ENTER)
        wait_reply(sess, before)
        time.sleep(0.3)  # an onerror would have run by now
        if (found := sess.js(XSS_FINDINGS_JS)):
            raise Failure(f"unsafe content in the page after the typed payload: {found}")
        shown = messages(sess)[before][1]
        if "<img src=x onerror=" not in shown:
            raise Failure(f"the typed payload is not shown as text: {shown!r}")
        conv = {"title": "<img src=x onerror=window.__xss=6> imported",
                "messages": [
                    {"role": "system", "content": "<script>window.__xss=7</script>system"},
                    {"role": "user", "content": "<script>window.__xss=3</script>"},
                    {"role": "assistant", "content": "<img src=x onerror=window.__xss=4>"},
                    {"role": "user", "content": "<svg onload=window.__xss=5>"},
                    {"role": "assistant",
                     "content": "[js](javascript:window.__xss=8) and "
                                "[data](data:text/html,<script>parent.__xss=9</script>) and "
                                "<a href=\"javascript:window.__xss=10\">raw</a> and "
                                "[ok](https://example.com/)"},
                    {"role": "user", "content": "```html\n<script>window.__xss=11</script>\n```"},
                ]}
        new = import_file(sess, conv, self.tmp, "xss.json")
        if len(new) != 1:
            raise Failure(f"importing one conversation added {len(new)}")
        open_conv(sess, new[0])
        sess.wait("return document.querySelectorAll('#messages .msg').length >= 5",
                  "the imported messages", WAIT_S)
        time.sleep(0.3)  # an onerror or onload would have run by now
        found = sess.js(XSS_FINDINGS_JS)
        if found or sess.js("return document.querySelector('#conversations .conv img, "
                            "#conversations .conv script') !== null"):
            raise Failure(f"unsafe content in the page: {found}")
        text = sess.js("return document.querySelector('#messages').textContent")
        for literal in ("<script>window.", "<img src=x onerror=", "<svg onload="):
            if literal not in text:
                raise Failure(f"the imported payload {literal!r} is not shown as text: "
                              f"{text[:400]!r}")
        title = sess.js("return document.querySelector('#conversations .conv.active').textContent")
        if "<img src=x" not in title:
            raise Failure(f"the imported title is not shown as text: {title!r}")
        page = sess.url()
        clicked = 0
        for a in sess.find_all("#messages .msg-body a"):
            href = sess.js("return arguments[0].getAttribute('href')", {ELEMENT: a})
            if href and href.startswith("https://example.com"):
                continue  # a good link: following it would leave the page offline
            sess.click(a)
            clicked += 1
            time.sleep(0.1)
            if sess.url() != page:
                raise Failure(f"clicking a link with href={href!r} navigated to {sess.url()}")
            if sess.js("return window.__xss") is not None:
                raise Failure(f"clicking a link with href={href!r} ran a script")
        if len(sess.handles()) != 1:
            raise Failure("clicking the links opened another window")
        return (f"typed and imported payloads shown as text, none ran; {clicked} "
                f"link(s) clicked harmlessly")

    def step_h_manage(self, sess):
        # Export the first conversation, and import the file back: the same messages.
        open_conv(sess, self.first_conv)
        sess.wait("return document.querySelectorAll('#messages .msg').length === arguments[0]",
                  "the first conversation's messages", WAIT_S, len(self.first_msgs))
        sess.click(sess.find("button#export-conv"))
        deadline = time.time() + WAIT_S
        while not (files := [f for f in os.listdir(self.downloads) if f.endswith(".json")]):
            if time.time() > deadline:
                raise Failure(f"#export-conv downloaded no .json file in {WAIT_S} s "
                              f"(found {os.listdir(self.downloads)})")
            time.sleep(0.1)
        exported = os.path.join(self.downloads, files[0])
        with open(exported) as f:
            doc = json.load(f)
        roles = [m["role"] for m in doc["messages"]]
        if roles != [m[0] for m in self.first_msgs]:
            raise Failure(f"the export has roles {roles}, the page {self.first_msgs}")
        before = {c[0] for c in conv_ids(sess)}
        sess.send_keys(sess.find("input#import-conv"), exported)
        sess.wait("return document.querySelectorAll('#conversations .conv').length > arguments[0]",
                  "the exported file to import", WAIT_S, len(before))
        copy = next(c[0] for c in conv_ids(sess) if c[0] not in before)
        open_conv(sess, copy)
        sess.wait("return document.querySelectorAll('#messages .msg').length === arguments[0]",
                  "the re-imported messages", WAIT_S, len(self.first_msgs))
        if messages(sess) != self.first_msgs:
            raise Failure(f"exported and imported back, the conversation shows {messages(sess)}")

        # Rename the copy (window.prompt), then delete it (window.confirm).
        new_title = "Renamed by the test"
        sess.click(sess.find(f'#conversations .conv[data-id="{copy}"] .conv-rename'))
        sess.answer_dialog(new_title)
        sess.wait("return document.querySelector(`#conversations .conv[data-id=\"${arguments[0]}\"]"
                  " .conv-title`).textContent.trim() === arguments[1]",
                  "the new title", WAIT_S, copy, new_title)
        sess.click(sess.find(f'#conversations .conv[data-id="{copy}"] .conv-delete'))
        question = sess.answer_dialog()
        if new_title not in question:
            raise Failure(f"deleting asks {question!r}, without the conversation's title")
        sess.wait("return !document.querySelector("
                  "`#conversations .conv[data-id=\"${arguments[0]}\"]`)",
                  "the deleted conversation to leave the list", WAIT_S, copy)

        # Regenerate a reply, then edit the question and resend it.
        sess.click(sess.find("button#new-conv"))
        sess.wait(EMPTY_CONV_JS, "an empty new conversation", WAIT_S)
        wait_reply(sess, send(sess, "Once more, briefly."))
        sess.js(OBSERVE_JS)
        sess.click(sess.find("#messages .msg[data-role='assistant'] .msg-regen"))
        sess.wait("return window.__growth.some(g => g[0] === 'true')",
                  "the regenerated reply to stream", WAIT_S)
        wait_reply(sess, 0)
        if len(messages(sess)) != 2:
            raise Failure(f"regenerating left {messages(sess)}, not one question and one reply")
        sess.click(sess.find("#messages .msg[data-role='user'] .msg-edit"))
        box = sess.find("#messages .msg[data-role='user'] .msg-edit-box")
        sess.clear(box)
        edited = "Edited, then resent."
        sess.send_keys(box, edited)
        sess.js(OBSERVE_JS)
        sess.click(sess.find("#messages .msg[data-role='user'] .msg-edit-send"))
        sess.wait("return window.__growth.some(g => g[0] === 'true')",
                  "the reply to the edited message to stream", WAIT_S)
        wait_reply(sess, 0)
        after = messages(sess)
        if len(after) != 2 or after[0] != ["user", edited]:
            raise Failure(f"after edit-and-resend the conversation shows {after}")
        sess.js("window.__obs.disconnect()")
        return (f"export/import round trip of {len(self.first_msgs)} messages; rename; delete; "
                f"regenerate; edit and resend")

    SHOWCASE = {"title": "Calling the server", "messages": [
        {"role": "user", "content": "How do I call this server from Python?"},
        {"role": "assistant", "content":
            "The server speaks the **OpenAI API**, so any client works. With the standard "
            "library only:\n\n"
            "```python\nimport json, urllib.request\n\n"
            "body = {\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}\n"
            "req = urllib.request.Request(\"http://localhost:8080/v1/chat/completions\",\n"
            "                             data=json.dumps(body).encode())\n"
            "print(json.load(urllib.request.urlopen(req)))\n```\n\n"
            "Things to know:\n\n"
            "1. `stream: true` sends the reply as *server-sent events*.\n"
            "2. `max_tokens` caps the reply; the context is shared by the whole chat.\n"
            "3. With `--api-key`, send `Authorization: Bearer KEY`.\n\n"
            "See the [OpenAI API reference](https://platform.openai.com/docs/api-reference) "
            "for the rest."},
    ]}

    def showcase(self, sess, name):
        """A screenshot of a Markdown reply: imported, as the shipped model writes none and
        its 256-token context holds no more than this one (it is never sent to it)."""
        new = import_file(sess, self.SHOWCASE, self.tmp, "showcase.json")
        open_conv(sess, new[0])
        sess.wait("return document.querySelectorAll('#messages .msg').length === 2",
                  "the imported Markdown conversation", WAIT_S)
        rendered = sess.js("""const b = document.querySelectorAll('#messages .msg-body')[1];
            return ['pre', 'strong', 'em', 'ol li', 'code', 'a[href^="https:"]']
              .filter(css => !b.querySelector(css));""")
        if rendered:
            html = sess.js("return document.querySelectorAll('#messages .msg-body')[1].innerHTML")
            raise Failure(f"the Markdown reply lacks {rendered}; it is rendered as {html[:300]!r}")
        sess.js("document.querySelector('#messages .msg').scrollIntoView({block: 'start'})")
        time.sleep(0.2)
        path = os.path.join(self.args.out_dir, name)
        size = sess.screenshot(path)
        return path, size

    def step_g_shots(self, sess):
        # The window's size counts its (invisible) frame: size it so the page gets 1280x800.
        frame = sess.js("return [outerWidth - innerWidth, outerHeight - innerHeight]")
        sess.set_rect(1280 + frame[0], 800 + frame[1])
        desk, dsize = self.showcase(sess, "webui-desktop.png")
        # Dark follows the system: the background darkens with it.
        lightness = ("const c = getComputedStyle(document.body).backgroundColor.match(/\\d+/g)"
                     ".slice(0, 3).map(Number); return (c[0] + c[1] + c[2]) / 3;")
        light = sess.js(lightness)
        sess.color_scheme("dark")
        dark = sess.js(lightness)
        sess.screenshot(os.path.join(self.args.out_dir, "webui-desktop-dark.png"))
        sess.color_scheme("light")
        if not (light > 160 and dark < 96):
            raise Failure(f"the page's background is {light:.0f}/255 light with a light system "
                          f"and {dark:.0f}/255 with a dark one")
        phone = self.session(mobile={"width": 390, "height": 844, "pixelRatio": 2})
        phone.get(self.server.url + "/")
        wait_page_ready(phone, self.model)
        width = phone.js("return [window.innerWidth, document.documentElement.scrollWidth]")
        if width[0] != 390 or width[1] > width[0]:
            raise Failure(f"at phone width the viewport is {width[0]} px wide and the page "
                          f"{width[1]} px: it scrolls sideways")
        path, psize = self.showcase(phone, "webui-phone.png")
        off = phone.js("""return ['#prompt', '#send', '#messages'].filter(css => {
            const r = document.querySelector(css).getBoundingClientRect();
            return !(r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= innerWidth + 0.5
                     && r.top < innerHeight && r.bottom <= innerHeight + 0.5);
        });""")
        if off:
            raise Failure(f"at phone width {off} are not wholly on the screen")
        if self.args.docs_img:
            for p in (desk, path):
                shutil.copyfile(p, os.path.join(self.args.docs_img, os.path.basename(p)))
        if (problems := phone.problems()):
            raise Failure(f"the page logged at phone width: {problems}")
        phone.quit()
        self.sessions.remove(phone)
        return (f"{desk} ({dsize // 1024} KiB), {path} ({psize // 1024} KiB); dark system: "
                f"background {light:.0f} -> {dark:.0f}/255")

    def step_l_budget(self, sess):
        # The page with Max tokens left empty sends no max_tokens: the server's default reply
        # budget (/props' n_predict, the field's placeholder) keeps a three-turn
        # conversation whole in the 256-token context, every request carrying the history.
        budget = self.server.get_json("/props")["default_generation_settings"]["params"][
            "n_predict"]
        set_input(sess, "#max-tokens", "")
        shown = sess.js("return document.querySelector('#max-tokens').placeholder")
        if shown != str(budget):
            raise Failure(f"#max-tokens shows the placeholder {shown!r}, /props has n_predict "
                          f"{budget}")
        sess.click(sess.find("button#new-conv"))
        sess.wait(EMPTY_CONV_JS, "an empty new conversation", WAIT_S)
        record_requests(sess)
        turns = ["Who art thou?", "Speak of love.", "Farewell, good friend."]
        for text in turns:
            wait_reply(sess, send(sess, text))
        bodies = recorded_requests(sess)
        if len(bodies) != 3 or any("max_tokens" in b for b in bodies):
            raise Failure(f"the page sent {bodies}: three requests without max_tokens expected")
        if [len(b["messages"]) for b in bodies] != [1, 3, 5]:
            raise Failure(f"the requests carried {[len(b['messages']) for b in bodies]} "
                          f"messages, not the whole history (1, 3, 5)")
        check_turns(sess, 3)
        stats = sess.js(LAST_STATS_JS)
        reply = re.search(r"\+ (\d+) reply", stats)
        if not reply or int(reply.group(1)) > budget:
            raise Failure(f"the last reply's figures {stats!r} are not within the budget {budget}")
        return f"3 turns, 6 messages, no max_tokens sent (budget {budget}); {stats.strip()!r}"

    def step_m_small_context(self, sess):
        # Replies of up to 80 tokens in the shipped model's 256-token context: by the third
        # turn the whole history and a reply's budget no longer fit. The page leaves the
        # oldest turns out of what it sends (saying so in the conversation) and the fifth
        # message is answered like the first.
        set_input(sess, "#max-tokens", "80")
        sess.click(sess.find("button#new-conv"))
        sess.wait(EMPTY_CONV_JS, "an empty new conversation", WAIT_S)
        record_requests(sess)
        turns = ["Who art thou?", "Speak of love.", "What of the king?", "Tell me of war.",
                 "Farewell, good friend."]
        for text in turns:
            wait_reply(sess, send(sess, text))
        bodies = recorded_requests(sess)
        set_input(sess, "#max-tokens", "")
        check_turns(sess, 5)
        sent = [[m["content"] for m in b["messages"] if m["role"] == "user"] for b in bodies]
        if [s[-1] for s in sent] != turns:
            raise Failure(f"the requests asked {[s[-1] for s in sent]}, not {turns}")
        if turns[0] in sent[-1]:
            raise Failure(f"the fifth request still carried the first message: {bodies[-1]}")
        if any(b["max_tokens"] != 80 for b in bodies):
            raise Failure("a request did not carry max_tokens 80")
        # What was left out stays left out, and the conversation says so.
        firsts = [turns.index(s[0]) for s in sent]
        if firsts != sorted(firsts):
            raise Failure(f"the requests' first messages went back: {firsts}")
        notes = sess.js("return [...document.querySelectorAll('#messages .msg-dropped')]"
                        ".map(e => e.textContent)")
        if not notes or not all("256-token context" in n for n in notes):
            raise Failure(f"no note in the conversation saying what was left out: {notes}")
        stats = sess.js(LAST_STATS_JS)
        total = re.search(r"(\d+) tokens used", stats)
        if not total or int(total.group(1)) > 256:
            raise Failure(f"the last reply's figures {stats!r}")
        return (f"5 turns answered; the requests carried {[len(b['messages']) for b in bodies]} "
                f"messages; {len(notes)} note(s): {notes[-1]!r}")

    def step_k_api_key(self, _sess):
        self.key_server = Server(self.args.bin, self.args.model, ("--api-key", API_KEY))
        model = self.key_server.get_json("/v1/models")["data"][0]["id"]
        sess = self.session()
        dialog_open = "return document.querySelector('dialog#api-key-dialog').open"
        sess.get(self.key_server.url + "/")
        sess.wait(dialog_open, "dialog#api-key-dialog to open", WAIT_S)
        # From the keyboard alone: a wrong key and Enter, the right one, then a message.
        if (focused := sess.js("return document.activeElement.id")) != "api-key":
            raise Failure(f"the key dialog opened with the focus on {focused!r}, "
                          f"not its input#api-key")
        sess.type("wrong-key" + ENTER)
        sess.wait("return document.querySelector('dialog#api-key-dialog').open && "
                  "JSON.stringify(sessionStorage).includes('wrong-key') && "
                  "document.activeElement.id === 'api-key'",
                  "the key dialog to ask again after a wrong key", WAIT_S)
        sess.type(API_KEY + ENTER)
        wait_page_ready(sess, model)
        if sess.js(dialog_open):
            raise Failure("the key dialog stays open after the key was saved")
        self.typing_reaches_prompt(sess, "entered with Enter")
        set_input(sess, "#max-tokens", "60")
        # Esc stops a reply.
        before = send(sess, "Hello with a key.")
        sess.wait(REPLY_STARTED_JS, "the reply to start", WAIT_S, before)
        sess.type(ESCAPE)
        sess.wait("return document.querySelector('#messages').dataset.streaming === 'false'",
                  "data-streaming to be false after Esc", 5)
        stopped = sess.js(LAST_REPLY_STOPPED_JS)[0]
        if stopped != "true":
            raise Failure(f"after Esc the reply has data-stopped={stopped!r}, not 'true'")
        before = send(sess, "Again, to the end.")
        reply = wait_reply(sess, before)
        stored = sess.js("return JSON.stringify(sessionStorage).includes(arguments[0])",
                         API_KEY)
        if not stored:
            raise Failure("the key is not kept in sessionStorage")
        local = sess.js("return JSON.stringify(localStorage).includes(arguments[0])", API_KEY)
        if local:
            raise Failure("the key was written to localStorage (it must stay in the session)")
        # With the mouse: a new tab's session (no key yet), the key, a click on Save.
        sess.js("sessionStorage.clear()")
        sess.refresh()
        sess.wait(dialog_open, "dialog#api-key-dialog to open again", WAIT_S)
        sess.send_keys(sess.find("input#api-key"), API_KEY)
        sess.click(sess.find("button#api-key-save"))
        wait_page_ready(sess, model)
        self.typing_reaches_prompt(sess, "saved with a click on Save")
        if (problems := sess.problems()):
            raise Failure(f"the page logged: {problems}")
        # On a failure, main() takes a screenshot of this session before closing it.
        sess.quit()
        self.sessions.remove(sess)
        self.key_server.stop()
        self.key_server = None
        return (f"a wrong key asked again; Enter and Save both close the dialog; Esc stopped a "
                f"reply; a reply of {len(reply)} chars with the key")

    def step_n_models(self, _sess):
        tiny = os.path.join(self.tmp, "tiny.gguf")
        subprocess.run([self.args.bin, "gen-model", "--preset", "tiny", "--vocab",
                        self.args.model, "-o", tiny], check=True, capture_output=True,
                       timeout=WAIT_S)
        self.models_server = Server(self.args.bin, self.args.model, ("-m", tiny))
        url = self.models_server.url
        sess = self.session()
        sess.get(url + "/")
        picker = ("const s = document.querySelector('#model-select'); "
                  "return s && !s.hidden && s.offsetParent !== null ? "
                  "[...s.options].map(o => o.value) : null")
        sess.wait(picker, "#model-select to show the models", WAIT_S)
        ids = sess.js(picker)
        if sorted(ids) != ["shakespeare", "tiny"]:
            raise Failure(f"#model-select lists {ids}, not shakespeare and tiny")
        sess.click(sess.find("#model-select"))
        sess.click(sess.find("#model-select option[value='tiny']"))
        sess.wait("return document.querySelector('#model-select').value === 'tiny'",
                  "the picker to hold tiny", WAIT_S)
        record_requests(sess)
        set_input(sess, "#max-tokens", "12")
        reply = wait_reply(sess, send(sess, "Good morrow."))
        bodies = recorded_requests(sess)
        if [b.get("model") for b in bodies] != ["tiny"]:
            raise Failure(f"the request named {[b.get('model') for b in bodies]}, not tiny")
        states = {m["id"]: m["status"]["value"]
                  for m in self.models_server.get_json("/v1/models")["data"]}
        if states.get("tiny") != "loaded":
            raise Failure(f"after the reply /v1/models says {states}")
        sess.refresh()
        sess.wait("return document.querySelector('#model-select').value === 'tiny'",
                  "the picker to keep tiny after a reload", WAIT_S)
        if (problems := sess.problems()):
            raise Failure(f"the page logged: {problems}")
        sess.quit()
        self.sessions.remove(sess)
        self.models_server.stop()
        self.models_server = None
        return f"picked tiny from {ids}; it answered {len(reply)} chars; kept after a reload"

    @staticmethod
    def typing_reaches_prompt(sess, how):
        """When the page hands the focus to #prompt, what a person types must land there."""
        sess.wait("return !document.querySelector('dialog#api-key-dialog').open",
                  "the key dialog to close", WAIT_S)
        if sess.js("return document.activeElement.id") != "prompt":
            return
        sess.type("Typed")
        if (typed := sess.js("return document.querySelector('#prompt').value")) != "Typed":
            raise Failure(f"with the key {how}, #prompt has the focus but typing 'Typed' "
                          f"leaves it {typed!r}: the keys are lost")
        sess.clear(sess.find("#prompt"))


STEPS = [("a", "load", Run.step_a_load), ("b", "stream", Run.step_b_stream),
         ("c", "stop", Run.step_c_stop), ("d", "reload", Run.step_d_reload),
         ("e", "switch", Run.step_e_switch),
         # Before the XSS step, so that the shots' list of conversations reads well.
         ("g", "screenshots", Run.step_g_shots), ("f", "xss", Run.step_f_xss),
         ("h", "manage", Run.step_h_manage), ("l", "budget", Run.step_l_budget),
         ("m", "small context", Run.step_m_small_context), ("k", "api-key", Run.step_k_api_key),
         ("n", "models", Run.step_n_models)]


def find_tool(given, names):
    if given:
        return given
    for n in names:
        if (p := shutil.which(n)):
            return p
    return None


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get("BITNET_BIN",
                                                    os.path.join(target, "debug", "bitnet")))
    ap.add_argument("--model", default=os.path.join(root, "models", "shakespeare.gguf"))
    ap.add_argument("--out-dir", default=os.environ.get("OUT_DIR",
                                                        os.path.join(target, "browser-test")))
    # Off by default: a test run must not rewrite tracked files.
    ap.add_argument("--docs-img", default="", metavar="DIR",
                    help="also copy the screenshots here (docs/img refreshes the README's)")
    ap.add_argument("--chromium", default=os.environ.get("CHROMIUM"))
    ap.add_argument("--chromedriver", default=os.environ.get("CHROMEDRIVER"))
    ap.add_argument("--steps", default="abcdefghlmkn", help="the steps to run, by letter")
    args = ap.parse_args()
    args.chromium = find_tool(args.chromium, ["chromium", "chromium-browser", "google-chrome"])
    args.chromedriver = find_tool(args.chromedriver, ["chromedriver"])
    if not args.chromedriver:
        print("error: no chromedriver (scripts/setup-browser.sh installs it)", file=sys.stderr)
        return 2
    if not os.access(args.bin, os.X_OK):
        print(f"error: no bitnet binary at {args.bin} (set BITNET_BIN)", file=sys.stderr)
        return 2
    os.makedirs(args.out_dir, exist_ok=True)
    try:
        os.remove(os.path.join(args.out_dir, "failure.png"))  # a past run's
    except FileNotFoundError:
        pass
    if args.docs_img:
        os.makedirs(args.docs_img, exist_ok=True)

    def overtime(*_):
        raise Failure(f"the whole test took over {TOTAL_S} s")

    signal.signal(signal.SIGALRM, overtime)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.alarm(TOTAL_S)
    run = Run(args)
    t_start = time.time()
    current = "setup"
    try:
        run.server = Server(args.bin, args.model)
        run.driver = ChromeDriver(args.chromedriver)
        sess = run.session(downloads=run.downloads)
        print(f"browser test: Chromium {sess.version}, server {run.server.url}", flush=True)
        for letter, name, fn in STEPS:
            if letter not in args.steps:
                continue
            current = f"{letter}. {name}"
            t0 = time.time()
            line = fn(run, sess)
            if (problems := sess.problems()):
                raise Failure(f"the page logged: {problems}")
            print(f"ok   {current}: {line} [{time.time() - t0:.1f} s]", flush=True)
        print(f"browser test passed in {time.time() - t_start:.1f} s", flush=True)
        return 0
    except (Failure, WebDriverError, OSError, KeyError, ValueError) as e:
        print(f"FAIL {current}: {e}", flush=True)
        for s in reversed(run.sessions):  # the newest: the one that failed
            try:
                shot = os.path.join(args.out_dir, "failure.png")
                s.screenshot(shot)
                print(f"     the page at the failure: {shot}", flush=True)
                break
            except (OSError, WebDriverError):
                pass
        server = run.models_server or run.key_server or run.server
        if server and server.log:
            print("     server log (last lines):\n       " +
                  "\n       ".join(server.log[-10:]), flush=True)
        return 1
    finally:
        signal.alarm(0)
        run.close()


if __name__ == "__main__":
    sys.exit(main())
