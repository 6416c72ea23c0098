#!/usr/bin/env python3
"""File-level import circles in the workspace's crates.

For each crate of the top-level Cargo.toml's `members`, every module file reachable from
`src/lib.rs`, `src/main.rs` and `src/bin/*.rs` becomes a node; file A has an edge to file B
when A names an item that B defines: in a `use` (re-exports included) or in an inline path
(`crate::a::B`, `super::X`, `self::x::Y`, or a path that starts at a module or item in
scope). A path is resolved to the file that defines its item, through any number of
`use` / `pub use` hops and glob imports; a path that ends at a module maps to that
module's file, and so does a name a module does not show (an item a macro defines
there). A `mod x;` declaration alone is no edge: a parent depends on a child only where
it names the child's items. A parent's `pub use` of its own child module's items is no
edge: the parent is a facade for the child, not a user of it (--count-facades counts it).
Comments, strings and character literals are blanked before anything is read, so doc
links and messages do not count; nor do `pub(in path)` visibility paths.

Every strongly connected component of more than one file is reported with, for each edge
inside it, one example (`file:line: path`). The exit status is 1 when a component exists
other than the allowed one: two files, one of them `error.rs`, the other its sibling
module (same directory) or its parent module (`x.rs` or `x/mod.rs` for `x/error.rs`).

    scripts/module-cycles.py [--root WORKSPACE] [--crate MEMBER ...] [--count-facades]

scripts/module-cycles-test.sh is its self-test (a throwaway workspace of known cases).
"""

import argparse
import os
import re
import sys
try:
    import tomllib
except ImportError:  # Python before 3.11
    tomllib = None

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


# --- Lexing ------------------------------------------------------------------------------


def blank_noncode(src):
    """The source with comments, string and char literals replaced by spaces (newlines
    kept), so offsets and line numbers still match the original text."""
    out = list(src)
    n = len(src)
    i = 0

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if c == "/" and src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif c == "/" and src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c in "rb" and (m := re.match(r'(?:br|r)(#*)"', src[i:i + 260])) and (
            i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")
        ):
            close = '"' + m.group(1)
            j = src.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            blank(i, j)
            i = j
        elif c == '"' or (c == "b" and src.startswith('b"', i) and not _ident_before(src, i)):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        elif c == "'" or (c == "b" and src.startswith("b'", i) and not _ident_before(src, i)):
            start = i + (1 if c == "b" else 0)
            # A char literal closes within a few characters; a lifetime or label does not.
            m = re.match(r"'(?:\\(?:x[0-9A-Fa-f]{2}|u\{[0-9A-Fa-f]{1,6}\}|.)|[^\\'\n])'", src[start:start + 12])
            if m:
                blank(i, start + m.end())
                i = start + m.end()
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def _ident_before(src, i):
    return i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_")


# --- Modules and what they hold ------------------------------------------------------------


class Module:
    def __init__(self, path, file, parent):
        self.path = path  # tuple of names from the crate root
        self.file = file
        self.parent = parent
        self.children = {}  # name -> Module
        self.items = set()  # names of items defined here (not modules)
        self.imports = {}  # name -> list of (segments, Module where the `use` is)
        self.globs = []  # list of segments (for `use x::*`)


class Crate:
    def __init__(self):
        self.modules = {}  # file -> list of Modules whose text is in it
        self.regions = {}  # file -> [(start, end, Module, body depth)], outermost first
        self.texts = {}  # file -> blanked text


def brace_depths(text):
    depths = [0] * (len(text) + 1)
    d = 0
    for i, c in enumerate(text):
        depths[i] = d
        if c == "{":
            d += 1
        elif c == "}":
            d -= 1
    depths[len(text)] = d
    return depths


def matching_brace(text, open_at):
    d = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            d += 1
        elif text[j] == "}":
            d -= 1
            if d == 0:
                return j
    return len(text)


