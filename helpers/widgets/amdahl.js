// Amdahl's and Gustafson's laws (helpers/widgets/amdahl.py): two log-scale panels, speedup and
// efficiency S / p, with the point at the chosen p marked. values: alpha, p; data: p_max.
function draw(root, values, data) {
  const a = values.alpha, p = values.p, PMAX = data.p_max;
  const W = 300, H = 220, M = {l: 42, r: 10, t: 18, b: 32};
  const amdahl = q => theory.amdahl(q, a), gustafson = q => theory.gustafson(q, a);
  const lx = q => M.l + Math.log2(q) / Math.log2(PMAX) * (W - M.l - M.r);
  const ly = v => H - M.b - Math.log2(v) / Math.log2(PMAX) * (H - M.t - M.b);
  const ey = v => H - M.b - v * (H - M.t - M.b);
  const panel = (x0, title, ylab, ymap, series, yticks) => {
    let s = `<g transform="translate(${x0},0)">` + text(W / 2, 12, title, 'font-size="11" text-anchor="middle"');
    s += rect(M.l, M.t, W - M.l - M.r, H - M.t - M.b, "none", 'stroke="#999"');
    for (let k = 0; k <= Math.log2(PMAX); k += 2) {
      s += text(lx(2 ** k), H - M.b + 12, 2 ** k, 'font-size="9" text-anchor="middle"');
    }
    for (const v of yticks) {
      s += text(M.l - 3, ymap(v) + 3, v, 'font-size="9" text-anchor="end"');
      s += line(M.l, ymap(v), W - M.r, ymap(v), "#eee");
    }
    s += text(W / 2 + 15, H - 4, "devices p", 'text-anchor="middle"');
    s += `<text transform="translate(10,${H / 2}) rotate(-90)" font-size="10" text-anchor="middle">${ylab}</text>`;
    for (const [f, color, dash] of series) {
      let d = "";
      for (let i = 0; i <= 120; i++) {
        const q = 2 ** (i / 120 * Math.log2(PMAX)), y = Math.max(M.t, Math.min(H - M.b, ymap(f(q))));
        d += (i ? "L" : "M") + lx(q).toFixed(1) + "," + y.toFixed(1);
      }
      s += `<path d="${d}" fill="none" stroke="${color}" stroke-width="2" stroke-dasharray="${dash}"/>`;
    }
    return s + "</g>";
  };
  const sticks = [1, 4, 16, 64, 256, 1024].filter(v => v <= PMAX);
  let s = panel(0, "speedup", "S", ly, [[q => q, "#999", "3,3"], [amdahl, "#1f77b4", ""],
                [gustafson, "#ff7f0e", ""], [q => 1 / a, "#1f77b4", "6,3"]], sticks);
  s += panel(W + 10, "efficiency S / p", "S / p", ey, [[q => amdahl(q) / q, "#1f77b4", ""],
             [q => gustafson(q) / q, "#ff7f0e", ""]], [0, 0.25, 0.5, 0.75, 1]);
  const S = amdahl(p), G = gustafson(p);
  s += `<circle cx="${lx(p)}" cy="${ly(S)}" r="4" fill="#1f77b4"/>`;
  s += `<circle cx="${W + 10 + lx(p)}" cy="${ey(S / p)}" r="4" fill="#1f77b4"/>`;
  root.querySelector("svg").innerHTML = s;
  const f = theory.fixed;  // Python's rounding, so the first draw repeats amdahl.py's readout exactly
  root.querySelector(".readout").innerHTML = `α = ${f(a, 3)}, p = ${p}: Amdahl S = <b>${f(S, 2)}</b> ` +
    `(efficiency ${f(S / p, 2)}, ceiling 1/α = ${f(1 / a, 1)}); ` +
    `Gustafson S = <b>${f(G, 1)}</b> (efficiency ${f(G / p, 2)})`;
}
