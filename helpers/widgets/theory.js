// helpers.theory's formulas that the explorers need, mirrored line for line, for the browser.
// tests/test_explorers.py runs these under node over a grid of inputs and asserts they equal
// helpers.theory's results and helpers.widgets' sentences. Change both sides together.
// What the JS does not port (chapter 2's transformer counts, for the fit explorer), Python
// computes and hands over as data; theory.transformer (8.1) is ported at the end.
const theory = (function () {
  // --- Python's format specs, exactly: f"{x:.2f}", f"{x:,.1f}", f"{x:g}" --------------------

  // f"{x:.Nf}" (commas: f"{x:,.Nf}"): correctly rounded, ties to even, like Python (toFixed breaks
  // ties away from zero). toFixed(100) is the exact decimal expansion for every value used here.
  function fixed(x, digits, commas = false) {
    if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
    const neg = x < 0 || Object.is(x, -0);
    const [ip, fp] = Math.abs(x).toFixed(100).split(".");
    const kept = ip + fp.slice(0, digits), rest = fp.slice(digits);
    let n = BigInt(kept);
    const beyond = rest.slice(1).replace(/0/g, "") !== "";
    if (rest[0] > "5" || (rest[0] === "5" && (beyond || n % 2n === 1n))) n += 1n;
    let s = n.toString().padStart(digits + 1, "0");
    let whole = s.slice(0, s.length - digits), frac = s.slice(s.length - digits);
    if (commas) whole = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return (neg ? "-" : "") + whole + (digits ? "." + frac : "");
  }

  // f"{x:g}" for the explorers' values (whole numbers, or plain decimals, below a million).
  function g(x) {
    if (Number.isInteger(x) && Math.abs(x) < 1e6) return String(x);
    return String(Number(x.toPrecision(6)));
  }

  // --- theory.speedup ------------------------------------------------------------------------

  function amdahl(p, alpha) { return 1.0 / (alpha + (1.0 - alpha) / p); }
  function gustafson(p, alphaP) { return p - alphaP * (p - 1.0); }

  // --- theory.memory: strategy_memory and advise, given model_state_bytes' dict ---------------

  function sum(obj) { let s = 0; for (const v of Object.values(obj)) s += v; return s; }

  function strategyMemory(states, actPerSample, batch, pp = 1, dp = 1) {
    const out = {};
    for (const [kind, b] of Object.entries(states)) out[kind] = b / pp;
    out["activations"] = actPerSample * batch / dp / pp;
    return out;
  }

  // advise(n_params, act_per_sample, batch, device_bytes, devices, optimizer, precision) with
  // states = model_state_bytes(n_params, optimizer, precision) computed in Python.
  function advise(states, actPerSample, batch, deviceBytes, devices) {
    const total = (pp, dp) => sum(strategyMemory(states, actPerSample, batch, pp, dp));
    const layouts = [["one device", 1, 1]];
    if (devices > 1) {
      layouts.push([`DDP x${devices}`, 1, devices]);
      layouts.push([`pipeline, ${devices} stages`, devices, 1]);
    }
    const perDevice = {};
    for (const [name, pp, dp] of layouts) perDevice[name] = strategyMemory(states, actPerSample, batch, pp, dp);
    if (total(1, 1) <= deviceBytes) {
      return {fits_one_device: true, strategy: devices > 1 ? "DDP" : "one device", pp: 1, dp: devices,
              per_device: perDevice};
    }
    for (let pp = 1; pp <= devices; pp++) {
      if (devices % pp !== 0) continue;
      const dp = Math.floor(devices / pp);
      if (batch >= dp && total(pp, dp) <= deviceBytes) {
        const strategy = pp === 1 ? "DDP" : dp === 1 ? "pipeline" : "hybrid";
        if (strategy === "hybrid") {
          perDevice[`hybrid, ${pp} stages x ${dp} replicas`] = strategyMemory(states, actPerSample, batch, pp, dp);
        }
        return {fits_one_device: false, strategy, pp, dp, per_device: perDevice};
      }
    }
    return {fits_one_device: false, strategy: null, pp: devices, dp: 1, per_device: perDevice};
  }

  // widgets.verdict(advice, device_gib): advise's answer in words.
  const GIB = 2 ** 30;
  function verdict(advice, deviceGib) {
    const gib = layout => `${fixed(sum(layout) / GIB, 1, true)} GiB`;
    const one = advice.per_device["one device"];
    const p = advice.pp * advice.dp;
    if (advice.fits_one_device) {
      const tail = p > 1 ? `; with ${p} devices, DDP runs ${p} replicas, each on 1/${p} of the batch.` : ".";
      return `Fits on one device: ${gib(one)} of ${g(deviceGib)} GiB${tail}`;
    }
    const head = `Does not fit on one device (${gib(one)} > ${g(deviceGib)} GiB). `;
    const states = {};
    for (const [k, v] of Object.entries(one)) if (k !== "activations") states[k] = v;
    if (advice.strategy === null) {
      const where = p === 1 ? "With one device" : `Not even split over all ${p} devices`;
      return head + `${where}: add devices, cut the batch per step (accumulate gradients), ` +
        "or recompute activations.";
    }
    if (advice.strategy === "DDP") {
      return head + `DDP over ${p} devices fits: each keeps all model states (${gib(states)}) but only 1/${p} of the activations.`;
    }
    if (advice.strategy === "pipeline") {
      return head + `Split the layers over all ${p} devices (model/pipeline parallel): the states alone are ${gib(states)}.`;
    }
    const name = `hybrid, ${advice.pp} stages x ${advice.dp} replicas`;
    return head + `Hybrid: ${advice.pp} pipeline stages, times ${advice.dp} data-parallel replicas: ` +
      `${gib(advice.per_device[name])} per device.`;
  }

  // --- theory.communication: the ring all_reduce, a DDP step, diagnose ------------------------

  function ringAllreduceTime(messageBytes, p, stepLatency, secondsPerByte) {
    return 2.0 * (p - 1) * stepLatency + 2.0 * (p - 1) / p * messageBytes * secondsPerByte;
  }

  function ddpStepTime(tCompute, tComm, overlappable = 0.0) {
    return tCompute + Math.max(0.0, tComm - overlappable);
  }

  function diagnose(nParams, perRankBatch, tPerSample, p, stepLatency, secondsPerByte,
                    overlappable = 0.0, tFixed = 0.0, bytesPerGrad = 4) {
    if (tPerSample <= 0 || perRankBatch < 1 || p < 1) {
      throw new Error("diagnose needs a positive time per sample, a per-rank batch >= 1 and p >= 1; " +
                      `got t_per_sample=${tPerSample}, per_rank_batch=${perRankBatch}, p=${p}`);
    }
    const gradBytes = nParams * bytesPerGrad;
    const tCompute = perRankBatch * tPerSample + tFixed;
    const tComm = p > 1 ? ringAllreduceTime(gradBytes, p, stepLatency, secondsPerByte) : 0.0;
    const tLatency = p > 1 ? 2.0 * (p - 1) * stepLatency : 0.0;
    const exposed = ddpStepTime(0.0, tComm, overlappable);
    const step = tCompute + exposed;
    const speedup = p * tCompute / step;
    const bound = exposed > tCompute ? "communication" : "compute";
    const advice = [];
    if (exposed > 0.2 * step) {
      if (tLatency > tComm - tLatency) {
        advice.push("latency-bound: send fewer, larger messages (bigger DDP buckets, " +
                    "bucket_cap_mb) or all_reduce less often (gradient accumulation)");
      }
      const needBatch = Math.max(1, Math.ceil((exposed - tFixed) / tPerSample));
      advice.push(`bigger per-rank batch: at ${needBatch} samples compute would match ` +
                  "communication (memory permitting)");
      const k = Math.ceil(exposed / tCompute);
      advice.push(`gradient accumulation: all_reduce once every ${k} micro-batches ` +
                  "(DDP's no_sync) to spend about as long computing as communicating");
      if (overlappable < tComm) {
        advice.push("overlap: let all_reduce run during backward (DDP does this per bucket; " +
                    "smaller buckets start sooner)");
      }
      advice.push("fewer or faster links: fewer ranks per all_reduce, or a faster " +
                  "interconnect (NVLink over PCIe, InfiniBand over Ethernet)");
    } else {
      advice.push("compute-bound: communication is a small share of the step, so more ranks " +
                  "keep paying off");
    }
    return {t_compute: tCompute, t_comm: tComm, t_latency: tLatency, step, speedup, bound, advice};
  }

  // widgets.diagnosis_html(d, p): the diagnosis as a short HTML card.
  function diagnosisHtml(d, p) {
    const slower = d.speedup < 1 ? " (slower than one process!)" : "";
    const rows = d.advice.map(a => `<li>${a}</li>`).join("");
    return `<b>${d.bound}-bound</b>: step ${fixed(d.step * 1e3, 2)} ms = compute ${fixed(d.t_compute * 1e3, 2)} ms ` +
      `+ exposed all_reduce ${fixed((d.step - d.t_compute) * 1e3, 2)} ms ` +
      `(of which latency ${fixed(d.t_latency * 1e3, 2)} ms). ` +
      `${p} ranks give ${fixed(d.speedup, 2)}x one process's throughput${slower}.<ul>${rows}</ul>`;
  }

  // --- theory.prediction: a DDP step from one rank's phases, a link and the contention -----------
  // A line is [fixed, slope]; a link {step_latency, seconds_per_byte, per_call, wait: line}.

  function lineAt(l, x) { return l[0] + l[1] * x; }

  function bucketExposed(buckets, tBackward, calls) {
    let total = 0.0, done = 0.0, end = 0.0;
    for (const b of buckets) total += b;
    buckets.forEach((nbytes, i) => {
      done += nbytes;
      end = Math.max(end, tBackward * done / total) + calls[i];
    });
    return Math.max(0.0, end - tBackward);
  }

  function predictStep(phases, buckets, p, link, contention = 1.0) {
    if (p < 1) throw new Error(`predict_step needs p >= 1 ranks, got ${p}`);
    const slow = p > 1 ? contention : 1.0, ph = {};
    let compute = 0;
    for (const [k, v] of Object.entries(phases)) { ph[k] = v * slow; compute += ph[k]; }
    const calls = p > 1 ? buckets.map(m => ringAllreduceTime(m, p, link.step_latency, link.seconds_per_byte)
                                           + link.per_call) : [];
    let comm = 0;
    for (const c of calls) comm += c;
    const exposed = calls.length ? bucketExposed(buckets, ph.backward || 0.0, calls) : 0;
    const wait = p > 1 ? lineAt(link.wait, compute) : 0.0;
    return {p, compute, comm, exposed, wait, step: compute + exposed + wait};
  }

  // ComputeModel.phases for a model of nParams whose multiply-adds per sample are macs.
  function computePhases(m, nParams, macs, perRankBatch) {
    const work = perRankBatch * macs;
    return {data: lineAt(m.data, perRankBatch), forward: lineAt(m.forward, work),
            backward: lineAt(m.backward, work), optimizer: lineAt(m.optimizer, nParams)};
  }

  function ddpBuckets(gradBytes, first = 2 ** 20, cap = 25 * 2 ** 20) {
    const out = [Math.min(first, gradBytes)];
    let left = gradBytes - out[0];
    while (left > 0) { out.push(Math.min(cap, left)); left -= out[out.length - 1]; }
    return out;
  }

  return {ddpBuckets, fixed, g, amdahl, gustafson, strategyMemory, advise, verdict, GIB, ringAllreduceTime, ddpStepTime,
          diagnose, diagnosisHtml, lineAt, bucketExposed, predictStep, computePhases};
})();