ITEM_RE = re.compile(
    r"(?:^|(?<=[;{}\]]))\s*(?:pub(?:\s*\([^)]*\))?\s+)?"
    r"(?:(?:const|async|unsafe|default|extern(?:\s+)?)\s+)*"
    r"(fn|struct|enum|trait|type|const|static|union|macro_rules\s*!)\s+(?:mut\s+)?(" + IDENT + ")",
    re.M,
)
MOD_RE = re.compile(
    r"(?:^|(?<=[;{}\]]))\s*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*([;{])", re.M
)
USE_RE = re.compile(r"(?<![A-Za-z0-9_:])(pub(?:\s*\([^)]*\))?\s+)?use\s+")


def child_file(parent_file, name, is_dir_owner):
    """Where `mod name;` in `parent_file` lives: `x.rs` or `x/mod.rs` beside a mod.rs /
    crate root, in `stem/` beside any other file."""
    d = os.path.dirname(parent_file)
    if not is_dir_owner:
        d = os.path.join(d, os.path.splitext(os.path.basename(parent_file))[0])
    for cand in (os.path.join(d, name + ".rs"), os.path.join(d, name, "mod.rs")):
        if os.path.isfile(cand):
            return cand
    return None


def load_file(crate, file, module, is_dir_owner):
    raw = open(file, encoding="utf-8").read()
    text = blank_noncode(raw)
    crate.texts[file] = text
    depths = brace_depths(text)
    regions = [(0, len(text) + 1, module, 0)]
    crate.modules.setdefault(file, []).append(module)

    # Inline and file modules, outermost first so a region's parent is known.
    for m in MOD_RE.finditer(text):
        name, kind = m.group(1), m.group(2)
        at = m.start(1)
        owner, body_depth = region_at(regions, at)
        if depths[at] != body_depth:
            continue  # a `mod` inside a function body: not reachable by path
        if kind == "{":
            open_at = m.end(2) - 1
            child = Module(owner.path + (name,), file, owner)
            owner.children[name] = child
            crate.modules[file].append(child)
            regions.append((open_at, matching_brace(text, open_at), child, depths[open_at] + 1))
        else:
            before = raw[:m.start(1)]
            line_start = before.rfind("\n", 0, before.rfind("mod"))
            lookback = raw[max(0, line_start - 300):line_start + 1]
            pm = None
            for line in reversed(lookback.splitlines()):
                s = line.strip()
                if not s:
                    continue
                if s.startswith("#["):
                    pm = re.match(r'#\[\s*path\s*=\s*"([^"]+)"\s*\]', s) or pm
                    if pm:
                        break
                    continue
                break
            if pm:
                path = os.path.normpath(os.path.join(os.path.dirname(file), pm.group(1)))
                path = path if os.path.isfile(path) else None
            else:
                path = child_file(file, name, is_dir_owner and owner is module)
            if path is None:
                continue
            child = Module(owner.path + (name,), path, owner)
            owner.children[name] = child
            load_file(crate, path, child, os.path.basename(path) == "mod.rs")
    crate.regions[file] = regions

    for m in ITEM_RE.finditer(text):
        at = m.start(2)
        owner, body_depth = region_at(regions, at)
        if depths[at] == body_depth:
            owner.items.add(m.group(2))

    for use in uses_in(text):
        owner, _ = region_at(regions, use.start)
        for segs, alias, glob, _ in use.leaves:
            if glob:
                owner.globs.append((segs, owner))
            else:
                name = alias or segs[-1]
                if name != "_":
                    owner.imports.setdefault(name, []).append((segs, owner))


def region_at(regions, at):
    best = regions[0]
    for r in regions[1:]:
        if r[0] < at <= r[1] and r[0] >= best[0]:
            best = r
    return best[2], best[3]


# --- `use` trees ---------------------------------------------------------------------------


class Use:
    def __init__(self, start, end, leaves, public):
        self.start, self.end, self.leaves, self.public = start, end, leaves, public


TOKEN_RE = re.compile(r"\s*(::|\{|\}|,|\*|" + IDENT + ")")


