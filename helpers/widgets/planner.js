// Plan your own run (helpers/widgets/planner.py): theory.planner's plan for the chosen model and cluster
// (planner_theory.js), its readout (Python's readout_html, mirrored), and the best layouts' steps by part.
// values: layers, hidden, head_dim, q_per_kv, mlp_ratio, gated, llama_style, moe, seq, vocab, batch,
// gpus, gpus_per_node, memory_gib, peak_tflops, intra_gbps, inter_gbps, efficiency;
// data: defaults (latencies, reserved bytes), moe, parts, shown, ranked_header, colors.
const GIB = 2 ** 30;

// planner.setting: the Model, the Cluster and the global batch in tokens.
function setting(v, data) {
  const [experts, top_k] = data.moe[v.moe];
  if (v.hidden % v.head_dim) throw new Error(`the head size (${v.head_dim}) does not divide hidden (${v.hidden})`);
  const heads = v.hidden / v.head_dim, llama = v.llama_style;
  if (heads % v.q_per_kv) throw new Error(`${v.q_per_kv} query heads per KV head do not divide the ${heads} heads`);
  const model = theory.plannerModel({layers: v.layers, hidden: v.hidden, heads, seq: v.seq, vocab: v.vocab,
    kv_heads: heads / v.q_per_kv, mlp_hidden: Math.round(v.hidden * v.mlp_ratio), gated: v.gated, experts, top_k,
    tied_embeddings: !llama, learned_positions: !llama, biases: !llama});
  const cluster = theory.plannerCluster({gpus: v.gpus, gpus_per_node: v.gpus_per_node, memory_bytes: v.memory_gib * GIB,
    peak_flops: v.peak_tflops * 1e12, intra_bandwidth: v.intra_gbps * 1e9, inter_bandwidth: v.inter_gbps * 1e9,
    efficiency: v.efficiency, ...data.defaults});
  return [model, cluster, v.batch * v.seq];
}

function seconds(x) {
  if (x >= 1) return `${theory.fixed(x, 2)} s`;
  return x >= 1e-3 ? `${theory.fixed(x * 1e3, 1)} ms` : `${theory.fixed(x * 1e6, 0)} µs`;
}

function meshShort(ly) {  // plots.planner.mesh_name
  return `d ${ly.dp} t ${ly.tp} p ${ly.pp}` + ["cp", "ep"].filter(k => ly[k] > 1).map(k => ` ${k} ${ly[k]}`).join("");
}

function meshName(ly) {
  const chunks = ly.virtual > 1 ? `, ${ly.virtual} chunks a GPU` : "";
  return `${meshShort(ly)} (ZeRO-${ly.zero}, recomputation ${ly.recompute}, micro-batch ${ly.micro_batch}${chunks})`;
}

function title(v, m) {
  const moe = v.moe === "dense" ? "" : `, ${v.moe}`;
  return `${theory.fixed(theory.plannerParams(m) / 1e9, 1)}B parameters: ${m.layers} layers, hidden ${m.hidden}, ` +
    `${m.heads} heads (${m.kv_heads} KV), MLP ${m.mlp_hidden}${m.gated ? " gated" : ""}${moe}, ` +
    `${v.llama_style ? "Llama" : "GPT"}-style, sequence ${m.seq}; ` +
    `${theory.fixed(v.batch, 0, true)} sequences a step on ` +
    `${theory.fixed(v.gpus, 0, true)} GPUs (${v.gpus_per_node} a node, ${v.memory_gib} GiB, ${v.peak_tflops} TFLOP/s ` +
    `at ${theory.fixed(v.efficiency * 100, 0)}%)`;
}

function whyBest(ranked, parts) {
  if (ranked.length === 1) return "It is the only mesh that fits.";
  const [a, b] = ranked;
  const gains = Object.keys(parts).filter(k => b.time[k] > a.time[k]).map(k => [k, b.time[k] - a.time[k]])
    .sort((x, y) => y[1] - x[1]);
  const said = gains.slice(0, 3).map(([k, d]) => `${parts[k]} +${seconds(d)}`).join(", ");
  if (a.step_s.toPrecision(9) === b.step_s.toPrecision(9)) {
    return `The runner-up, ${meshName(b.layout)}, takes as long; the simpler mesh is ranked first.`;
  }
  return `The runner-up, ${meshName(b.layout)}, takes ${seconds(b.step_s - a.step_s)} longer: ${said}.`;
}

