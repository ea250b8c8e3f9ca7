// The MyST the book's notebooks use, rewritten to the Markdown and HTML that JupyterLab's own
// renderer shows: glued values ({glue:text}, formatted as the web book formats them, or a
// marker naming the cell that computes them), {doc} links that open the chapter, {cite} as
// the web book's [Author, year] with the full reference on hover, {download}, {math}, {term},
// admonitions and figures. Pure: no JupyterLab here, so tests/test_lab_prose.py runs it under node.
const {formatPlainText} = require("./pyformat");

const ADMONITIONS = {
  note: "Note", tip: "Tip", hint: "Hint", important: "Important", warning: "Warning",
  caution: "Caution", attention: "Attention", danger: "Danger", error: "Error", seealso: "See also",
};

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})[c]);
}

// Text shown as is: HTML-escaped, and Markdown's and TeX's active characters as entities, so a
// value with "_" or "$" in it is neither emphasis nor math once the renderer sees it.
function escapeText(s) {
  return escapeHtml(s).replace(/[\\*_`[\]~$|]/g, c => `&#${c.charCodeAt(0)};`);
}

// "docs/path" relative to the notebook's folder ("notebooks"), normalized: "../book/x" -> "book/x".
function docName(target, folder) {
  const parts = target.startsWith("/") ? [] : folder.split("/").filter(Boolean);
  for (const p of target.replace(/^\//, "").split("/")) {
    if (p === "..") parts.pop(); else if (p !== ".") parts.push(p);
  }
  return parts.join("/");
}

function relative(path, folder) {
  const from = folder.split("/").filter(Boolean), to = path.split("/");
  while (from.length && to.length > 1 && from[0] === to[0]) { from.shift(); to.shift(); }
  return "../".repeat(from.length) + to.join("/");
}

// "text <target>" or "target"
function titled(content) {
  const m = /^([\s\S]*?)\s*<([^<>]+)>$/.exec(content);
  return m ? {text: m[1], target: m[2]} : {text: null, target: content};
}

function glue(content, ctx) {
  const colon = content.lastIndexOf(":");
  const [name, spec] = colon < 0 ? [content, "s"] : [content.slice(0, colon), content.slice(colon + 1)];
  const key = name.includes("::") ? name.split("::")[1] : name;
  const value = ctx.values[key];
  if (value === undefined) {
    const cell = ctx.producers[key];
    const where = cell ? `cell ${cell}` : "a cell above";
    // the title starts with the name, as a computed value's does
    const tip = cell ? `${key}: run the chapter's code cells up to cell ${cell}, which computes it`
      : `${key}: run the chapter's code cells above, which compute it`;
    return `<span class="book-glue book-glue-pending" title="${escapeHtml(tip)}">⟨${where}⟩</span>`;
  }
  let text;
  try {
    text = formatPlainText(value, spec);
  } catch (e) {
    text = `${value} (${e.message})`;
  }
  return `<span class="book-glue" title="${escapeHtml(key)}">${escapeText(text)}</span>`;
}

function cite(content, ctx) {
  const refs = content.split(",").map(k => k.trim()).filter(Boolean).map(key => {
    const ref = ctx.cites[key];
    const href = relative("book/references.md", ctx.folder);
    return ref ? `<a href="${href}" title="${escapeHtml(ref.full)}">${escapeText(ref.label)}</a>`
      : `<a href="${href}">${escapeText(key)}</a>`;
  });
  return `[${refs.join("; ")}]`;
}

function doc(content, ctx) {
  const {text, target} = titled(content);
  const name = docName(target, ctx.folder), known = ctx.docs[name];
  const file = known ? known.file : `${name}.ipynb`;
  return `<a href="${escapeHtml(relative(file, ctx.folder))}">${escapeText(text || (known ? known.title : target))}</a>`;
}

function download(content, ctx) {
  const {text, target} = titled(content);
  return `<a href="${escapeHtml(target)}" download>${escapeText(text || target.split("/").pop())}</a>`;
}

const ROLES = {
  "glue": glue, "glue:text": glue, "cite": cite, "cite:p": cite, "cite:t": cite, "doc": doc,
  "download": download,
  "math": content => `$${content}$`,
  "term": content => escapeText(titled(content).text || content),
  "sub": content => `<sub>${escapeText(content)}</sub>`,
  "sup": content => `<sup>${escapeText(content)}</sup>`,
};

function roles(line, ctx) {
  // {role}`content`, with the backticks of MyST (one or more, matched in pairs)
  return line.replace(/\{([a-z][\w:-]*)\}(`+)([\s\S]*?[^`])\2(?!`)/g, (whole, role, _, content) =>
    ROLES[role] ? ROLES[role](content, ctx) : whole);
}

function directive(name, arg, body, ctx) {
  const lines = body.split("\n");
  const options = {};
  while (lines.length && /^:[\w-]+:/.test(lines[0])) {
    const [, key, value] = /^:([\w-]+):\s*(.*)$/.exec(lines.shift());
    options[key] = value;
  }
  const inner = rewrite(lines.join("\n").trim(), ctx);
  if (name === "figure" || name === "image") {
    const img = `<img src="${escapeHtml(arg)}" alt="${escapeHtml(options.alt || "")}"` +
      (options.width ? ` width="${escapeHtml(options.width)}"` : "") + ">";
    return name === "image" ? img : `<figure class="book-figure">${img}\n<figcaption>\n\n${inner}\n\n</figcaption></figure>`;
  }
  const title = name === "admonition" ? arg : ADMONITIONS[name];
  if (title === undefined) return null;
  const kind = name === "admonition" ? (options.class || "note") : name;
  return `<div class="book-admonition ${escapeHtml(kind)}">\n<p class="book-admonition-title">` +
    `${roles(escapeHtml(title), ctx)}</p>\n\n${inner}\n\n</div>`;
}

// ```{name} arg / :::{name} arg ... closing fence; plain ``` code blocks are left alone.
function rewrite(source, ctx) {
  const lines = source.split("\n"), out = [];
  for (let i = 0; i < lines.length; i++) {
    // a fence opens a directive ({name}) or a code block (any other info string, or none)
    const open = /^(\s*)(`{3,}|:{3,})\s*(?:(\{([\w:-]+)\}\s*(.*))|[^`]*)$/.exec(lines[i]);
    if (!open) {
      if (/^\([\w-]+\)=\s*$/.test(lines[i])) continue;  // a (label)= target: nothing to show
      out.push(roles(lines[i], ctx));
      continue;
    }
    const fence = open[2];
    let j = i + 1;
    while (j < lines.length && !(lines[j].trim().startsWith(fence) && lines[j].trim().replace(/[`:]/g, "") === "")) j++;
    const body = lines.slice(i + 1, j).join("\n");
    const html = open[3] ? directive(open[4], open[5].trim(), body, ctx) : null;
    if (html === null) out.push(...lines.slice(i, j + 1));
    else out.push(html);
    i = j;
  }
  return out.join("\n");
}

// ctx: {values: {name: text/plain}, producers: {name: code cell number}, docs: {docname:
// {title, file}}, cites: {key: {label, full}}, folder: the notebook's folder, from the root}
function toMarkdown(source, ctx) {
  return rewrite(source, {values: {}, producers: {}, docs: {}, cites: {}, folder: "notebooks", ...ctx});
}

module.exports = {toMarkdown, docName, relative};
