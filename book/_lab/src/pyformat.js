// Python's format(value, spec) for the specs the book's prose uses, and myst-nb's
// format_plain_text, which the web book applies to every {glue:text}: the same digits in
// JupyterLab as on the web, ties to even included. tests/test_lab_prose.py checks both
// against Python itself under node.

// round_half_even(|x| * 10**shift), exactly: x is m * 2**k, so the product is a rational.
function scaled(x, shift) {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, Math.abs(x));
  const hi = view.getUint32(0), lo = view.getUint32(4);
  const biased = (hi >>> 20) & 0x7ff;
  let m = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
  let k = biased - 1075;
  if (biased === 0) k = -1074; else m |= 1n << 52n;
  let num = m, den = 1n;
  if (shift >= 0) num *= 10n ** BigInt(shift); else den *= 10n ** BigInt(-shift);
  if (k >= 0) num <<= BigInt(k); else den <<= BigInt(-k);
  const q = num / den, twice = 2n * (num % den);
  return twice > den || (twice === den && q % 2n === 1n) ? q + 1n : q;
}

function group(whole, sep) {
  return sep ? whole.replace(/\B(?=(\d{3})+(?!\d))/g, sep) : whole;
}

function fixedDigits(x, digits, sep) {
  const s = scaled(x, digits).toString().padStart(digits + 1, "0");
  const whole = group(s.slice(0, s.length - digits), sep);
  return digits ? `${whole}.${s.slice(s.length - digits)}` : whole;
}

// [significand digits (precision + 1 of them), decimal exponent], rounded once, exactly.
function sciDigits(x, precision) {
  if (x === 0) return ["0".repeat(precision + 1), 0];
  let e = Math.floor(Math.log10(Math.abs(x)));
  for (;;) {  // log10 can be off by one near powers of ten: settle on the exponent that fits
    const n = scaled(x, precision - e).toString();
    if (n.length > precision + 1) e += 1;
    else if (n.length < precision + 1) e -= 1;
    else return [n, e];
  }
}

function sci(x, precision, upper) {
  const [n, e] = sciDigits(x, precision);
  const mant = precision ? `${n[0]}.${n.slice(1)}` : n;
  const exp = `${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  return mant + (upper ? "E" : "e") + exp;
}

function general(x, precision, upper) {
  const p = precision === 0 ? 1 : precision;
  if (x === 0) return "0";
  const [, e] = sciDigits(x, p - 1);
  let s = -4 <= e && e < p ? fixedDigits(x, p - 1 - e, "") : sci(x, p - 1, upper);
  // no '#': trailing zeros, and a bare point, go
  s = s.replace(/(\.\d*?)0+(?=$|[eE])/, "$1").replace(/\.(?=$|[eE])/, "");
  return s;
}

const SPEC = /^(?:(.)?([<>=^]))?([-+ ])?(0)?(\d+)?([,_])?(?:\.(\d+))?([eEfFgG%s])?$/;

function formatFloat(x, spec) {
  const m = SPEC.exec(spec);
  if (!m) throw new Error(`unsupported format spec ${JSON.stringify(spec)}`);
  const [, fill, align, sign = "-", zero, width, sep = "", prec, type] = m;
  if (type === "s") throw new Error(`format spec ${JSON.stringify(spec)} is for text, not a number`);
  let body;
  const a = Math.abs(x), neg = x < 0 || Object.is(x, -0);
  if (Number.isNaN(x)) body = "nan";
  else if (!Number.isFinite(x)) body = "inf";
  else if (type === "f" || type === "F") body = fixedDigits(a, prec === undefined ? 6 : +prec, sep);
  else if (type === "%") body = fixedDigits(a * 100, prec === undefined ? 6 : +prec, sep) + "%";
  else if (type === "e" || type === "E") body = sci(a, prec === undefined ? 6 : +prec, type === "E");
  else if (type === "g" || type === "G") body = general(a, prec === undefined ? 6 : +prec, type === "G");
  else throw new Error(`format spec ${JSON.stringify(spec)}: only e, f, g and % are supported for numbers`);
  if (type === "F" || type === "G" || type === "E") body = body.toUpperCase();
  const signed = (neg && !Number.isNaN(x) ? "-" : sign === "+" ? "+" : sign === " " ? " " : "") + body;
  return pad(signed, width ? +width : 0, fill || (zero ? "0" : " "), align || (zero ? "=" : ">"));
}

function pad(s, width, fill, align) {
  const n = width - [...s].length;
  if (n <= 0) return s;
  if (align === "<") return s + fill.repeat(n);
  if (align === "^") return fill.repeat(n >> 1) + s + fill.repeat(n - (n >> 1));
  if (align === "=" && /^[-+ ]/.test(s)) return s[0] + fill.repeat(n) + s.slice(1);
  return fill.repeat(n) + s;
}

// ast.literal_eval for what a kernel's text/plain holds: a string literal becomes its text;
// every other literal's str() is its repr, which is the text itself.
function literalText(text) {
  const m = /^([rRbBuU]*)('''|"""|'|")([\s\S]*)\2$/.exec(text.trim());
  if (!m || /[bB]/.test(m[1])) return {isString: false, text};
  const body = m[3];
  if (/[rR]/.test(m[1])) return {isString: true, text: body};
  const escapes = {n: "\n", t: "\t", r: "\r", "\\": "\\", "'": "'", '"': '"', a: "\x07", b: "\b", f: "\f", v: "\v", "\n": ""};
  const out = body.replace(/\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|[\s\S])/g, (_, e) => {
    if (/^[xuU]/.test(e)) return String.fromCodePoint(parseInt(e.slice(1), 16));
    if (/^[0-7]/.test(e)) return String.fromCodePoint(parseInt(e, 8));
    return e in escapes ? escapes[e] : `\\${e}`;
  });
  return {isString: true, text: out};
}

// myst_nb.core.variables.format_plain_text(text, fmt_spec), the web book's glue:text.
function formatPlainText(text, spec) {
  const value = literalText(text);
  if (spec === "" || spec === "s") return value.text;
  const type = spec[spec.length - 1];
  if ("eEfFgG%".includes(type)) {
    const x = Number(value.text.trim().replace(/_/g, ""));
    if (value.text.trim() === "" || Number.isNaN(x) && !/nan/i.test(value.text)) {
      throw new Error(`could not convert ${JSON.stringify(value.text)} to float`);
    }
    return formatFloat(x, spec);
  }
  throw new Error(`format spec ${JSON.stringify(spec)} is not one the book's prose uses`);
}

module.exports = {formatFloat, formatPlainText, literalText};