// planner.table_html: analysis.planner.ranked_cells in book.html_table
function tableHtml(ranked, data) {
  const row = (tag, cells) => "<tr>" + cells.map(c => `<${tag}>${c}</${tag}>`).join("") + "</tr>";
  const rows = ranked.slice(0, data.shown).map((p, i) => {
    const ly = p.layout;
    return row("td", [i + 1, `(${[ly.dp, ly.tp, ly.pp, ly.cp, ly.ep].join(", ")})`, ly.zero, ly.recompute,
      ly.micro_batch, ly.virtual, theory.fixed(p.memory_bytes / GIB, 1), theory.fixed(p.step_s, 2),
      theory.fixed(p.tokens_per_s, 0, true), theory.fixed(p.mfu * 100, 1) + "%"]);
  });
  return '<div style="font-size: 11px"><table>' + row("th", data.ranked_header) + rows.join("") + "</table></div>";
}

function readout(v, data, ranked) {
  const [model] = setting(v, data);
  const head = `<b>${esc(title(v, model))}</b><br>`;
  if (!ranked.length) {
    return head + `No mesh of ${theory.fixed(v.gpus, 0, true)} GPUs fits this model in ${v.memory_gib} GiB a GPU ` +
      "at any ZeRO stage, recomputation, micro-batch or interleaving the planner tries: give it more memory or " +
      "more GPUs.";
  }
  const best = ranked[0];
  return head + `${ranked.length} meshes fit. The best, ${meshName(best.layout)}, takes ` +
    `<b>${seconds(best.step_s)}</b> a step at ${theory.fixed(best.mfu * 100, 1)}% MFU in ` +
    `${theory.fixed(best.memory_bytes / GIB, 1)} GiB a GPU. ` + whyBest(ranked, data.parts) +
    tableHtml(ranked, data);
}

// The setting in words, whatever it is: what the readout shows beside the reason it cannot be planned
// (a head size that does not divide hidden, say), so that every control still changes what the reader sees.
function described(v) {
  return `${v.layers} layers, hidden ${v.hidden}, head size ${v.head_dim}, ${v.q_per_kv} Q heads per KV head, ` +
    `MLP ${v.mlp_ratio} x hidden${v.gated ? " gated" : ""}, ${v.moe}, ${v.llama_style ? "Llama" : "GPT"}-style`;
}

// [the readout, the ranked layouts]: Python's readout_html, or why this setting cannot be planned.
function answer(values, data) {
  let planned;
  try {
    planned = setting(values, data);
  } catch (err) {
    return [`<b>Cannot plan ${esc(described(values))}</b>: ${esc(err.message)}.`, []];
  }
  const ranked = theory.plannerPlan(...planned);
  return [readout(values, data, ranked), ranked];
}

// A reader moves a control and back: the settings already planned are answered from memory (a plan of
// a large cluster takes a good part of a second), the last few kept.
const ANSWERS = new Map(), KEPT = 16;
function remembered(values, data) {
  const key = JSON.stringify(values);
  if (!ANSWERS.has(key)) {
    if (ANSWERS.size >= KEPT) ANSWERS.delete(ANSWERS.keys().next().value);
    ANSWERS.set(key, answer(values, data));
  }
  return ANSWERS.get(key);
}

function draw(root, values, data) {
  const [said, ranked] = remembered(values, data);
  root.querySelector(".readout").innerHTML = said;
  const shown = ranked.slice(0, data.shown), X0 = 150, X1 = 600, Y0 = 10, ROW = 30;
  let s = "";
  if (!shown.length) {
    root.querySelector("svg").innerHTML = text(20, 30, "No layout to draw.");
    return;
  }
  const xs = ticks(Math.max(...shown.map(p => p.step_s))), xmax = xs[xs.length - 1];
  const x = sec => X0 + sec / xmax * (X1 - X0), yAxis = Y0 + ROW * shown.length + 4;
  for (const t of xs) {
    s += line(x(t), Y0, x(t), yAxis, "#eee");
    s += text(x(t), yAxis + 12, String(t), 'font-size="9" text-anchor="middle"');
  }
  s += text((X0 + X1) / 2, yAxis + 25, "seconds a step, by part", 'text-anchor="middle"');
  shown.forEach((p, i) => {
    const y = Y0 + ROW * i + 4;
    const bold = i === 0 ? ' font-weight="bold"' : "";
    s += text(X0 - 6, y + 15, `${i + 1}. ${meshShort(p.layout)}`, `text-anchor="end"${bold}`);
    let left = 0;
    for (const part of Object.keys(data.parts)) {
      s += rect(x(left), y, x(left + p.time[part]) - x(left), ROW - 10, data.colors[part]);
      left += p.time[part];
    }
    s += text(X1 + 8, y + 15, `${theory.fixed(p.memory_bytes / GIB, 1)} GiB a GPU`);
  });
  const used = Object.keys(data.parts).filter(k => shown.some(p => p.time[k] > 0));
  s += legend(10, yAxis + 44, used.map(k => [k, data.colors[k]]));
  root.querySelector("svg").innerHTML = s;
}
