// theory.planner (chapter 8.5), for the planner's explorer: a port of helpers/theory/planner/{model,
// price,plan}.py on theory.js's transformer formulas. Loaded after theory.js; every sum is in
// Python's order, and tests/test_planner_explorer.py holds the two equal under node.
// A model, cluster or layout is a plain object with Python's field names (plannerModel and
// plannerCluster fill in the defaults and refuse what Python refuses, with Python's words).
Object.assign(theory, (function () {
  const RECOMPUTE = theory.RECOMPUTE, TIME_PARTS = ["compute", "bubble", "tp", "cp", "ep", "pp", "dp"];
  const SHARDED = theory.SHARDED, STAGES = Object.keys(SHARDED);  // ZeRO's stages, in order (theory.sharding)
  const OPTIMIZER_STATES = {"sgd": 0, "sgd-momentum": 1, "adam": 2};
  const sum = values => values.reduce((s, v) => s + v, 0);
  const div = (a, b) => Math.floor(a / b);  // Python's // on whole numbers

  function plannerModel(o) {
    const m = {kv_heads: o.heads, mlp_hidden: 4 * o.hidden, gated: false, experts: 1, top_k: 1,
               tied_embeddings: true, learned_positions: true, biases: true, dropout: false, value_bytes: 2,
               optimizer: "adam", mixed: true, norm_stats: false, ...o};
    if (m.hidden % m.heads || m.heads % m.kv_heads) {
      throw new Error(`hidden (${m.hidden}) must split into heads (${m.heads}), and heads ` +
                      `into kv_heads (${m.kv_heads}) groups, evenly`);
    }
    if (m.top_k > m.experts) throw new Error(`top_k (${m.top_k}) cannot exceed experts (${m.experts})`);
    m.kv_hidden = m.kv_heads * div(m.hidden, m.heads);
    m.cache = new Map();  // what Python's _memo remembers: a plan prices thousands of layouts
    return m;
  }
  function memo(m, key, f) {
    if (!m.cache.has(key)) m.cache.set(key, f());
    return m.cache.get(key);
  }
  function shape(m, perToken = false) {
    return {layers: m.layers, hidden: m.hidden, heads: m.heads, seq: m.seq, vocab: m.vocab, tied: m.tied_embeddings,
            kv_heads: m.kv_heads, mlp_hidden: m.mlp_hidden * (perToken ? m.top_k : 1), gated: m.gated};
  }
  const standard = (m, cp) => ({layers: m.layers, hidden: m.hidden, heads: m.heads, seq: div(m.seq, cp),
                                 vocab: m.vocab});

  function parts(m) {
    return memo(m, "parameters", () => {
      const p = theory.parameters(shape(m)), h = m.hidden, l = m.layers, f = m.mlp_hidden, mats = m.gated ? 3 : 2;
      if (!m.biases) {
        p["attention"] -= l * (2 * h + 2 * m.kv_hidden);
        p["MLP"] -= l * ((mats - 1) * f + h);
        p["LayerNorms"] = l * 2 * h;
        p["final LayerNorm"] = h;
      }
      if (!m.learned_positions) p["embeddings"] -= m.seq * h;
      if (m.experts > 1) {
        p["MLP"] *= m.experts;
        p["router"] = l * h * m.experts;
      }
      return p;
    });
  }
  const expertParams = m => div(parts(m)["MLP"], m.layers * m.experts);
  const denseLayerParams = m => {
    const p = parts(m);
    return div(p["attention"] + p["LayerNorms"] + (p["router"] || 0), m.layers);
  };
  const headParams = m => { const p = parts(m); return p["final LayerNorm"] + (p["head"] || 0); };
  const logitsForwardFlops = m => 2.0 * m.seq * m.hidden * m.vocab;
  const coreForwardFlops = m => memo(m, "core",
                                     () => theory.flopsTerms(shape(m), 1, "selective")["recompute"] / m.layers);
  function layerForwardFlops(m) {
    return memo(m, "layer", () => {
      const forward = theory.flopsTerms(shape(m, true), 1)["forward"] - logitsForwardFlops(m);
      return forward / m.layers + (m.experts > 1 ? 2.0 * m.seq * m.hidden * m.experts : 0.0);
    });
  }
  function trainingFlops(m, recompute = "none") {
    const again = {"none": 0.0, "selective": coreForwardFlops(m), "full": layerForwardFlops(m)}[recompute];
    return m.layers * (3 * layerForwardFlops(m) + again) + 3 * logitsForwardFlops(m);
  }

  // Model.layer_activation_bytes: one layer, one micro-batch, one of tp x cp GPUs.
  function layerActivationBytes(m, b, tp, cp, sp, flash, recompute, wholeInputs) {
    return memo(m, `act ${b} ${tp} ${cp} ${sp} ${flash} ${recompute} ${wholeInputs}`, () => {
      const v = m.value_bytes, h = m.hidden, t = tp;
      const terms = theory.activationTerms(standard(m, cp), b, {tp, sp, recompute, bytesPerValue: v,
        dropout: m.dropout, attention: flash ? "flash" : "materialized", normStats: m.norm_stats});
      if (recompute === "full") return sum(Object.values(terms));
      const sb = div(m.seq, cp) * b;
      for (const k of ["softmax output", "softmax dropout mask", "attention dropout output"]) {
        if (k in terms) terms[k] *= cp;
      }
      terms["Q and K"] = v * sb * (h + m.kv_hidden) / t;
      terms["V"] = v * sb * m.kv_hidden / t;
      const wide = v * sb * m.top_k * m.mlp_hidden / t;
      terms["GeLU input"] = wide;
      terms["GeLU output"] = wide;
      if (m.gated) terms["gate output"] = wide;
      if (m.experts > 1) terms["routed input"] = v * sb * h * m.top_k / (sp ? t : 1);
      if (wholeInputs && sp) {
        terms["QKV input"] = t * terms["QKV input"];
        terms["MLP input"] = t * terms["MLP input"];
      }
      return sum(Object.values(terms));
    });
  }
  // Model.outside_bytes: [first stage's, last stage's] activations outside the layers.
  function outsideBytes(m, b, tp, cp, sp, wholeInputs) {
    return memo(m, `outside ${b} ${tp} ${cp} ${sp} ${wholeInputs}`, () => {
      const terms = theory.outsideLayersTerms(standard(m, cp), b,
                                              {tp, sp, bytesPerValue: m.value_bytes, dropout: m.dropout});
      const tokens = b * m.seq / cp, ids = tokens + (m.learned_positions ? m.seq / cp : 0);
      const first = (terms["embedding dropout mask"] || 0.0) + 8 * ids;
      delete terms["embedding dropout mask"];
      terms["targets"] = 8 * tokens;
      if (wholeInputs && sp) for (const k of ["head input", "cross-entropy log-probabilities"]) terms[k] *= tp;
      if (m.norm_stats) terms["final norm statistics"] = 2 * m.value_bytes * tokens / (sp ? tp : 1);
      return [first, sum(Object.values(terms))];
    });
  }

  function plannerCluster(o) {
    const c = {efficiency: 0.5, reserved_bytes: 0.0, attention_efficiency: null, flash_efficiency: null, ...o};
    if (c.gpus > c.gpus_per_node && c.gpus % c.gpus_per_node) {
      throw new Error(`${c.gpus} GPUs do not fill nodes of ${c.gpus_per_node}`);
    }
    return c;
  }
  // Cluster.attention: the attention core's fraction of peak, fused (flash) or with its scores materialized.
  const attention = (c, flash) => {
    const own = flash ? c.flash_efficiency : c.attention_efficiency;
    return own === null ? c.efficiency : own;
  };
  // price._core_flops: the core's executed forward FLOPs, half where a fused causal kernel skips the masked half
  const coreFlops = (m, ly) => coreForwardFlops(m) / (ly.flash ? 2 : 1);
  function plannerLayout(o) {
    return {tp: 1, pp: 1, cp: 1, ep: 1, zero: 0, recompute: "none", micro_batch: 1, virtual: 1, sp: false,
            flash: true, overlap: true, whole_inputs: false, end_chunks: false, cp_ring: true, ...o};
  }
  const gpusOf = ly => ly.dp * ly.tp * ly.pp * ly.cp;
  const meshOf = ly => [ly.dp, ly.tp, ly.pp, ly.cp, ly.ep];

  // theory.sharding: ZeRO's states on one of p ranks (no step counters), and 6.2's ring collectives.
  function shardedStateBytes(n, p, stage, optimizer, precision) {
    const k = OPTIMIZER_STATES[optimizer];
    const states = precision === "master-weights"
      ? {"parameters": 2 * n, "gradients": 2 * n, "optimizer states": (4 + 4 * k) * n}
      : {"parameters": 4 * n, "gradients": 4 * n, "optimizer states": 4 * k * n};
    const out = {};
    for (const [kind, bytes] of Object.entries(states)) out[kind] = SHARDED[stage].includes(kind) ? bytes / p : bytes;
    return out;
  }
  function collectiveTime(op, nbytes, p, lat, spb, messages = 1) {
    if (op === "all_reduce") return messages * 2.0 * (p - 1) * lat + theory.ringAllreduceTime(nbytes, p, 0.0, spb);
    return messages * (p - 1) * lat + (p - 1) / p * nbytes * spb;
  }

  function plannerCheck(m, c, ly, tokens) {
    const sequences = div(tokens, m.seq);
    const problems = [
      [tokens % m.seq, `the batch (${tokens} tokens) is not whole sequences of ${m.seq}`],
      [gpusOf(ly) !== c.gpus, `dp x tp x pp x cp = ${gpusOf(ly)}, not the cluster's ${c.gpus} GPUs`],
      [m.heads % ly.tp || m.kv_heads % ly.tp,
       `tp = ${ly.tp} does not divide ${m.heads} heads and ${m.kv_heads} KV heads`],
      [m.mlp_hidden % ly.tp, `tp = ${ly.tp} does not divide the MLP's ${m.mlp_hidden}`],
      [sequences % (ly.dp * ly.micro_batch), `${sequences} sequences do not split into ${ly.dp} replicas ` +
                                             `x micro-batches of ${ly.micro_batch}`],
      [ly.pp * ly.virtual - (ly.end_chunks ? 2 : 0) > m.layers,
       `${m.layers} layers cannot fill ${ly.pp} stages x ${ly.virtual} chunks` + (ly.end_chunks ? " less the two ends" : "")],
      [ly.virtual > 1 && ly.pp === 1, "interleaving (virtual > 1) needs a pipeline (pp > 1)"],
      [ly.end_chunks && ly.pp * ly.virtual < 3,
       "end chunks need a chunk for the layers beside the two ends (pp x virtual >= 3)"],
      [m.seq % ly.cp, `cp = ${ly.cp} does not divide the sequence (${m.seq})`],
      [m.experts % ly.ep, `ep = ${ly.ep} does not divide ${m.experts} experts`],
      [(ly.dp * ly.cp) % ly.ep, `ep = ${ly.ep} does not divide the ${ly.dp * ly.cp} data-parallel GPUs`],
    ];
    for (const [bad, why] of problems) if (bad) return why;
    const mbs = div(sequences, ly.dp * ly.micro_batch);
    if (ly.virtual > 1 && mbs % ly.pp) {
      return `the interleaved schedule needs micro-batches (${mbs}) to be a multiple of pp (${ly.pp})`;
    }
    return "";
  }

  function link(c, stride, size) {  // [seconds per ring step, seconds per byte]
    if (stride * size <= c.gpus_per_node) return [c.intra_latency_s, 1.0 / c.intra_bandwidth];
    const perNode = Math.max(1, div(c.gpus_per_node, stride));
    return [c.inter_latency_s, 1.0 / Math.min(c.intra_bandwidth, perNode * c.inter_bandwidth)];
  }
  function stageOf(m, ly, rank) {  // the layers of each chunk pipeline GPU rank holds (price.chunk_layers)
    const n = m.layers, ends = ly.end_chunks ? 1 : 0, segments = ly.pp * ly.virtual - 2 * ends, mine = [];
    for (let s = rank; s < segments + 2 * ends; s += ly.pp) {
      const i = s - ends;  // the chunk's place among those holding layers
      mine.push(i < 0 || i >= segments ? 0 : div(n, segments) + (i < n % segments ? 1 : 0));
    }
    return mine;
  }
  function warmUpLayers(chunks, pp, forwards) {  // price.warm_up_layers
    const cycles = div(forwards, pp * chunks.length), left = forwards % (pp * chunks.length);
    const full = div(left, pp), part = left % pp;
    return cycles * pp * sum(chunks) + pp * sum(chunks.slice(0, full)) + part * chunks[full];
  }

  function device(m, c, ly, rank, mbs) {
    const chunks = stageOf(m, ly, rank), layers = sum(chunks), first = rank === 0, last = rank === ly.pp - 1;
    const b = ly.micro_batch, t = ly.tp, p = parts(m);
    let dense = layers * denseLayerParams(m) + (first ? p["embeddings"] : 0);
    if (last) dense += headParams(m) + (ly.pp > 1 && m.tied_embeddings ? m.vocab * m.hidden : 0);
    dense /= t;
    const experts = layers * m.experts * expertParams(m) / (t * ly.ep), memory = {};
    for (const [n, group] of [[dense, ly.dp * ly.cp], [experts, div(ly.dp * ly.cp, ly.ep)]]) {
      const states = shardedStateBytes(n, group, STAGES[ly.zero], m.optimizer, m.mixed ? "master-weights" : "fp32");
      for (const [kind, bytes] of Object.entries(states)) memory[kind] = (memory[kind] || 0.0) + bytes;
    }
    if (ly.zero === 3) {  // the layer at work and the next one gathered, and the working layer's gradient
      const layer = (denseLayerParams(m) + m.experts * expertParams(m) / ly.ep) / t;
      memory["gathered layers"] = 3 * layer * m.value_bytes;
    }
    const act = layerActivationBytes(m, b, t, ly.cp, ly.sp, ly.flash, ly.recompute, ly.whole_inputs);
    let inFlight;
    if (ly.pp === 1) inFlight = layers;
    else if (ly.virtual === 1) inFlight = Math.min(mbs, ly.pp - rank) * layers;
    else {
      const forwards = Math.min(mbs * ly.virtual, 2 * (ly.pp - rank - 1) + (ly.virtual - 1) * ly.pp + 1);
      inFlight = warmUpLayers(chunks, ly.pp, forwards);
    }
    memory["activations"] = act * inFlight;
    if (ly.recompute === "full") {
      memory["recomputed layer"] = layerActivationBytes(m, b, t, ly.cp, ly.sp, ly.flash, "none", ly.whole_inputs);
    }
    const outside = outsideBytes(m, b, t, ly.cp, ly.sp, ly.whole_inputs);
    if (first && ly.pp > 1) memory["embedding inputs"] = outside[0] * Math.min(mbs, ly.pp);
    if (last) memory["head and loss"] = outside[1] + (first ? outside[0] : 0.0);
    memory["reserved"] = c.reserved_bytes;
    const rate = c.efficiency * c.peak_flops * t * ly.cp / b;
    const core = coreFlops(m, ly) / (rate / c.efficiency * attention(c, ly.flash));
    const layer = (layerForwardFlops(m) - coreForwardFlops(m)) / rate + core;
    const again = {"none": 0.0, "selective": ly.flash ? 0.0 : core, "full": layer}[ly.recompute];
    const fwd = layers * layer + (last ? logitsForwardFlops(m) / rate : 0.0);
    const bwd = 2 * fwd + layers * again;
    return [memory, fwd, bwd, layers, dense * m.value_bytes, experts * m.value_bytes];
  }

  function dpTime(c, ly, mbs, fwd, bwd, layers, denseBytes, expertBytes) {
    let ar = 0.0, rs = 0.0, ag = 0.0;
    for (const [nbytes, group] of [[denseBytes, ly.dp * ly.cp], [expertBytes, div(ly.dp * ly.cp, ly.ep)]]) {
      if (group === 1 || nbytes === 0) continue;
      const [lat, spb] = link(c, ly.tp, group), msgs = ly.zero === 3 ? Math.max(1, layers) : 1;
      ar += collectiveTime("all_reduce", nbytes, group, lat, spb, msgs);
      rs += collectiveTime("reduce_scatter", nbytes, group, lat, spb, msgs);
      ag += collectiveTime("all_gather", nbytes, group, lat, spb, msgs);
    }
    const [hideF, hideB] = ly.overlap ? [fwd, bwd] : [0.0, 0.0], over = x => Math.max(0.0, x);
    if (ly.zero === 0) return over(ar - hideB);
    if (ly.zero === 1) return over(rs - hideB) + over(ag - hideF);
    if (ly.zero === 2) return mbs * over(rs - hideB) + over(ag - hideF);
    return mbs * (over(ag - hideF) + over(ag + rs - hideB));
  }

  // price: one layout's memory (bytes by kind, the fullest stage), step (seconds by part) and whether it fits.
  function plannerPrice(m, c, ly, tokensPerBatch) {
    const why = plannerCheck(m, c, ly, tokensPerBatch);
    if (why) throw new Error(`layout (${meshOf(ly).join(", ")}) (dp, tp, pp, cp, ep): ${why}`);
    const s = m.seq, h = m.hidden, v = m.value_bytes, sequences = div(tokensPerBatch, s);
    const mbs = div(sequences, ly.dp * ly.micro_batch);
    const fullest = [0, ly.pp - 1, ly.end_chunks ? 1 : 0];  // price's: first, last, the second with end chunks
    const devices = [...new Set(fullest)].sort((a, b) => a - b).map(r => device(m, c, ly, r, mbs));
    const firstMax = key => devices.reduce((best, d) => (key(d) > key(best) ? d : best));
    const memory = firstMax(d => sum(Object.values(d[0])))[0];
    const layers = Math.max(...devices.map(d => d[3]));
    const [, fwd, bwd] = firstMax(d => d[1] + d[2]);
    const tokens = ly.micro_batch * s / ly.cp, full = ly.recompute === "full", t = {};
    for (const part of TIME_PARTS) t[part] = 0.0;
    let hidden = 0.0;
    if (ly.tp > 1) {
      const [lat, spb] = link(c, 1, ly.tp);
      t["tp"] = layers * (full ? 6 : 4) * collectiveTime("all_reduce", tokens * h * v, ly.tp, lat, spb);
    }
    if (ly.cp > 1) {
      const [lat, spb] = link(c, ly.tp, ly.cp), kv = 2.0 * ly.micro_batch * s * m.kv_hidden * v / ly.tp;
      const comm = (full ? 3 : 2) * collectiveTime("all_gather", kv, ly.cp, lat, spb)
        + collectiveTime("reduce_scatter", kv, ly.cp, lat, spb);
      const core = ly.cp_ring ? 3 * coreFlops(m, ly) * ly.micro_batch
        / (ly.tp * ly.cp * attention(c, ly.flash) * c.peak_flops) : 0.0;
      t["cp"] = layers * Math.max(0.0, comm - core);  // a ring hides its sends behind the core; all-gather none
      hidden = layers * Math.min(comm, core);
    }
    if (m.experts > 1 && ly.ep > 1) {
      const [lat, spb] = link(c, ly.tp * ly.cp, ly.ep);
      const sent = tokens * m.top_k * h * v / (ly.sp ? ly.tp : 1) * (ly.ep - 1) / ly.ep;
      t["ep"] = layers * (full ? 6 : 4) * ((ly.ep - 1) * lat + sent * spb);
    }
    const slot = fwd + bwd + t["tp"] + t["cp"] + t["ep"];
    for (const part of ["tp", "cp", "ep"]) t[part] *= mbs;
    t["compute"] = mbs * (fwd + bwd);
    if (ly.pp > 1) {
      t["bubble"] = (ly.pp - 1) / ly.virtual * slot;
      const [lat, spb] = link(c, div(gpusOf(ly), ly.pp), ly.pp), hop = lat + tokens * h * v / ly.tp * spb;
      t["pp"] = 2 * (ly.overlap ? ly.virtual * ly.pp - 1 : mbs * ly.virtual + ly.pp - 1) * hop;
    }
    // ZeRO hides behind the slowest stage's compute, less what already hides context parallelism
    t["dp"] = Math.max(...devices.map(d => dpTime(c, ly, mbs, fwd - hidden / 3, bwd - 2 * hidden / 3, ...d.slice(3))));
    const step = sum(Object.values(t)), total = sum(Object.values(memory)), fits = total <= c.memory_bytes;
    const executed = sequences * trainingFlops(m, ly.recompute);
    const priced = {layout: ly, fits, why_not: "", memory_bytes: total, memory, step_s: step, time: t,
                    micro_batches: mbs, tokens_per_s: sequences * s / step,
                    hardware_flops: executed / (step * gpusOf(ly)),
                    mfu: sequences * trainingFlops(m, "none") / (step * gpusOf(ly) * c.peak_flops)};
    // why_not is written when read: a plan prices thousands of layouts that do not fit and reads none of
    // their reasons, and Python's number formats (theory.fixed) were half of a plan's time
    let whyNot = fits ? "" : null;
    Object.defineProperty(priced, "why_not", {enumerable: true, get: () => {
      if (whyNot === null) {
        whyNot = `needs ${theory.fixed(total / 1e9, 1)} GB a GPU of its `
          + `${theory.fixed(c.memory_bytes / 1e9, 1)} GB: `
          + Object.entries(memory).filter(([, b]) => b).map(([k, b]) => `${k} ${theory.fixed(b / 1e9, 1)}`).join(", ");
      }
      return whyNot;
    }});
    return priced;
  }

  function divisors(n) {
    const out = [];
    for (let d = 1; d <= n; d++) if (n % d === 0) out.push(d);
    return out;
  }
  // plan: the meshes that fit, each at its fastest settings, fastest first (Python's plan with its defaults).
  function plannerPlan(m, c, tokens, o = {}) {
    const {top = null, zero = [0, 1, 2, 3], micro_batches = [1, 2, 4, 8], virtual = [1, 2, 3, 4, 6, 8],
           cp = [1, 2, 4, 8], sp = true, flash = true, overlap = true} = o;
    const n = c.gpus, found = [];
    for (const tp of divisors(n)) {
      if (tp > c.gpus_per_node) continue;
      for (const cc of cp.filter(x => div(n, tp) % x === 0)) {
        for (const pp of divisors(div(n, tp * cc)).filter(x => x <= m.layers)) {
          const dp = div(n, tp * cc * pp);
          const eps = m.experts > 1 ? divisors(m.experts).filter(e => (dp * cc) % e === 0) : [1];
          for (const ep of eps) {
            const best = bestOf(m, c, tokens, [dp, tp, pp, cc, ep], zero, micro_batches, virtual, sp && tp > 1,
                                flash, overlap);
            if (best !== null) found.push(best);
          }
        }
      }
    }
    // plan._order: fastest first; on a tie (to 9 digits) the fewer GPUs splitting a replica, then the roomier
    const key = p => [Number(p.step_s.toPrecision(9)), p.layout.tp * p.layout.pp * p.layout.cp * p.layout.ep,
                      p.memory_bytes];
    const ranked = found.map(p => [key(p), p]).sort(([a], [b]) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2])
      .map(([, p]) => p);
    return top === null ? ranked : ranked.slice(0, top);
  }
  function bestOf(m, c, tokens, [dp, tp, pp, cp, ep], zero, microBatches, virtual, sp, flash, overlap) {
    let best = null;
    for (const b of microBatches) {
      for (const v of virtual.filter(x => x === 1 || pp > 1)) {
        for (const z of zero) {
          for (const r of RECOMPUTE) {
            const ly = plannerLayout({dp, tp, pp, cp, ep, zero: z, recompute: r, micro_batch: b, virtual: v, sp, flash,
                                      overlap});
            if (plannerCheck(m, c, ly, tokens)) break;
            const priced = plannerPrice(m, c, ly, tokens);
            if (priced.fits) {
              if (best === null || priced.step_s < best.step_s
                  || (priced.step_s === best.step_s && priced.memory_bytes < best.memory_bytes)) best = priced;
              break;
            }
          }
        }
      }
    }
    return best;
  }

  return {plannerModel, plannerCluster, plannerLayout, plannerCheck, plannerPrice, plannerPlan,
          plannerParams: m => sum(Object.values(parts(m)))};
})());
