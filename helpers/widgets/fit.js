// Does it fit? (helpers/widgets/fit.py): theory.advise for the chosen setting, its verdict, and
// stacked bars of the bytes on one device for each layout it tried, beside the device's memory.
// values: model, batch, device_gib, devices, optimizer, precision; data: models (each one's state
// bytes and activation bytes per sample, by optimizer and precision), seq, GIB, colors.
function draw(root, values, data) {
  const m = data.models[values.model][values.optimizer][values.precision];
  const deviceBytes = values.device_gib * data.GIB;
  const advice = theory.advise(m.states, m.act, values.batch, deviceBytes, values.devices);
  const title = `${values.model}: ${values.batch} x ${data.seq} tokens per step, ${values.optimizer}, ${values.precision}`;
  root.querySelector(".readout").innerHTML = `<b>${esc(title)}</b><br>${esc(theory.verdict(advice, values.device_gib))}`;

  const layouts = Object.entries(advice.per_device);
  const total = b => Object.values(b).reduce((s, v) => s + v, 0);
  const [pp, dp] = [advice.pp, advice.dp];
  const chosen = advice.strategy === null ? null : pp === 1 && dp === 1 ? "one device"
    : pp === 1 ? `DDP x${dp}` : dp === 1 ? `pipeline, ${pp} stages` : `hybrid, ${pp} stages x ${dp} replicas`;
  const top = Math.max(deviceBytes, ...layouts.map(([, b]) => total(b)));
  const [unit, uname] = [[2 ** 30, "GiB"], [2 ** 20, "MiB"], [2 ** 10, "KiB"], [1, "bytes"]].find(([u]) => top >= u);
  const X0 = 190, X1 = 610, Y0 = 10, ROW = 30;
  const xs = ticks(top / unit);
  const xmax = xs[xs.length - 1];
  const x = b => X0 + b / unit / xmax * (X1 - X0);
  const yAxis = Y0 + ROW * layouts.length + 4;
  let s = "";
  for (const t of xs) {
    s += line(x(t * unit), Y0, x(t * unit), yAxis, "#eee");
    s += text(x(t * unit), yAxis + 12, t.toLocaleString("en-US"), 'font-size="9" text-anchor="middle"');
  }
  s += text((X0 + X1) / 2, yAxis + 25, `${uname} per device`, 'text-anchor="middle"');
  layouts.forEach(([name, bytes], i) => {
    const y = Y0 + ROW * i + 4, fits = total(bytes) <= deviceBytes;
    const mark = name === chosen ? " (chosen)" : fits ? " (fits)" : "";
    s += text(X0 - 6, y + 15, name + mark, `text-anchor="end"${name === chosen ? ' font-weight="bold"' : ""}`);
    let left = 0;
    for (const [kind, b] of Object.entries(bytes)) {
      s += rect(x(left), y, x(left + b) - x(left), ROW - 10, data.colors[kind] || "black");
      left += b;
    }
  });
  s += line(x(deviceBytes), Y0, x(deviceBytes), yAxis, "red", 'stroke-dasharray="5,3" stroke-width="1.5"');
  s += text(x(deviceBytes) + 3, Y0 + 8, `${values.device_gib} GiB`, 'fill="red" font-size="9"');
  const kinds = [...new Set(layouts.flatMap(([, b]) => Object.keys(b)))];
  s += legend(10, yAxis + 44, kinds.map(k => [k, data.colors[k] || "black"]).concat([["device memory", "red"]]));
  const svg = root.querySelector("svg");
  svg.innerHTML = s;
}
