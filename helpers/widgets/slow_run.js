// Why is my multi-GPU run slower? (helpers/widgets/slow_run.py): theory.diagnose for the chosen
// setting as a card, the step's parts beside one process's, and the speedup for every p.
// values: n_params, per_rank_batch, t_per_sample, seconds_per_byte, step_latency, p, overlap;
// data: t_fixed, ranks (the p axis).
function draw(root, values, data) {
  const b = values.per_rank_batch, t = values.t_per_sample;
  const overlappable = values.overlap ? (2 / 3) * b * t : 0.0;
  const at = p => theory.diagnose(Math.trunc(values.n_params), b, t, p, values.step_latency,
                                  values.seconds_per_byte, overlappable, data.t_fixed);
  const d = at(values.p);
  root.querySelector(".readout").innerHTML = theory.diagnosisHtml(d, values.p);

  // Left: one step, one process against p ranks; under the compute, the all_reduce it hides.
  const exposed = d.step - d.t_compute, hidden = d.t_comm - exposed;
  const top = d.step, ms = v => v * 1e3;
  const X0 = 80, X1 = 320, xs = ticks(ms(top)), xmax = xs[xs.length - 1];
  const x = v => X0 + ms(v) / xmax * (X1 - X0);
  let s = text((X0 + X1) / 2, 12, "one step", 'font-size="11" text-anchor="middle"');
  for (const v of xs) {
    s += line(x(v / 1e3), 20, x(v / 1e3), 100, "#eee");
    s += text(x(v / 1e3), 112, v, 'font-size="9" text-anchor="middle"');
  }
  s += text((X0 + X1) / 2, 126, "ms", 'text-anchor="middle"');
  s += text(X0 - 6, 42, "1 process", 'text-anchor="end"') + rect(X0, 28, x(d.t_compute) - X0, 22, "#1f77b4");
  s += text(X0 - 6, 82, `${values.p} ranks`, 'text-anchor="end"') + rect(X0, 68, x(d.t_compute) - X0, 22, "#1f77b4");
  s += rect(x(d.t_compute), 68, x(d.step) - x(d.t_compute), 22, "#d62728");
  if (hidden > 0) {
    s += rect(x(d.t_compute - hidden), 92, x(d.t_compute) - x(d.t_compute - hidden), 5, "none",
              'stroke="#d62728" stroke-dasharray="3,2"');
  }
  s += legend(10, 150, [["compute", "#1f77b4"], ["exposed all_reduce", "#d62728"]]);
  s += rect(10, 164, 10, 10, "none", 'stroke="#d62728" stroke-dasharray="3,2"') +
    text(24, 172, "all_reduce hidden by overlap");

  // Right: throughput of p ranks over one process, on log axes, with ideal p dotted and 1 marked.
  const P0 = 400, P1 = 690, Q0 = 20, Q1 = 130, ranks = data.ranks, pmax = ranks[ranks.length - 1];
  const S = ranks.map(at).map(r => r.speedup);
  const lo = Math.min(0.125, ...S), hi = pmax;
  const px = p => P0 + Math.log2(p) / Math.log2(pmax) * (P1 - P0);
  const py = v => Q1 - (Math.log2(v) - Math.log2(lo)) / (Math.log2(hi) - Math.log2(lo)) * (Q1 - Q0);
  s += text((P0 + P1) / 2, 12, "speedup over one process", 'font-size="11" text-anchor="middle"');
  s += rect(P0, Q0, P1 - P0, Q1 - Q0, "none", 'stroke="#999"');
  for (const v of [0.125, 1, 8, 64, 512].filter(v => v >= lo && v <= hi)) {
    s += line(P0, py(v), P1, py(v), v === 1 ? "#999" : "#eee") + text(P0 - 3, py(v) + 3, v, 'font-size="9" text-anchor="end"');
  }
  for (const p of ranks.filter((_, i) => i % 2 === 0)) s += text(px(p), Q1 + 12, p, 'font-size="9" text-anchor="middle"');
  s += text((P0 + P1) / 2, Q1 + 26, "ranks p", 'text-anchor="middle"');
  const path = pts => pts.map(([p, v], i) => (i ? "L" : "M") + px(p).toFixed(1) + "," + py(v).toFixed(1)).join("");
  s += `<path d="${path(ranks.map(p => [p, p]))}" fill="none" stroke="#999" stroke-dasharray="3,3"/>`;
  s += `<path d="${path(ranks.map((p, i) => [p, S[i]]))}" fill="none" stroke="#1f77b4" stroke-width="2"/>`;
  s += `<circle cx="${px(values.p).toFixed(1)}" cy="${py(d.speedup).toFixed(1)}" r="4" fill="#1f77b4"/>`;
  s += legend(P0, 172, [["this model", "#1f77b4"], ["ideal S = p", "#999"]]);
  root.querySelector("svg").innerHTML = s;
}
