#!/usr/bin/env python3
"""Run the commands the README and docs/ show, as a reader would type them.

Every line of a code block (fenced or indented) and every inline code span that starts with
`bitnet`, `bitnet-convert` or `bitnet-loadtest` is a command. Each runs in a scratch folder
that sees the repository's files (read-only links; what a command writes lands in the
scratch folder), with the binaries of --bin-dir first on PATH. The exit status is non-zero
when any command fails, naming the file and line.

What "as written" allows, stated here once:
- A usage line's optional parts (`[-c 512]`) are left out, and its placeholders are bound:
  PLACEHOLDERS below (MODEL.gguf is the shipped model, TEXT its held-out text, ...). A
  placeholder not in that table fails the check, so a new one is bound on purpose.
- A model file the docs download or build at full size (`bitnet-2b.gguf`, the 2B-4T
  benchmark models), and a usage line's MODEL.gguf, is a stand-in: a small random model made
  once by `bitnet gen-model --preset tiny` (STAND_INS). The flags are what is checked, not
  the model.
- Servers listen on a free port; a run of `bitnet serve` passes when it says it is listening,
  and is then stopped. `bitnet chat` reads one line from stdin. The load tester runs for
  2 s against a server started for it.
- Commands that would take minutes or gigabytes (EXPENSIVE) are listed, not run.
"""

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROGRAMS = ("bitnet", "bitnet-convert", "bitnet-loadtest")
SUBCOMMANDS = ("inspect", "chat", "generate", "tokenize", "logits", "embed", "perplexity", "bench",
               "calibrate",
               "gen-model", "serve")
SOURCES = ["README.md", "docs/*.md", "tools/*/README.md", "bitnet-kernels/README.md", "fuzz/README.md"]

# Usage-line placeholders and what they stand for in a run.
PLACEHOLDERS = {
    "MODEL.gguf": "standin.gguf",
    "MODEL": "standin.gguf",
    "TEXT": "models/shakespeare-ref/heldout.txt",
    "OUT.gguf": "out.gguf",
    "OUT.f32": "out.f32",
    "HF_DIR": "models/shakespeare-hf",
    "HF_CHECKPOINT_DIR": "models/shakespeare-hf",
    "NAME": "tiny",
    "N": "2",
    "OLD.json": "old.json",
    "NEW.json": "new.json",
}

# Small inputs the docs assume the reader has, made in the scratch folder.
MADE_FILES = {"prompt.txt": "ROMEO:\n"}

# Files the docs download or build at full size: a small model stands in for each.
STAND_INS = {
    "bitnet-2b.gguf": "standin.gguf",
    "2b4t-llama3.gguf": "standin.gguf",
    "models/2b4t-i2_s.gguf": "standin.gguf",
    "draft.gguf": "standin.gguf",
    "bitnet-b1.58-2B-4T": "models/shakespeare-hf",
    "bitnet-embedding-0.6b": "models/shakespeare-hf",
    "bitnet-embedding-0.6b.gguf": "standin.gguf",
}

# (substring, why): matching commands are listed, not run.
EXPENSIVE = [
    ("--preset 2b-4t", "writes a 1.2 GB model of the 2B-4T shape"),
]

TIMEOUT_S = 300


def is_command(words):
    """A program's name, then (for `bitnet`) one of its subcommands, then arguments."""
    if len(words) < 2 or words[0] not in PROGRAMS:
        return False
    if words[0] == "bitnet":
        return words[1] in SUBCOMMANDS and len(words) >= 3
    return words[1].startswith(("-", ".", "/")) or words[1][0].isalnum()


