// A page with one explorer, without a browser: tests/test_explorers.py parses an explorer's HTML
// into elements (tag, attributes, text), and this runs the explorer's own <script> against them
// with just the DOM that helpers/widgets/*.js use (getElementById, querySelector(All) by tag,
// class and [attribute], value, checked, getAttribute, addEventListener, innerHTML, textContent).
// Then it moves every control in turn and reports the readout before and after.
// stdin: {elements: [{tag, attrs, text, options}], script}; stdout: JSON (see the end).
const fs = require("fs"), vm = require("vm");
const page = JSON.parse(fs.readFileSync(0, "utf8"));

class Element {
  constructor({tag, attrs, text, options}) {
    this.tagName = tag.toUpperCase();
    this.attrs = attrs;
    this.options = options || [];
    this.textContent = text || "";
    this.innerHTML = text || "";
    this.listeners = {};
    this.type = attrs.type || "";
    this.checked = "checked" in attrs;
    this.value = tag === "select" ? (options.find(o => o.selected) || options[0]).value : attrs.value || "";
  }
  getAttribute(k) { return k in this.attrs ? this.attrs[k] : null; }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  addEventListener(type, f) { (this.listeners[type] = this.listeners[type] || []).push(f); }
  fire(type) { for (const f of this.listeners[type] || []) f({type, target: this}); }
  matches(selector) {
    return selector.split(",").some(one => {
      const m = one.trim().match(/^([a-z]*)((?:\.[\w-]+)*)((?:\[[\w-]+\])*)$/);
      if (!m) throw new Error("fake_dom.js cannot match " + one);
      const classes = (this.attrs.class || "").split(/\s+/);
      return (!m[1] || this.tagName === m[1].toUpperCase())
        && m[2].split(".").slice(1).every(c => classes.includes(c))
        && (m[3].match(/[\w-]+/g) || []).every(a => a in this.attrs);
    });
  }
}

const elements = page.elements.map(e => new Element(e));
const root = elements[0];
root.querySelectorAll = sel => elements.slice(1).filter(e => e.matches(sel));
root.querySelector = sel => root.querySelectorAll(sel)[0] || null;
const document = {getElementById: id => elements.find(e => e.attrs.id === id) || null};
vm.runInContext(page.script, vm.createContext({document}));

const readout = root.querySelector(".readout"), svg = root.querySelector("svg");
const shown = () => root.querySelectorAll("span.shown").map(e => e.textContent);
const result = {first: readout.innerHTML, svg: svg.innerHTML.length, shown: shown(), moves: []};
for (const el of root.querySelectorAll("input[data-key], select[data-key]")) {
  const before = {value: el.value, checked: el.checked};
  const event = el.type === "range" ? "input" : "change";
  if (el.type === "checkbox") el.checked = !el.checked;
  else if (el.tagName === "SELECT") el.value = el.options.map(o => o.value).find(v => v !== el.value);
  else el.value = String(el.value === el.getAttribute("max") ? el.getAttribute("min") : el.getAttribute("max"));
  el.fire(event);
  const after = readout.innerHTML, svgAfter = svg.innerHTML;
  el.value = before.value;
  el.checked = before.checked;
  el.fire(event);
  result.moves.push({key: el.getAttribute("data-key"), moved: after, svg: svgAfter.length,
                     back: readout.innerHTML, shown: shown()});
}
process.stdout.write(JSON.stringify(result));
