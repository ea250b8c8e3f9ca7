// Second GPU or second node? (helpers/widgets/prediction.py): theory.predictStep for an MLP of
// n_params at a global batch over p ranks, a line per machine, and S against p for every machine.
// values: n_params, global_batch, p; data: machines (as from_calibration and PRESETS give them), ranks.
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];

function machineStep(m, nParams, globalBatch, p) {
  const phases = theory.computePhases(m, nParams, nParams, globalBatch / p);
  return theory.predictStep(phases, theory.ddpBuckets(4 * nParams), p, m, m.contention);
}

function speedups(m, nParams, globalBatch, p) {
  const step = machineStep(m, nParams, globalBatch, p).step;
  return [step, machineStep(m, nParams, globalBatch, 1).step / step];
}

function readout(machines, nParams, globalBatch, p) {
  const rows = Object.entries(machines).map(([name, m]) => {
    const [step, s] = speedups(m, nParams, globalBatch, p);
    return `<li><b>${name}</b>: step ${theory.fixed(step * 1e3, 3)} ms, S(${p}) = <b>${theory.fixed(s, 2)}</b>, ` +
      `efficiency ${theory.fixed(s / p * 100, 0)}%</li>`;
  });
  return `An MLP of ${theory.fixed(nParams / 1e6, 2)} M parameters at a global batch of ` +
    `${theory.fixed(globalBatch, 0, true)}, over ${p} ranks:<ul>${rows.join("")}</ul>`;
}

function draw(root, values, data) {
  const n = Math.round(values.n_params), G = Math.max(1, Math.round(values.global_batch)), p = values.p;
  root.querySelector(".readout").innerHTML = readout(data.machines, n, G, p);
  const ranks = data.ranks, pmax = ranks[ranks.length - 1];
  const X0 = 50, X1 = 330, Y0 = 20, Y1 = 190;
  const px = q => X0 + Math.log2(q) / Math.log2(pmax) * (X1 - X0);
  const py = v => Y1 - (Math.log2(Math.max(v, 0.125)) + 3) / (Math.log2(pmax) + 3) * (Y1 - Y0);
  let s = text((X0 + X1) / 2, 12, "predicted speedup S(p), same global batch", 'font-size="11" text-anchor="middle"');
  s += rect(X0, Y0, X1 - X0, Y1 - Y0, "none", 'stroke="#999"');
  for (const v of [0.125, 0.5, 1, 2, 8, 32, 64].filter(v => v <= pmax)) {
    s += line(X0, py(v), X1, py(v), v === 1 ? "#999" : "#eee") + text(X0 - 3, py(v) + 3, v, 'font-size="9" text-anchor="end"');
  }
  for (const q of ranks) s += text(px(q), Y1 + 12, q, 'font-size="9" text-anchor="middle"');
  s += text((X0 + X1) / 2, Y1 + 26, "ranks p", 'text-anchor="middle"');
  const path = pts => pts.map(([q, v], i) => (i ? "L" : "M") + px(q).toFixed(1) + "," + py(v).toFixed(1)).join("");
  s += `<path d="${path(ranks.map(q => [q, q]))}" fill="none" stroke="#999" stroke-dasharray="3,3"/>`;
  const entries = [["ideal S = p", "#999"]];
  Object.entries(data.machines).forEach(([name, m], i) => {
    const S = ranks.map(q => speedups(m, n, G, q)[1]);
    s += `<path d="${path(ranks.map((q, k) => [q, S[k]]))}" fill="none" stroke="${COLORS[i]}" stroke-width="2"/>`;
    s += `<circle cx="${px(p).toFixed(1)}" cy="${py(speedups(m, n, G, p)[1]).toFixed(1)}" r="4" fill="${COLORS[i]}"/>`;
    entries.push([name, COLORS[i]]);
  });
  entries.forEach(([name, color], i) => {
    s += rect(345, 30 + 18 * i, 10, 10, color) + text(360, 39 + 18 * i, name, 'font-size="9"');
  });
  root.querySelector("svg").innerHTML = s;
}
