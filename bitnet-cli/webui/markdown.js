// A small Markdown subset rendered straight to DOM nodes: paragraphs (single newlines kept
// as line breaks), headings, emphasis, strikethrough, inline code, fenced code blocks,
// lists (nested by indentation), blockquotes, rules, and links to http, https and mailto
// only. The text is untrusted (model output, imported files): it only ever becomes text
// nodes and a fixed set of elements built with createElement. No HTML is parsed, so a
// `<script>` or `<img onerror>` in the text is shown as those characters.

const SAFE_SCHEMES = new Set(["http:", "https:", "mailto:"]);

/// The URL as the browser would read it, when its scheme is one we allow; else null.
/// Relative URLs are refused: model text has no business pointing into this server.
export function safeUrl(raw) {
  let u;
  try {
    u = new URL(raw.trim());
  } catch {
    return null;
  }
  return SAFE_SCHEMES.has(u.protocol) ? u.href : null;
}

/// Replaces `container`'s children with `text` rendered.
export function renderMarkdown(text, container) {
  const frag = document.createDocumentFragment();
  renderBlocks(String(text).replace(/\r\n?/g, "\n").split("\n"), frag, 0);
  container.replaceChildren(frag);
}

// Each pattern runs in time linear in the line (no nested or overlapping quantifiers that
// could backtrack on a long hostile line); what they leave is trimmed by hand below.
const FENCE = /^ {0,3}(`{3,}|~{3,})(.*)$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t](.*))?$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const BULLET = /^( {0,12})([-*+])\s+(.*)$/;
const ORDERED = /^( {0,12})(\d{1,9})([.)])\s+(.*)$/;
const MAX_DEPTH = 12;

function blank(line) {
  return /^\s*$/.test(line);
}

/// The fence opening `line` and its language, or null: a backtick fence's info string holds
/// no backtick.
function fenceOf(line) {
  const m = FENCE.exec(line);
  if (!m || (m[1][0] === "`" && m[2].includes("`"))) return null;
  return { fence: m[1], lang: m[2].trim().split(/[ \t]/)[0] };
}

/// A heading's text: trimmed, without a closing run of `#`.
function headingText(raw) {
  let t = (raw || "").trim();
  let k = t.length;
  while (k > 0 && t[k - 1] === "#") k--;
  if (k === 0 || t[k - 1] === " " || t[k - 1] === "\t") t = t.slice(0, k).trimEnd();
  return t;
}

function startsBlock(line) {
  return fenceOf(line) !== null || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
    BULLET.test(line) || ORDERED.test(line);
}

function renderBlocks(lines, parent, depth) {
  if (depth > MAX_DEPTH) {
    // Deep nesting from hostile input: the rest as plain text.
    const p = el("p");
    p.textContent = lines.join("\n");
    parent.appendChild(p);
    return;
  }
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (blank(line)) {
      i++;
      continue;
    }
    let m;
    const f = fenceOf(line);
    if (f) {
      const fence = f.fence;
      const body = [];
      i++;
      while (i < lines.length && !closesFence(lines[i], fence)) {
        body.push(lines[i]);
        i++;
      }
      i++; // the closing fence (or the end, while a reply streams)
      const pre = el("pre");
      const code = el("code");
      if (/^[\w+#.-]{1,32}$/.test(f.lang)) {
        code.className = "language-" + f.lang;
        pre.dataset.lang = f.lang;
      }
      code.textContent = body.join("\n");
      pre.appendChild(code);
      parent.appendChild(pre);
      continue;
    }
    if ((m = HEADING.exec(line))) {
      const h = el("h" + Math.min(m[1].length + 2, 6));
      renderInline(headingText(m[2]), h);
      parent.appendChild(h);
      i++;
      continue;
    }
    if (RULE.test(line)) {
      parent.appendChild(el("hr"));
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      const inner = [];
      while (i < lines.length && !blank(lines[i])) {
        const q = QUOTE.exec(lines[i]);
        inner.push(q ? q[1] : lines[i]);
        i++;
      }
      const bq = el("blockquote");
      renderBlocks(inner, bq, depth + 1);
      parent.appendChild(bq);
      continue;
    }
    if (BULLET.test(line) || ORDERED.test(line)) {
      i = renderList(lines, i, parent, depth);
      continue;
    }
    const para = [];
    while (i < lines.length && !blank(lines[i]) && (para.length === 0 || !startsBlock(lines[i]))) {
      para.push(lines[i].trim());
      i++;
    }
    const p = el("p");
    renderInline(para.join("\n"), p);
    parent.appendChild(p);
  }
}

function closesFence(line, fence) {
  const t = line.trim();
  return t.length >= fence.length && t[0] === fence[0] && /^(`+|~+)$/.test(t);
}

/// One list from line `i` on; returns the index after it.
function renderList(lines, i, parent, depth) {
  const first = BULLET.exec(lines[i]) || ORDERED.exec(lines[i]);
  const ordered = !BULLET.test(lines[i]);
  const indent = first[1].length;
  const list = el(ordered ? "ol" : "ul");
  if (ordered) {
    const start = parseInt(first[2], 10);
    if (start !== 1 && Number.isSafeInteger(start)) list.start = start;
  }
  while (i < lines.length) {
    const m = ordered ? ORDERED.exec(lines[i]) : BULLET.exec(lines[i]);
    if (!m || m[1].length !== indent) break;
    const item = [ordered ? m[4] : m[3]];
    const contentIndent = indent + 2;
    i++;
    // The item's further lines: indented past its marker, or lazy continuations of its
    // paragraph; a blank line followed by an indented one stays in the item.
    while (i < lines.length) {
      const l = lines[i];
      const lead = l.length - l.trimStart().length;
      if (blank(l)) {
        const next = lines[i + 1];
        if (next !== undefined && !blank(next) && next.length - next.trimStart().length >= contentIndent) {
          item.push("");
          i++;
          continue;
        }
        break;
      }
      if (lead >= contentIndent) {
        item.push(l.slice(Math.min(lead, contentIndent + 2)));
      } else if (!startsBlock(l)) {
        item.push(l.trim());
      } else {
        break;
      }
      i++;
    }
    const li = el("li");
    // The item's first lines read as inline text (a tight list); a nested list, code block
    // or second paragraph below them as blocks.
    let lead = 0;
    while (lead < item.length && !blank(item[lead]) && (lead === 0 || !startsBlock(item[lead]))) lead++;
    renderInline(item.slice(0, lead).map((l) => l.trim()).join("\n"), li);
    if (lead < item.length) renderBlocks(item.slice(lead), li, depth + 1);
    list.appendChild(li);
  }
  parent.appendChild(list);
  return i;
}

function el(tag) {
  return document.createElement(tag);
}

const PUNCT = /[!-/:-@[-`{-~]/;
/// How far a span's end is looked for: each opener scans at most this far, so hostile text
/// (a megabyte of `*` or `[` from an imported file) renders in linear time, not quadratic.
const REACH = 4000;
/// A link's label is short: its `]` is looked for this far.
const LABEL_REACH = 500;
const AUTOLINK = /<((?:https?:\/\/|mailto:)[^\s<>]{1,2000})>/y;
const BARE_URL = /https?:\/\/[^\s<>"]{1,2000}/iy;
const LINK_TARGET = /\(\s*<?([^\s<>()]{0,2000})>?(?:\s+("[^"]{0,500}"|'[^']{0,500}'))?\s*\)/y;

/// `re` (sticky) matched at `i`, or null.
function matchAt(re, text, i) {
  re.lastIndex = i;
  return re.exec(text);
}

/// Inline Markdown of `text` appended to `parent` as nodes.
export function renderInline(text, parent, inLink = false, depth = 0) {
  let buf = "";
  const flush = () => {
    if (buf) parent.appendChild(document.createTextNode(buf));
    buf = "";
  };
  // The next `](` at or after i (-1: none): a `[` with none near it is no link, found
  // without scanning.
  let close = -2;
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === "\\" && i + 1 < text.length && PUNCT.test(text[i + 1])) {
      buf += text[i + 1];
      i += 2;
      continue;
    }
    if (c === "\n") {
      flush();
      parent.appendChild(el("br"));
      i++;
      continue;
    }
    if (c === "`") {
      let n = 1;
      while (text[i + n] === "`") n++;
      const ticks = "`".repeat(n);
      const end = findRun(text, ticks, i + n);
      if (end >= 0) {
        flush();
        const code = el("code");
        let inner = text.slice(i + n, end).replace(/\n/g, " ");
        if (inner.length > 2 && inner[0] === " " && inner.endsWith(" ") && inner.trim()) {
          inner = inner.slice(1, -1);
        }
        code.textContent = inner;
        parent.appendChild(code);
        i = end + n;
        continue;
      }
      buf += ticks;
      i += n;
      continue;
    }
    if (depth < MAX_DEPTH && (c === "*" || c === "_" || (c === "~" && text[i + 1] === "~"))) {
      const span = emphasis(text, i);
      if (span) {
        flush();
        const node = el(span.tag);
        renderInline(text.slice(span.start, span.end), node, inLink, depth + 1);
        parent.appendChild(node);
        i = span.after;
        continue;
      }
    }
    if (!inLink && (c === "[" || (c === "!" && text[i + 1] === "["))) {
      if (close !== -1 && close < i) close = text.indexOf("](", i);
      const near = close >= 0 && close - i <= LABEL_REACH;
      const link = near ? linkAt(text, c === "!" ? i + 1 : i) : null;
      if (link) {
        flush();
        appendLink(parent, link.href, link.label, depth);
        i = link.after;
        continue;
      }
    }
    if (!inLink && c === "<") {
      const m = matchAt(AUTOLINK, text, i);
      if (m && safeUrl(m[1])) {
        flush();
        appendLink(parent, safeUrl(m[1]), null, depth, m[1]);
        i += m[0].length;
        continue;
      }
    }
    if (!inLink && (c === "h" || c === "H") && (i === 0 || !/\w/.test(text[i - 1]))) {
      const m = matchAt(BARE_URL, text, i);
      if (m) {
        const url = m[0].replace(/[.,;:!?'")\]}*_~]+$/, "");
        const href = url.length > 8 ? safeUrl(url) : null;
        if (href) {
          flush();
          appendLink(parent, href, null, depth, url);
          i += url.length;
          continue;
        }
      }
    }
    buf += c;
    i++;
  }
  flush();
}

function findRun(text, run, from) {
  let j = text.indexOf(run, from);
  while (j >= 0 && j < from + REACH) {
    // The closing run must be exactly as long.
    if (text[j + run.length] !== run[0] && (j === 0 || text[j - 1] !== run[0])) return j;
    j = text.indexOf(run, j + 1);
  }
  return -1;
}

/// An emphasis span opening at `i`: `**x**`, `__x__` (strong), `*x*`, `_x_` (em), `~~x~~`.
function emphasis(text, i) {
  const c = text[i];
  const double = text[i + 1] === c;
  if (c === "~" && !double) return null;
  const marker = double ? c + c : c;
  const start = i + marker.length;
  if (start >= text.length || /\s/.test(text[start])) return null;
  // `_` inside a word (snake_case) is no emphasis.
  if (c === "_" && i > 0 && /\w/.test(text[i - 1])) return null;
  let j = text.indexOf(marker, start + 1);
  while (j >= 0 && j < start + REACH) {
    const closes = !/\s/.test(text[j - 1]) &&
      (double || text[j + 1] !== c) &&
      !(c === "_" && /\w/.test(text[j + marker.length] || ""));
    if (closes) {
      const tag = c === "~" ? "del" : double ? "strong" : "em";
      return { tag, start, end: j, after: j + marker.length };
    }
    j = text.indexOf(marker, j + 1);
  }
  return null;
}

/// `[label](url "title")` at `i`: its parts, or null when it is no link or its URL is not
/// one we allow (then the characters stay text).
function linkAt(text, i) {
  let depth = 0;
  let j = i;
  const end = Math.min(text.length, i + LABEL_REACH);
  for (; j < end; j++) {
    if (text[j] === "\\") {
      j++;
      continue;
    }
    if (text[j] === "[") depth++;
    else if (text[j] === "]" && --depth === 0) break;
  }
  if (j >= end || text[j + 1] !== "(") return null;
  const m = matchAt(LINK_TARGET, text, j + 1);
  if (!m) return null;
  const href = safeUrl(m[1]);
  if (!href) return null;
  return { label: text.slice(i + 1, j), href, after: j + 1 + m[0].length };
}

function appendLink(parent, href, label, depth, plain) {
  const a = el("a");
  a.href = href;
  a.rel = "noopener noreferrer nofollow";
  a.target = "_blank";
  if (label === null) a.textContent = plain;
  else renderInline(label, a, true, depth + 1);
  parent.appendChild(a);
}