def uses_in(text):
    for m in USE_RE.finditer(text):
        end = text.find(";", m.end())
        if end < 0:
            continue
        body = text[m.end():end]
        tokens, pos = [], 0
        while pos < len(body):
            t = TOKEN_RE.match(body, pos)
            if not t:
                break
            tokens.append((t.group(1), m.end() + t.start(1)))
            pos = t.end()
        if body[pos:].strip():
            continue  # not a use declaration we understand
        leaves = []
        try:
            _parse_tree(tokens, 0, [], leaves)
        except IndexError:
            continue
        yield Use(m.start(), end, leaves, m.group(1) is not None)


def _parse_tree(tokens, i, prefix, leaves):
    """Parses one use tree at tokens[i]; returns the index after it."""
    segs = list(prefix)
    if tokens[i][0] == "::":
        if not prefix:
            segs.append("::")  # a leading `::`: an extern crate
        i += 1
    while True:
        tok, at = tokens[i]
        if tok == "{":
            i += 1
            while tokens[i][0] != "}":
                i = _parse_tree(tokens, i, segs, leaves)
                if tokens[i][0] == ",":
                    i += 1
            return i + 1
        if tok == "*":
            leaves.append((segs, None, True, at))
            return i + 1
        if tok == "self" and prefix and segs == list(prefix):
            # `a::{self}`: the module `a` itself.
            alias = None
            i += 1
            if i < len(tokens) and tokens[i][0] == "as":
                alias, i = tokens[i + 1][0], i + 2
            leaves.append((segs, alias or segs[-1], False, at))
            return i
        segs = segs + [tok]
        i += 1
        if i < len(tokens) and tokens[i][0] == "::":
            i += 1
            continue
        alias = None
        if i < len(tokens) and tokens[i][0] == "as":
            alias, i = tokens[i + 1][0], i + 2
        leaves.append((segs, alias, False, at))
        return i


# --- Resolution ------------------------------------------------------------------------------


def lookup(root, module, name, seen):
    """('module', Module) or ('file', defining file) for `name` in `module`'s namespace."""
    key = (id(module), name)
    if key in seen:
        return None
    seen = seen | {key}
    if name in module.children:
        return ("module", module.children[name])
    if name in module.items:
        return ("file", module.file)
    for segs, where in module.imports.get(name, []):
        target = resolve_import(root, where, segs, seen)
        if target is not None:
            return target
    for segs, where in module.globs:
        base = resolve_import(root, where, segs, seen)
        if base is not None and base[0] == "module":
            found = lookup(root, base[1], name, seen)
            if found is not None:
                return found
    return None


def resolve_import(root, module, segs, seen):
    """Like resolve, but keeps a module as a module so imports of modules chain."""
    if not segs or segs[0] == "::":
        return None
    cur, i = module, 0
    while i < len(segs) and segs[i] in ("crate", "super", "self"):
        if segs[i] == "crate":
            cur = root
        elif segs[i] == "super":
            cur = cur.parent
            if cur is None:
                return None
        i += 1
    for k in range(i, len(segs)):
        found = lookup(root, cur, segs[k], seen)
        if found is None:
            # A module the path reached does not show the name: a macro defines it there.
            return ("module", cur) if k > 0 else None
        if found[0] == "file":
            return found
        cur = found[1]
    return ("module", cur)


def target_file(root, module, segs):
    found = resolve_import(root, module, segs, set())
    if found is None:
        return None
    return found[1] if found[0] == "file" else found[1].file


# --- Edges -----------------------------------------------------------------------------------

VISIBILITY_RE = re.compile(r"pub\s*\(\s*in\s+$")
INLINE_RE = re.compile(r"(?<![A-Za-z0-9_:])(" + IDENT + r"(?:\s*::\s*" + IDENT + r")+)")


def reexports_own_child(module, target):
    """A `pub use` of an item of one of `module`'s own child module files: the parent as
    a facade (not counted unless --count-facades)."""
    return target is not None and any(
        c.file == target and c.file != module.file for c in module.children.values()
    )