def extract(path):
    """(line number, command text) for each command in one Markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    fenced = False
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            index += 1
            continue
        in_block = fenced or (line.startswith("    ") and not stripped.startswith(("-", "*", "|")))
        if in_block:
            text = stripped[2:] if stripped.startswith("$ ") else stripped
            if is_command(text.split()):
                start = index + 1
                while text.endswith("\\") and index + 1 < len(lines):
                    index += 1
                    text = text[:-1].rstrip() + " " + lines[index].strip()
                found.append((start, text))
        else:
            for span in re.findall(r"`([^`]+)`", line):
                words = span.split()
                # Prose names flags in passing (`bitnet perplexity -c 256 -t 1`); a span is a
                # command when it names the files it works on.
                names_files = any(w.endswith((".gguf", ".json", "-hf")) for w in words)
                if is_command(words) and names_files:
                    found.append((index + 1, span))
        index += 1
    return found


def drop_optional(words):
    """A usage line without its `[...]` parts."""
    kept, depth = [], 0
    for word in words:
        opens = word.startswith("[") and not word.startswith("[{")
        if opens:
            depth += 1
        if depth == 0:
            kept.append(word)
        if depth and word.endswith("]") and not word.endswith("}]"):
            depth -= 1
    return kept


OUTPUT_FLAGS = ("-o", "--output", "--outfile")


def bind(words, sandbox):
    """Placeholders bound, and a stand-in for each input file the scratch folder lacks; an
    error string for an unbound placeholder."""
    bound = []
    for position, word in enumerate(words):
        is_output = position > 0 and words[position - 1] in OUTPUT_FLAGS
        if word in PLACEHOLDERS:
            word = PLACEHOLDERS[word]
        elif word in STAND_INS and is_output:
            # What a stand-in input makes is no stand-in for the real file: later commands
            # naming that file get STAND_INS' model.
            word = "discarded-" + Path(word).name
        elif word in STAND_INS and not (sandbox / word).exists():
            word = STAND_INS[word]
        elif re.fullmatch(r"[A-Z][A-Z0-9_]*(\.[a-z0-9]+)?", word) and len(word) > 1:
            return None, f"unbound placeholder {word} (add it to PLACEHOLDERS)"
        bound.append(word)
    return bound, None


def prepare_sandbox(repo, sandbox, bin_dir):
    """Links to the repository's entries; models/ a real folder so outputs stay here."""
    for entry in repo.iterdir():
        if entry.name in (".git", "target", "models"):
            continue
        (sandbox / entry.name).symlink_to(entry)
    (sandbox / "models").mkdir()
    for entry in (repo / "models").iterdir():
        (sandbox / "models" / entry.name).symlink_to(entry)
    for name, text in MADE_FILES.items():
        (sandbox / name).write_text(text)
    for name in ("old.json", "new.json"):
        report = subprocess.run(
            [str(bin_dir / "bitnet"), "bench", "-m", "models/shakespeare.gguf", "-p", "16",
             "-n", "16", "-r", "2", "-o", "json"],
            cwd=sandbox, check=True, capture_output=True, text=True)
        (sandbox / name).write_text(report.stdout)
    command = [str(bin_dir / "bitnet"), "gen-model", "--preset", "tiny", "--seed", "1",
               "-o", str(sandbox / "standin.gguf")]
    subprocess.run(command, check=True, capture_output=True)


