// helpers.theory's formulas that the explorers need, mirrored line for line, for the browser.
// tests/test_explorers.py runs these under node over a grid of inputs and asserts they equal
// helpers.theory's results and helpers.widgets' sentences. Change both sides together.
// What the JS does not port (the transformer's parameter and activation counts), Python
// computes and hands over as data.
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