def edges_of(crate, root, file, skip_child_reexports):
    text = crate.texts[file]
    regions = crate.regions[file]
    found = []  # (target, offset, path text)
    use_spans = []
    for use in uses_in(text):
        use_spans.append((use.start, use.end))
        module, _ = region_at(regions, use.start)
        for segs, _alias, glob, at in use.leaves:
            target = target_file(root, module, segs)
            if skip_child_reexports and use.public and reexports_own_child(module, target):
                continue
            if target is not None:
                found.append((target, at, "::".join(segs) + ("::*" if glob else "")))
    for m in INLINE_RE.finditer(text):
        at = m.start(1)
        if any(a <= at < b for a, b in use_spans):
            continue
        if VISIBILITY_RE.search(text, max(0, at - 20), at):
            continue  # `pub(in crate::x)` names where an item is seen, not what it uses
        segs = [s.strip() for s in m.group(1).split("::")]
        if segs[0] == "Self":
            continue
        module, _ = region_at(regions, at)
        target = target_file(root, module, segs)
        if target is not None:
            found.append((target, at, "::".join(segs)))
    edges = {}
    for target, at, shown in found:
        if target == file or target in edges:
            continue
        line = text.count("\n", 0, at) + 1
        edges[target] = (line, shown)
    return edges


def tarjan(nodes, succ):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        # Iterative, so a deep module graph cannot hit Python's recursion limit.
        work = [(v, iter(sorted(succ.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def allowed(comp, module_of):
    """A file and its own error type: `error.rs` beside the other file, or under it."""
    if len(comp) != 2:
        return False
    for err, other in (comp, comp[::-1]):
        if os.path.basename(err) != "error.rs":
            continue
        e, o = module_of[err], module_of[other]
        if e.parent is not None and (e.parent is o or e.parent is o.parent):
            return True
    return False


def crate_members(root):
    path = os.path.join(root, "Cargo.toml")
    if tomllib is not None:
        with open(path, "rb") as f:
            return tomllib.load(f).get("workspace", {}).get("members", [])
    text = open(path, encoding="utf-8").read()
    m = re.search(r"^\s*members\s*=\s*\[([^\]]*)\]", text, re.M)
    return re.findall(r'"([^"]+)"', m.group(1)) if m else []


def check_crate(root_dir, member, rel, skip_child_reexports):
    src = os.path.join(root_dir, member, "src")
    roots = [os.path.join(src, n) for n in ("lib.rs", "main.rs") if os.path.isfile(os.path.join(src, n))]
    bin_dir = os.path.join(src, "bin")
    if os.path.isdir(bin_dir):
        roots += sorted(os.path.join(bin_dir, n) for n in os.listdir(bin_dir) if n.endswith(".rs"))
    bad = 0
    for root_file in roots:
        crate = Crate()
        root = Module((), root_file, None)
        load_file(crate, root_file, root, True)
        module_of = {f: ms[0] for f, ms in crate.modules.items()}
        succ = {f: edges_of(crate, root, f, skip_child_reexports) for f in crate.modules}
        for comp in tarjan(list(crate.modules), succ):
            if len(comp) < 2:
                continue
            ok = allowed(comp, module_of)
            bad += not ok
            label = "allowed (a file and its error type)" if ok else "CIRCLE"
            print(f"{rel(root_file)}: {label}, {len(comp)} files")
            for f in comp:
                print(f"  {rel(f)}")
            members = set(comp)
            for f in comp:
                for t, (line, shown) in sorted(succ[f].items()):
                    if t in members:
                        print(f"    {rel(f)}:{line}: {shown}  -> {rel(t)}")
            print()
    return bad


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=here, help="the workspace (default: this script's repository)")
    ap.add_argument("--crate", action="append", help="only this member (a path as in Cargo.toml); repeatable")
    ap.add_argument(
        "--count-facades",
        action="store_true",
        help="count a parent's `pub use` of its own child module's items as an edge "
        "(by default such a facade is no dependency)",
    )
    args = ap.parse_args()
    skip_child_reexports = not args.count_facades
    root_dir = os.path.abspath(args.root)
    members = args.crate or crate_members(root_dir)

    def rel(p):
        return os.path.relpath(p, root_dir)

    bad = sum(check_crate(root_dir, m, rel, skip_child_reexports) for m in members)
    if bad:
        print(f"{bad} import circle(s) beyond a file and its error type")
        return 1
    print("no import circles beyond a file and its error type")
    return 0


if __name__ == "__main__":
    sys.exit(main())