// --- theory.transformer (chapter 8.1): a GPT's parameters, FLOPs, states and activations --------
// A shape is {layers, hidden, heads, seq, vocab, tied, kv_heads, mlp_hidden, gated} (the last four
// optional, as Python's Shape); every sum in Python's order, so the doubles come out equal.
Object.assign(theory, (function () {
  const RECOMPUTE = ["none", "selective", "full"];
  const SHARDED = {"DDP": [], "ZeRO-1": ["optimizer states"], "ZeRO-2": ["optimizer states", "gradients"],
                   "ZeRO-3": ["optimizer states", "gradients", "parameters"]};
  const total = obj => Object.values(obj).reduce((s, v) => s + v, 0);

  function checkShape(sh) {
    if (sh.hidden % sh.heads) throw new Error(`Shape.hidden (${sh.hidden}) must divide into heads (${sh.heads}) evenly`);
  }
  function checkTp(sh, tp) {
    if (sh.heads % tp || sh.hidden % tp) {
      throw new Error(`tp (${tp}) must divide the heads (${sh.heads}) and hidden (${sh.hidden})`);
    }
  }
  function layerWeights(sh) {
    const h = sh.hidden, kvd = (sh.kv_heads || sh.heads) * Math.floor(sh.hidden / sh.heads);
    const f = sh.mlp_hidden || 4 * sh.hidden, mats = sh.gated ? 3 : 2;
    return [2 * h * h + 2 * h * kvd, 2 * h + 2 * kvd, mats * h * f, (mats - 1) * f + h];
  }
  function parameters(sh) {
    checkShape(sh);
    const [aw, ab, mw, mb] = layerWeights(sh), l = sh.layers, h = sh.hidden;
    const out = {"attention": l * (aw + ab), "MLP": l * (mw + mb), "LayerNorms": l * 4 * h,
                 "embeddings": (sh.vocab + sh.seq) * h, "final LayerNorm": 2 * h};
    if (sh.tied === false) out["head"] = sh.vocab * h;
    return out;
  }
  function parametersPerRank(sh, tp = 1) {
    checkShape(sh); checkTp(sh, tp);
    const [aw, ab, mw, mb] = layerWeights(sh), h = sh.hidden;
    const split = sh.layers * (aw + ab - h + mw + mb - h) + sh.vocab * h * (sh.tied === false ? 2 : 1);
    const kept = sh.layers * (2 * h + 4 * h) + sh.seq * h + 2 * h;
    return split / tp + kept;
  }
  function flopsTerms(sh, batch, recompute = "none") {
    checkShape(sh);
    const [aw, , mw] = layerWeights(sh), b = batch, s = sh.seq, h = sh.hidden, l = sh.layers;
    const linears = 2 * b * s * (aw + mw) * l, attention = 4 * b * s * s * h * l, head = 2 * b * s * h * sh.vocab;
    const forward = linears + attention + head;
    const extra = {"none": 0, "selective": attention, "full": linears + attention}[recompute];
    return {forward, backward: 2 * forward, recompute: extra};
  }
  function flopsPerToken(sh, recompute = "none") { return total(flopsTerms(sh, 1, recompute)) / sh.seq; }
  function sixN(n) { return 6.0 * n; }

  // model_states(n, stage, dp, mixed, fp32_grad_accum) with Adam, no step counters (n_tensors = 0).
  function modelStates(n, stage, dp, mixed = true, fp32GradAccum = false) {
    const states = mixed ? {"parameters": 2 * n, "gradients": 2 * n, "optimizer states": (4 + 4 * 2) * n}
      : {"parameters": 4 * n, "gradients": 4 * n, "optimizer states": 4 * 2 * n};
    const out = {};
    for (const [kind, b] of Object.entries(states)) out[kind] = SHARDED[stage].includes(kind) ? b / dp : b;
    if (fp32GradAccum) out["fp32 gradients"] = 4.0 * n / (SHARDED[stage].includes("gradients") ? dp : 1);
    return out;
  }

  // activation_terms(shape, b, tp, sp, recompute, bytes_per_value, dropout, attention, norm_stats, mask_bytes)
  function activationTerms(sh, b, o = {}) {
    const {tp = 1, sp = false, recompute = "none", bytesPerValue: v = 2, dropout = true,
           attention = "materialized", normStats = false, maskBytes = 1} = o;
    checkShape(sh); checkTp(sh, tp);
    const t = tp, sbh = sh.seq * b * sh.hidden, ass = sh.heads * sh.seq ** 2 * b, outside = sp ? t : 1;
    if (recompute === "full") return {"layer input": v * sbh / outside};
    const terms = {"LayerNorm inputs": 2 * v * sbh / outside, "QKV input": v * sbh / outside,
                   "Q and K": 2 * v * sbh / t, "V": v * sbh / t};
    if (attention === "materialized" && recompute === "none") {
      terms["softmax output"] = v * ass / t;
      if (dropout) {
        terms["softmax dropout mask"] = maskBytes * ass / t;
        terms["attention dropout output"] = v * ass / t;
      }
    }
    if (attention === "flash") terms["logsumexp"] = 4 * sh.heads * sh.seq * b / t;
    terms["out-proj input"] = v * sbh / t;
    if (dropout) terms["attention dropout mask"] = maskBytes * sbh / outside;
    Object.assign(terms, {"MLP input": v * sbh / outside, "GeLU input": 4 * v * sbh / t, "GeLU output": 4 * v * sbh / t});
    if (dropout) terms["MLP dropout mask"] = maskBytes * sbh / outside;
    if (normStats) terms["LayerNorm statistics"] = 4 * v * sh.seq * b / outside;
    return terms;
  }
  function outsideLayersTerms(sh, b, o = {}) {
    const {tp = 1, sp = false, bytesPerValue: v = 2, dropout = true, maskBytes = 1} = o;
    checkShape(sh); checkTp(sh, tp);
    const t = tp, outside = sp ? t : 1, sbh = sh.seq * b * sh.hidden;
    const terms = dropout ? {"embedding dropout mask": maskBytes * sbh / outside} : {};
    Object.assign(terms, {"final LayerNorm input": v * sbh / outside, "head input": v * sbh / outside,
                          "cross-entropy log-probabilities": 4 * sh.seq * b * sh.vocab / t});
    return terms;
  }
  function modelActivationBytes(sh, b, o = {}) {
    return sh.layers * total(activationTerms(sh, b, o)) + total(outsideLayersTerms(sh, b, o));
  }

  return {RECOMPUTE, SHARDED, parameters, parameterCount: sh => total(parameters(sh)), parametersPerRank, flopsTerms,
          flopsPerToken, sixN, modelStates, activationTerms, outsideLayersTerms, modelActivationBytes};
})());
