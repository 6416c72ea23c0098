#!/usr/bin/env python3
"""Time to first token after a restart, with and without --prefix-cache-dir.

    scripts/prefix_cache_restart.py --bin target/release/bitnet -m MODEL [--prompt 1500]

Three servers on MODEL, one after another, each on the same flags (-c 2048 by default):
  cold      no cache dir: reads the long prompt P and a follow-up Q (P + 32 tokens);
  first     with a cache dir: reads P once (its rows are written to the folder), then is
            killed with SIGKILL (nothing is written on the way out);
  restarted with the same folder: P's rows are restored at start, then P + Q.
Prints the time the restarted server took to restore (from its log), and for the
follow-up on the cold and the restarted server: the wall time of a 1-token answer (time
to first token, as the client sees it), `timings.prompt_ms`, `timings.cache_n` and the
answer, which must be the same. Token ids are random ones of the model's vocabulary
(seeded), sent as a list, so any model with a tokenizer works.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def start(args, extra):
    cmd = [args.bin, "serve", "-m", args.model, "--port", "0", "-c", str(args.ctx),
           "-t", str(args.threads), "-n", "1"] + extra
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    if not line.startswith("listening on "):
        sys.exit(f"unexpected first line {line!r}: {p.stderr.read()}")
    url = line[len("listening on "):]
    log = []
    threading.Thread(target=lambda: log.extend(p.stderr), daemon=True).start()
    t0 = time.time()
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except Exception:
            pass
        if time.time() - t0 > 600:
            sys.exit("the server did not get ready")
        time.sleep(0.05)
    return p, url, log


def complete(url, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=3600) as r:
        answer = json.load(r)
    wall = time.perf_counter() - t0
    return wall, answer["timings"], answer["choices"][0]["text"]


def n_vocab(args):
    out = subprocess.run([args.bin, "inspect", args.model, "--json"], capture_output=True,
                         text=True)
    try:
        return int(json.loads(out.stdout)["tokenizer"]["n_tokens"])
    except (ValueError, KeyError, TypeError):
        return args.vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/bitnet")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--prompt", type=int, default=1500, help="tokens of the long prompt P")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=32000,
                    help="token ids drawn below this when `inspect --json` does not say")
    args = ap.parse_args()
    rng = random.Random(7)
    vocab = n_vocab(args)
    # Ids past the specials, which sit at the start of every vocabulary we ship or make.
    low = min(300, vocab // 4)
    p_ids = [rng.randrange(low, vocab) for _ in range(args.prompt)]
    follow = p_ids + [rng.randrange(low, vocab) for _ in range(32)]
    folder = tempfile.mkdtemp(prefix="bitnet-prefix-restart-")
    try:
        cold, url, _ = start(args, [])
        cold_wall, cold_t, cold_text = complete(url, follow)
        cold.kill()
        cold.wait()

        first, url, _ = start(args, ["--prefix-cache-dir", folder])
        complete(url, p_ids)
        t0 = time.time()
        while not any(f.endswith(".bkv") for f in os.listdir(folder)):
            if time.time() - t0 > 120:
                sys.exit("no prefix file was written")
            time.sleep(0.05)
        time.sleep(0.2)
        first.send_signal(signal.SIGKILL)
        first.wait()
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))

        t_start = time.time()
        again, url, log = start(args, ["--prefix-cache-dir", folder])
        ready = time.time() - t_start
        warm_wall, warm_t, warm_text = complete(url, follow)
        again.kill()
        again.wait()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    restored = [l.strip() for l in log if "restored from" in l]
    print(f"model {args.model}, prompt {args.prompt} + 32 tokens, -c {args.ctx}, "
          f"-t {args.threads}; cache folder {size / 2**20:.1f} MiB")
    print(f"restart to ready: {ready:.2f} s ({restored[0] if restored else 'nothing restored'})")
    print("| server | time to first token (s) | prompt_ms | cache_n | prompt_n |")
    print("|---|---|---|---|---|")
    for name, wall, t in (("cold", cold_wall, cold_t), ("restarted, cache restored", warm_wall, warm_t)):
        print(f"| {name} | {wall:.3f} | {t['prompt_ms']:.1f} | {t['cache_n']} | {t['prompt_n']} |")
    print(f"ratio cold / restored: {cold_wall / warm_wall:.1f}x")
    if cold_text != warm_text:
        sys.exit(f"the answers differ: {cold_text!r} vs {warm_text!r}")
    print("same answer: yes")


if __name__ == "__main__":
    main()
