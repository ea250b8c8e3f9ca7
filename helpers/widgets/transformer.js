// Will my transformer fit? (helpers/widgets/transformer.py): theory.transformer's bill for the chosen
// setting (theory.js's port), its readout (Python's readout_html, mirrored), and stacked bars of the
// bytes on one GPU under each recomputation, beside the 80 GB and 141 GB lines.
// values: layers, hidden, heads, seq, micro_batch, vocab, bytes_per_value, stage, dp, tp, sp,
// recompute, attention, dropout, fp32_grad_accum; data: GB, gpus, recompute, colors.
const PARAMS_UNITS = [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "k"]];
const FLOP_UNITS = [[1e12, "TFLOP"], [1e9, "GFLOP"], [1e6, "MFLOP"], [1e3, "kFLOP"]];
const BYTE_UNITS = [[1e12, "TB"], [1e9, "GB"], [1e6, "MB"], [1e3, "kB"]];
const GPU_GB = [80, 141], GB = 1e9;

function si(x, units) {
  for (const [u, name] of units) if (x >= u) return `${theory.fixed(x / u, 2)} ${name}`;
  return theory.fixed(x, 0) + (units === FLOP_UNITS ? " FLOP" : units === BYTE_UNITS ? " bytes" : "");
}

// transformer.bill: parameters, a TP rank's, FLOPs a token, 6N, one GPU's states, activations by recomputation.
function bill(v) {
  const shape = {layers: v.layers, hidden: v.hidden, heads: v.heads, seq: v.seq, vocab: v.vocab};
  const n = theory.parameterCount(shape), rank = theory.parametersPerRank(shape, v.tp);
  const activations = {};
  for (const r of theory.RECOMPUTE) {
    activations[r] = theory.modelActivationBytes(shape, v.micro_batch, {tp: v.tp, sp: v.sp, recompute: r,
      attention: v.attention, bytesPerValue: v.bytes_per_value, dropout: v.dropout});
  }
  return {parameters: n, per_rank: rank, flops_per_token: theory.flopsPerToken(shape, v.recompute),
          six_n: theory.sixN(n), states: theory.modelStates(rank, v.stage, v.dp, v.bytes_per_value === 2,
                                                             v.fp32_grad_accum), activations};
}

function title(v) {
  return `${v.layers} layers, hidden ${v.hidden}, ${v.heads} heads, ${v.seq} tokens x ` +
    `micro-batch ${v.micro_batch}, vocabulary ${theory.fixed(v.vocab, 0, true)}, ${v.bytes_per_value}-byte values; ` +
    `${v.stage} over ${v.dp} GPU${v.dp > 1 ? "s" : ""} x TP ${v.tp}${v.sp ? " with SP" : ""}, ` +
    `recomputation ${v.recompute}, ${v.attention} attention${v.dropout ? ", dropout" : ""}`;
}

function readout(v) {
  const b = bill(v);
  const states = Object.values(b.states).reduce((s, x) => s + x, 0), act = b.activations[v.recompute];
  const total = states + act;
  const fits = GPU_GB.filter(g => total <= g * GB);
  const verdict = fits.length === GPU_GB.length ? `fits in ${fits[0]} GB`
    : fits.length ? `fits in ${fits[0]} GB, not in ${GPU_GB[0]} GB` : `does not fit in ${GPU_GB[GPU_GB.length - 1]} GB`;
  return `<b>${esc(title(v))}</b><br>${si(b.parameters, PARAMS_UNITS)} parameters, ` +
    `${si(b.per_rank, PARAMS_UNITS)} on each TP rank; ${si(b.flops_per_token, FLOP_UNITS)} a token ` +
    `(6N: ${si(b.six_n, FLOP_UNITS)})<br>Per GPU: model states ${si(states, BYTE_UNITS)} + activations ` +
    `${si(act, BYTE_UNITS)} = <b>${si(total, BYTE_UNITS)}</b>: ${verdict}`;
}

function draw(root, values, data) {
  root.querySelector(".readout").innerHTML = readout(values);
  const b = bill(values);
  const rows = data.recompute.map(r => [r, {...b.states, activations: b.activations[r]}]);
  const sum = o => Object.values(o).reduce((s, x) => s + x, 0);
  const top = Math.max(...data.gpus.map(g => g * data.GB), ...rows.map(([, o]) => sum(o)));
  const X0 = 150, X1 = 610, Y0 = 10, ROW = 30;
  const xs = ticks(top / data.GB), xmax = xs[xs.length - 1];
  const x = bytes => X0 + bytes / data.GB / xmax * (X1 - X0);
  const yAxis = Y0 + ROW * rows.length + 4;
  let s = "";
  for (const t of xs) {
    s += line(x(t * data.GB), Y0, x(t * data.GB), yAxis, "#eee");
    s += text(x(t * data.GB), yAxis + 12, t.toLocaleString("en-US"), 'font-size="9" text-anchor="middle"');
  }
  s += text((X0 + X1) / 2, yAxis + 25, "GB per GPU", 'text-anchor="middle"');
  rows.forEach(([r, bytes], i) => {
    const y = Y0 + ROW * i + 4, chosen = r === values.recompute;
    s += text(X0 - 6, y + 15, `recompute ${r}`, `text-anchor="end"${chosen ? ' font-weight="bold"' : ""}`);
    let left = 0;
    for (const [kind, v] of Object.entries(bytes)) {
      s += rect(x(left), y, x(left + v) - x(left), ROW - 10, data.colors[kind] || "black");
      left += v;
    }
  });
  for (const g of data.gpus) {
    s += line(x(g * data.GB), Y0, x(g * data.GB), yAxis, "red", 'stroke-dasharray="5,3" stroke-width="1.5"');
    s += text(x(g * data.GB) + 3, Y0 + 8, `${g} GB`, 'fill="red" font-size="9"');
  }
  const kinds = [...new Set(rows.flatMap(([, o]) => Object.keys(o)))];
  s += legend(10, yAxis + 44, kinds.map(k => [k, data.colors[k] || "black"]).concat([["GPU memory", "red"]]));
  root.querySelector("svg").innerHTML = s;
}