def run_serve(words, env, cwd):
    """Passes when the server says it is listening; then it is stopped."""
    words = [w for w in words]
    if "--port" in words:
        words[words.index("--port") + 1] = "0"
    else:
        words += ["--port", "0"]
    process = subprocess.Popen(words, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    seen = []
    deadline = time.monotonic() + TIMEOUT_S
    address = None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        match = re.search(r"listening on (http://\S+)", line)
        if match:
            address = match.group(1).rstrip("/")
            break
    return process, address, "".join(seen)


def stop(process):
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_one(words, env, cwd):
    """(ok, output) for one bound command."""
    program, rest = words[0], words[1:]
    if program == "bitnet" and rest[:1] == ["serve"]:
        process, address, seen = run_serve(words, env, cwd)
        stop(process)
        return address is not None, seen
    if program == "bitnet-loadtest":
        server, address, seen = run_serve(
            ["bitnet", "serve", "-m", "models/shakespeare.gguf"], env, cwd)
        if address is None:
            stop(server)
            return False, "the server for the load tester did not start:\n" + seen
        words = [address if w.startswith("http://127.0.0.1") else w for w in words]
        if "--duration" in words:
            words[words.index("--duration") + 1] = "2s"
        try:
            done = subprocess.run(words, cwd=cwd, env=env, capture_output=True, text=True,
                                  timeout=TIMEOUT_S)
        finally:
            stop(server)
        return done.returncode == 0, done.stdout + done.stderr
    stdin = "Good morrow, friend.\n" if rest[:1] == ["chat"] else ""
    try:
        done = subprocess.run(words, cwd=cwd, env=env, input=stdin, capture_output=True,
                              text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {TIMEOUT_S} s"
    return done.returncode == 0, done.stdout + done.stderr


def self_test():
    """The extraction and binding rules on a made-up page, so a checker that finds nothing
    cannot pass the docs."""
    page = "\n".join([
        "Run `bitnet generate -m models/shakespeare.gguf -n 4` or `bitnet chat` (a name).",
        "Flags in prose: `bitnet perplexity -c 256 -t 1`.",
        "```sh",
        "$ bitnet bench -m MODEL.gguf [-p 512] \\",
        "    -n 8   # a comment",
        "cargo build",
        "```",
        "    bitnet tokenize -m MODEL.gguf WORDS",
    ])
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "page.md"
        path.write_text(page)
        found = extract(path)
        sandbox = Path(scratch)
    assert [n for n, _ in found] == [1, 4, 8], found
    bench, error = bind(drop_optional(shlex.split(found[1][1], comments=True)), sandbox)
    assert error is None and bench == ["bitnet", "bench", "-m", "standin.gguf", "-n", "8"], bench
    _, error = bind(shlex.split(found[2][1]), sandbox)
    assert error and "WORDS" in error, error
    converted, _ = bind(shlex.split("bitnet-convert bitnet-b1.58-2B-4T -o bitnet-2b.gguf"), sandbox)
    assert converted == ["bitnet-convert", "models/shakespeare-hf", "-o", "discarded-bitnet-2b.gguf"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", default="target/debug",
                        help="folder holding bitnet, bitnet-convert, bitnet-loadtest")
    parser.add_argument("--list", action="store_true", help="list the commands; run none")
    parser.add_argument("files", nargs="*", help="Markdown files (default: README.md, docs/, ...)")
    args = parser.parse_args()
    self_test()
    repo = Path(__file__).resolve().parent.parent
    files = [Path(f).resolve() for f in args.files] or sorted(
        {p for pattern in SOURCES for p in repo.glob(pattern)})
    commands = [(f, n, text) for f in files for n, text in extract(f)]

    bin_dir = Path(args.bin_dir).resolve()
    failures, ran, listed = [], 0, 0
    # A command shown in several places runs once (its first place is named).
    done_before = {}
    with tempfile.TemporaryDirectory(prefix="doc-commands-") as scratch:
        sandbox = Path(scratch)
        if not args.list:
            prepare_sandbox(repo, sandbox, bin_dir)
        env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        for path, number, text in commands:
            where = f"{path.relative_to(repo)}:{number}"
            expensive = [why for key, why in EXPENSIVE if key in text]
            if expensive:
                print(f"not run  {where}: {text}  ({expensive[0]})")
                listed += 1
                continue
            try:
                words = drop_optional(shlex.split(text, comments=True))
            except ValueError as why:
                words, error = None, f"does not parse as a shell command: {why}"
            else:
                words, error = bind(words, sandbox)
            if error:
                failures.append((where, text, error))
                print(f"FAIL     {where}: {text}\n         {error}")
                continue
            if args.list:
                print(f"would run {where}: {shlex.join(words)}")
                continue
            key = shlex.join(words)
            if key in done_before:
                print(f"same     {where}: as {done_before[key]}")
                continue
            done_before[key] = where
            started = time.monotonic()
            ok, output = run_one(words, env, sandbox)
            ran += 1
            took = time.monotonic() - started
            if ok:
                print(f"ok {took:5.1f}s {where}: {shlex.join(words)}")
            else:
                tail = "\n".join(output.strip().splitlines()[-15:])
                failures.append((where, text, tail))
                print(f"FAIL     {where}: {shlex.join(words)}\n{tail}")
    print(f"\n{ran} commands ran, {len(failures)} failed, {listed} listed as expensive")
    if failures:
        print("failed:")
        for where, text, _ in failures:
            print(f"  {where}: {text}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
