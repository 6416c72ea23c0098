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

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const BULLET = /^( {0,12})([-*+])\s+(.*)$/;
const ORDERED = /^( {0,12})(\d{1,9})([.)])\s+(.*)$/;
const MAX_DEPTH = 12;

function blank(line) {
  return /^\s*$/.test(line);
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
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
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length && !closesFence(lines[i], fence)) {
        body.push(lines[i]);
        i++;
      }
      i++; // the closing fence (or the end, while a reply streams)
      const pre = el("pre");
      const code = el("code");
      if (/^[\w+#.-]{1,32}$/.test(m[2])) {
        code.className = "language-" + m[2];
        pre.dataset.lang = m[2];
      }
      code.textContent = body.join("\n");
      pre.appendChild(code);
      parent.appendChild(pre);
      continue;
    }
    if ((m = HEADING.exec(line))) {
      const h = el("h" + Math.min(m[1].length + 2, 6));
      renderInline(m[2] || "", h);
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
    if (item.length === 1 || item.slice(1).every((l) => !startsBlock(l) && !blank(l))) {
      renderInline(item.map((l) => l.trim()).join("\n"), li);
    } else {
      renderBlocks(item, li, depth + 1);
    }
    list.appendChild(li);
  }
  parent.appendChild(list);
  return i;
}

function el(tag) {
  return document.createElement(tag);
}

const PUNCT = /[!-/:-@[-`{-~]/;

/// Inline Markdown of `text` appended to `parent` as nodes.
export function renderInline(text, parent, inLink = false, depth = 0) {
  let buf = "";
  const flush = () => {
    if (buf) parent.appendChild(document.createTextNode(buf));
    buf = "";
  };
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
        if (/^ .*[^ ].* $/.test(inner)) inner = inner.slice(1, -1);
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
      const link = linkAt(text, c === "!" ? i + 1 : i);
      if (link) {
        flush();
        appendLink(parent, link.href, link.label, depth);
        i = link.after;
        continue;
      }
    }
    if (!inLink && c === "<") {
      const m = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/.exec(text.slice(i));
      if (m && safeUrl(m[1])) {
        flush();
        appendLink(parent, safeUrl(m[1]), null, depth, m[1]);
        i += m[0].length;
        continue;
      }
    }
    if (!inLink && (c === "h" || c === "H") && (i === 0 || !/\w/.test(text[i - 1]))) {
      const m = /^https?:\/\/[^\s<>"]+/i.exec(text.slice(i));
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
  while (j >= 0) {
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
  while (j >= 0) {
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
  for (; j < text.length; j++) {
    if (text[j] === "\\") {
      j++;
      continue;
    }
    if (text[j] === "[") depth++;
    else if (text[j] === "]" && --depth === 0) break;
  }
  if (j >= text.length || text[j + 1] !== "(") return null;
  const m = /^\(\s*<?([^\s<>()]*)>?(?:\s+("[^"]*"|'[^']*'))?\s*\)/.exec(text.slice(j + 1));
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
