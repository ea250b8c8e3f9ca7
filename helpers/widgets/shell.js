// The explorer shell (helpers/widgets/shell.py): read the controls, show their values, and call the
// explorer's draw(root, values, data) at the start and on every change. Also small SVG helpers.

function esc(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")
    .replace(/'/g, "&#x27;");  // as Python's html.escape
}

// One control's value: data-options (a list, indexed by the slider), data-base (base * 10**x),
// a checkbox's state, a drop-down's string, or the slider's number.
function controlValue(el) {
  const options = el.getAttribute("data-options"), base = el.getAttribute("data-base");
  if (options !== null) return JSON.parse(options)[parseInt(el.value, 10)];
  if (base !== null) return parseFloat(base) * 10 ** parseFloat(el.value);
  if (el.type === "checkbox") return el.checked;
  if (el.tagName.toLowerCase() === "select") return el.value;
  return parseFloat(el.value);
}

// A value as its control shows it, by the unit its <span class="shown" data-unit> names.
function showValue(v, unit) {
  const sig = x => String(Number(x.toPrecision(3)));
  if (unit === "count") {
    for (const [u, s] of [[1e9, "B"], [1e6, "M"], [1e3, "k"]]) if (v >= u) return sig(v / u) + s;
    return sig(v);
  }
  if (unit === "s") {
    for (const [u, s] of [[1, "s"], [1e-3, "ms"], [1e-6, "µs"]]) if (v >= u) return sig(v / u) + " " + s;
    return sig(v * 1e9) + " ns";
  }
  if (unit === "s/B") return `${v.toExponential(1)} s/B (${sig(1 / v / 1e9)} GB/s)`;
  if (typeof v === "number" && !Number.isInteger(v)) return sig(v) + (unit ? " " + unit : "");
  return String(v) + (unit ? " " + unit : "");
}

function start(root, draw) {
  const data = JSON.parse(root.querySelector("script.explorer-data").textContent);
  const controls = Array.from(root.querySelectorAll("input[data-key], select[data-key]"));
  const shown = Array.from(root.querySelectorAll("span.shown"));
  const readout = root.querySelector(".readout");
  function update() {
    const values = {};
    for (const el of controls) values[el.getAttribute("data-key")] = controlValue(el);
    for (const el of shown) el.textContent = showValue(values[el.getAttribute("data-key")], el.getAttribute("data-unit"));
    try {
      draw(root, values, data);
    } catch (err) {
      readout.textContent = "The explorer could not draw this setting: " + err.message;
    }
  }
  for (const el of controls) {
    el.addEventListener("input", update);
    el.addEventListener("change", update);
  }
  update();
}

// --- SVG helpers ---------------------------------------------------------------------------

// About n round ticks, [0, step, 2 step, ...], the last one at top or just past it.
function ticks(top, n = 5) {
  const raw = top / n, mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map(m => m * mag).find(s => s >= raw);
  const out = [];
  for (let i = 0; i <= Math.ceil(top / step - 1e-9); i++) out.push(Number((i * step).toPrecision(6)));
  return out;
}

function text(x, y, s, attrs = "") {
  return `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}" font-size="10" ${attrs}>${esc(s)}</text>`;
}

function rect(x, y, w, h, fill, attrs = "") {
  return `<rect x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${Math.max(0, w).toFixed(1)}" ` +
    `height="${h.toFixed(1)}" fill="${fill}" ${attrs}/>`;
}

function line(x1, y1, x2, y2, stroke, attrs = "") {
  return `<line x1="${x1.toFixed(1)}" y1="${y1.toFixed(1)}" x2="${x2.toFixed(1)}" y2="${y2.toFixed(1)}" ` +
    `stroke="${stroke}" ${attrs}/>`;
}

function legend(x, y, items) {  // items: [[label, colour], ...], in one row
  let s = "";
  for (const [label, colour] of items) {
    s += rect(x, y - 8, 10, 10, colour) + text(x + 14, y, label);
    x += 24 + 6 * label.length;
  }
  return s;
}
