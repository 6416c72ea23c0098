#!/usr/bin/env python3
"""Fault drill for `bitnet serve`: what production does to a server, from outside.

Run by scripts/serve-faults.sh (CI runs it; under a minute). Python's standard library only:
raw sockets and http.client, no client of ours. Each drill starts `bitnet serve` on the
shipped model, slowed with the hidden --step-delay-ms so requests overlap like a big
model's, and checks every answer: an answer is either complete and labelled so, or an
explicit error. Exits non-zero on any lost answer (no reply and no error), mislabelled
answer (cut short but reported as finished), or server that does not exit or restart.

Drills:
  half-open   silent sockets and half-sent headers: /health still answers, they are closed
  slow        a body sent slowly but steadily is answered; a header trickled byte by byte
              past --read-timeout is closed
  sigterm     SIGTERM under load: answers finish or end in an error; the process exits 0
              by the deadline even with half-sent requests open
  kill9       kill -9 under load, then a restart on the same port serves again
"""

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

MAX_TOKENS = 60
FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    print(f"FAIL: {msg}", flush=True)


class Server:
    def __init__(self, binary, model, extra, port=0):
        cmd = [binary, "serve", "-m", model, "--port", str(port), "-t", "1", "--no-pin",
               "--step-delay-ms", "20"] + extra
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on http://"):
            raise SystemExit(f"serve did not start: {line!r} {self.proc.stderr.read()}")
        hostport = line.split("http://", 1)[1].strip()
        self.host, port = hostport.rsplit(":", 1)
        self.port = int(port)
        self.log = []
        threading.Thread(target=self._read_log, daemon=True).start()
        self.wait_ready()

    def _read_log(self):
        for line in self.proc.stderr:
            self.log.append(line.rstrip())

    def wait_ready(self, secs=30):
        t0 = time.time()
        while time.time() - t0 < secs:
            try:
                if self.get("/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit("server never became ready")

    def conn(self, timeout=30):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def get(self, path, timeout=5):
        c = self.conn(timeout)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body

    def socket(self):
        s = socket.create_connection((self.host, self.port), timeout=30)
        return s

    def wait_exit(self, secs):
        try:
            return self.proc.wait(timeout=secs)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def logged(server, text, secs=10):
    """Whether the server's log has a line with `text`, waiting up to `secs` for it: the
    server writes it when it closes the connection, and the line reaches this process
    through a pipe and a reader thread, which on a loaded machine can trail the close."""
    deadline = time.time() + secs
    while True:
        if any(text in line for line in list(server.log)):
            return True
        if time.time() >= deadline:
            return False
        time.sleep(0.1)


def closed_within(sock, secs):
    """True when the server closes `sock` within `secs` (EOF or reset)."""
    sock.settimeout(secs)
    t0 = time.time()
    try:
        while time.time() - t0 < secs:
            if not sock.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return False


# --- one generation request, checked ---------------------------------------------------

def generate(server, stream, results, idx):
    """Runs one request and files its verdict: ('complete', n), ('error', status/code),
    or ('lost', why) / ('mislabelled', why)."""
    body = {"prompt": "ROMEO:", "max_tokens": MAX_TOKENS, "ignore_eos": True,
            "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    try:
        c = server.conn(timeout=30)
        c.request("POST", "/v1/completions", json.dumps(body),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            payload = json.loads(r.read() or b"{}")
            if "error" not in payload:
                results[idx] = ("mislabelled", f"HTTP {r.status} without an error object")
            else:
                results[idx] = ("error", f"{r.status} {payload['error'].get('code')}")
            return
        if not stream:
            payload = json.loads(r.read())
            results[idx] = verdict(payload["choices"][0]["finish_reason"],
                                   payload["usage"]["completion_tokens"],
                                   len(payload["choices"][0]["text"]))
            return
        finish, usage, error, done = None, None, None, False
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            ev = json.loads(data)
            if "error" in ev:
                error = ev["error"].get("code") or ev["error"].get("message")
                continue
            for ch in ev.get("choices", []):
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
            if ev.get("usage"):
                usage = ev["usage"]["completion_tokens"]
        if error is not None:
            if finish is not None:
                results[idx] = ("mislabelled", f"finish {finish} and an error {error}")
            else:
                results[idx] = ("error", f"stream {error}")
        elif not done:
            # Cut without its terminator: the client can tell it has no whole answer.
            results[idx] = ("broken", "stream cut before [DONE]")
        else:
            results[idx] = verdict(finish, usage, None)
    except (OSError, http.client.HTTPException) as e:
        # The connection broke: the client knows it has no answer. Lost only if nothing
        # broke it (the drills that kill the server expect this).
        results[idx] = ("broken", type(e).__name__)


def verdict(finish, tokens, _text_len):
    # With ignore_eos and no stop strings the only honest finish is "length" after
    # MAX_TOKENS tokens; anything else is a cut-off answer reported as finished.
    if finish == "length" and tokens == MAX_TOKENS:
        return ("complete", tokens)
    return ("mislabelled", f"finish {finish!r} after {tokens} of {MAX_TOKENS} tokens")


def load(server, n):
    results = [None] * n
    threads = [threading.Thread(target=generate, args=(server, i % 2 == 0, results, i))
               for i in range(n)]
    for t in threads:
        t.start()
    return threads, results


def judge(name, threads, results, allow_broken=False, timeout=30):
    for t in threads:
        t.join(timeout)
    counts = {}
    for i, r in enumerate(results):
        if r is None:
            fail(f"{name}: request {i} got no reply and no error (lost)")
            continue
        kind = r[0]
        counts[kind] = counts.get(kind, 0) + 1
        if kind in ("mislabelled", "lost"):
            fail(f"{name}: request {i}: {r[1]}")
        if kind == "broken" and not allow_broken:
            fail(f"{name}: request {i}: connection broke ({r[1]})")
    print(f"  {name}: {counts}", flush=True)
    return counts


# --- drills ---------------------------------------------------------------------------

def drill_half_open(binary, model):
    s = Server(binary, model, ["--read-timeout", "2", "--max-connections", "64"])
    try:
        silent = [s.socket() for _ in range(100)]
        partial = []
        for _ in range(20):
            k = s.socket()
            k.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            partial.append(k)
        t0 = time.time()
        try:
            status, _ = s.get("/health", timeout=5)
        except OSError as e:
            status = f"no answer ({e})"
        if status != 200:
            fail(f"half-open: /health under 120 idle sockets: {status}")
        print(f"  half-open: /health answered in {time.time() - t0:.2f} s with 120 "
              f"half-open sockets and --max-connections 64", flush=True)
        threads, results = load(s, 4)
        judge("half-open load", threads, results)
        still_open = sum(1 for k in partial[-5:] if not closed_within(k, 6))
        if still_open:
            fail(f"half-open: {still_open} half-sent headers still open after the read timeout")
        if not logged(s, "connection limit reached"):
            fail("half-open: the connection limit was hit but not logged")
        if not logged(s, "no complete request header"):
            fail("half-open: header timeouts were not logged")
        for k in silent + partial:
            k.close()
    finally:
        s.stop()


def drill_slow(binary, model):
    s = Server(binary, model, ["--read-timeout", "2"])
    try:
        body = json.dumps({"prompt": "ROMEO:", "max_tokens": 5, "ignore_eos": True}).encode()
        k = s.socket()
        k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nConnection: close\r\nContent-Length: " + str(len(body)).encode()
                  + b"\r\n\r\n")
        # A steady slow sender: a pause under the read timeout between pieces.
        for i in range(0, len(body), 16):
            k.sendall(body[i:i + 16])
            time.sleep(0.3)
        k.settimeout(20)
        got = b""
        while True:
            d = k.recv(65536)
            if not d:
                break
            got += d
        head, _, rest = got.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            fail(f"slow: a steady slow body was not answered: {head[:80]!r}")
        else:
            finish = json.loads(rest)["choices"][0]["finish_reason"]
            if finish != "length":
                fail(f"slow: answer finished with {finish!r}")
        # A header trickled one byte a second never completes within --read-timeout 2.
        loris = s.socket()
        t0 = time.time()
        closed = False
        for b in b"GET /health HTTP/1.1\r\nHost: slow\r\n\r\n":
            try:
                loris.sendall(bytes([b]))
            except OSError:
                closed = True
                break
            loris.settimeout(1)
            try:
                if loris.recv(100) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
            except OSError:
                closed = True
                break
        if not closed or time.time() - t0 > 6:
            fail(f"slow: a trickled header was not closed by the read timeout "
                 f"({time.time() - t0:.1f} s)")
        print(f"  slow: steady body answered, trickled header closed after "
              f"{time.time() - t0:.1f} s", flush=True)
    finally:
        s.stop()


def drill_sigterm(binary, model):
    s = Server(binary, model, ["--shutdown-timeout", "1", "--read-timeout", "600",
                               "-np", "4", "-c", "1024"])
    try:
        threads, results = load(s, 8)
        # Half-sent requests must not hold the exit.
        held = s.socket()
        held.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        body = s.socket()
        body.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        time.sleep(0.8)
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        rc = s.wait_exit(10)
        took = time.time() - t0
        if rc is None:
            fail("sigterm: still running 10 s after SIGTERM with --shutdown-timeout 1")
        elif rc != 0:
            fail(f"sigterm: exit status {rc}")
        counts = judge("sigterm", threads, results)
        if not counts.get("error"):
            fail("sigterm: no answer was cut off: the drill did not test cancellation")
        print(f"  sigterm: exited {rc} after {took:.1f} s", flush=True)
        held.close()
        body.close()
    finally:
        s.stop()


def drill_kill9(binary, model):
    s = Server(binary, model, ["-np", "4", "-c", "1024"])
    port = s.port
    try:
        threads, results = load(s, 6)
        time.sleep(0.8)
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait()
        judge("kill -9", threads, results, allow_broken=True)
    finally:
        s.stop()
    # The same port at once: no TIME_WAIT trouble, the model loads again, answers flow.
    s = Server(binary, model, ["-np", "4", "-c", "1024"], port=port)
    try:
        threads, results = load(s, 4)
        counts = judge("restart", threads, results)
        if counts.get("complete", 0) != 4:
            fail(f"restart: {counts}")
        print(f"  kill9: restarted on port {port}", flush=True)
    finally:
        s.stop()


DRILLS = {"half-open": drill_half_open, "slow": drill_slow, "sigterm": drill_sigterm,
          "kill9": drill_kill9}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/debug/bitnet")
    ap.add_argument("--model", default="models/shakespeare.gguf")
    ap.add_argument("drills", nargs="*", help=f"some of {', '.join(DRILLS)} (default: all)")
    args = ap.parse_args()
    unknown = [d for d in args.drills if d not in DRILLS]
    if unknown:
        ap.error(f"unknown drill {unknown[0]!r}: choose from {', '.join(DRILLS)}")
    args.drills = args.drills or list(DRILLS)
    t0 = time.time()
    for name in args.drills:
        print(f"== {name}", flush=True)
        DRILLS[name](args.bin, args.model)
    print(f"{len(FAILURES)} failures in {time.time() - t0:.1f} s", flush=True)
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
