// The page: inputs named like the CLI's flags (also read from the URL
// query), and everything drawn from one state object, which is also kept as
// JSON in #lab-state for scripts and tests.
"use strict";

const U32_MAX = 4294967295;
const U64_MAX = (1n << 64n) - 1n;
const MAX_SALT = 1024;
const CHIPS_SHOWN = 1500;

// id = the CLI flag without dashes; key = the field of the size report.
const FIELDS = [
  { id: "buckets", key: "buckets", kind: "int", max: U32_MAX, required: true },
  { id: "per-tenant", key: "per_tenant", kind: "int", max: U32_MAX, required: true },
  { id: "tenants", key: "tenants", kind: "int", max: Number.MAX_SAFE_INTEGER },
  { id: "noisy", key: "noisy", kind: "int", max: U32_MAX },
  { id: "borrow-from", key: "borrow_from", kind: "int", max: U32_MAX },
  { id: "lender-reserve", key: "lender_reserve", kind: "float" },
  { id: "per-user", key: "per_user", kind: "int", max: U32_MAX },
  { id: "seed", key: "seed", kind: "u64" },
  { id: "salt", key: "salt", kind: "text" },
];

const $ = (id) => document.getElementById(id);

function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

/** The inputs as the size report takes them; throws a LabError on a bad one. */
function readInputs() {
  const a = { salt: "" };
  for (const f of FIELDS) {
    const raw = $(f.id).value.trim();
    const flag = `--${f.id}`;
    if (f.kind === "text") {
      if (raw.length > MAX_SALT) fail(`${flag} is ${raw.length} characters; at most ${MAX_SALT}`);
      a[f.key] = $(f.id).value;
      continue;
    }
    if (raw === "") {
      if (f.required) fail(`${flag} is empty: it needs a whole number`);
      continue;
    }
    if (f.kind === "float") {
      if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(raw)) {
        fail(`${flag} '${raw}' is not a number`);
      }
      a[f.key] = Number(raw);
      continue;
    }
    if (!/^\d+$/.test(raw)) fail(`${flag} '${raw}' is not a whole number (0, 1, 2, …)`);
    if (f.kind === "u64") {
      const v = BigInt(raw);
      if (v > U64_MAX) fail(`${flag} ${raw} is more than a 64-bit seed holds`);
      a[f.key] = v;
      continue;
    }
    if (raw.length > 20 || Number(raw) > f.max) fail(`${flag} ${raw} is more than this page takes (${f.max})`);
    a[f.key] = Number(raw);
  }
  return a;
}

/** Everything the page shows, or {error}. */
function computeState(a) {
  const size = sizeReport(a);
  const state = Object.assign({}, size);
  state.plot = plotPoints(a.buckets);
  try {
    const s = sample(a, size.overlap_pmf);
    state.sample = s.sample;
    state.simulate = s.simulate;
    state.overlap = s.overlap;
  } catch (e) {
    if (!(e instanceof LabError)) throw e;
    state.sample = [];
    state.simulate = null;
    state.sample_note = e.message;
  }
  return state;
}

// --- formatting, as the CLI's tables format -----------------------------------

function p(x) {
  if (x === 0 || x === 1) return String(x);
  if (x > 0.999) return `1 - ${(1 - x).toExponential(4)}`;
  if (x >= 1e-3) return x.toFixed(6).replace(/0+$/, "").replace(/\.$/, "");
  return x.toExponential(4);
}

function big(s) {
  return s.length <= 24 ? s : `${s[0]}.${s.slice(1, 4)}e${s.length - 1} (${s.length} digits)`;
}

function exact(s) {
  return s.length <= 40 ? `<span class="exact">${esc(s)}</span>` : `<span class="exact">(exact: ${s.length} characters, in #lab-state)</span>`;
}

const f2 = (x) => x.toFixed(2);

function row(cells, cls) {
  return `<tr>${cells.map((c, i) => `<td${cls && cls[i] ? ` class="${cls[i]}"` : ""}>${c}</td>`).join("")}</tr>`;
}

function colour(j, k) {
  if (j === 0) return "#4caf50";
  if (j === k) return "#d32f2f";
  // From amber (1 shared) to deep orange (k − 1 shared).
  const t = k > 2 ? (j - 1) / (k - 2) : 0;
  return `hsl(${40 - 25 * t}, 95%, ${55 - 8 * t}%)`;
}

// --- drawing ---------------------------------------------------------------------

function renderNumbers(s) {
  const k = s.per_tenant, n = s.buckets;
  let h = `<div class="grid"><div><h2>N = ${n} buckets, k = ${k} per tenant</h2><table>`;
  h += row(["distinct shards C(N,k)", esc(big(s.shards)), ""]);
  h += row(["P(identical shard) 1/C(N,k)", p(s.p_identical), exact(s.overlap_pmf_exact[k])]);
  h += row(["P(no shared bucket)", p(s.p_disjoint), exact(s.overlap_pmf_exact[0])]);
  h += row(["P(some shared bucket)", p(s.p_any_overlap), ""]);
  h += row(["bucket blast radius k/N", p(s.bucket_blast_radius), ""]);
  h += "</table></div>";
  const top = Math.max(...s.overlap_pmf);
  h += `<div><h2>buckets two tenants share</h2><table>`;
  s.overlap_pmf.forEach((q, j) => {
    const w = top > 0 ? Math.max(1, Math.round((q / top) * 160)) : 1;
    h += row([String(j), `<span class="bar" style="width:${q > 0 ? w : 0}px;background:${colour(j, k)}"></span>`, p(q), exact(s.overlap_pmf_exact[j])], ["n"]);
  });
  h += "</table></div></div>";
  if (s.tenants !== undefined) {
    const o = (name, v) => row([name, f2(v.fully_down), f2(v.degraded), f2(v.unaffected)], ["", "n", "n", "n"]);
    h += `<h2>one of ${s.tenants} tenants floods its whole shard; expected among the other ${Math.max(s.tenants - 1, 0)}</h2>`;
    h += `<table><tr><th>design</th><th class="n">fully down</th><th class="n">degraded</th><th class="n">unaffected</th></tr>`;
    h += o(`shuffle sharding (k = ${k})`, { fully_down: s.expected_fully_down, degraded: s.expected_degraded, unaffected: s.expected_unaffected });
    if (s.borrowing && s.borrowing.expected) h += o(`&nbsp;&nbsp;with borrowing (d = ${s.borrowing.spill})`, s.borrowing.expected);
    h += s.fixed_shards ? o(`fixed shards (${n / k} groups of ${k})`, s.fixed_shards) : row(["fixed shards", "(k does not divide N)", "", ""]);
    h += o("one shared pool", s.shared_pool);
    h += "</table>";
  }
  if (s.borrowing) {
    const b = s.borrowing;
    h += `<h2>borrowing: d = ${b.spill} spill buckets, lender reserve r = ${b.reserve}</h2><table>`;
    h += row(["spill sets per shard C(N−k,d)", esc(big(b.spill_sets)), ""]);
    h += row(["P(fully down under a flood)", p(b.p_fully_down), exact(b.p_fully_down_exact)]);
    h += row(["P(degraded)", p(b.p_degraded), ""]);
    h += row(["P(unaffected: no own bucket in the flooder's k+d)", p(b.p_unaffected), ""]);
    h += row(["sustained share of R, alone", p(b.sustained_share), exact(b.sustained_share_exact)]);
    h += row(["share of B taken at once", p(b.burst_share), exact(b.burst_share_exact)]);
    h += row(["owners of a lent bucket keep", p(b.owners_keep), ""]);
    h += "</table>";
  }
  if (s.noisy) {
    const x = s.noisy;
    h += `<h2>${x.flooders} tenants flood at once</h2><table>`;
    h += row(["P(whole shard covered: fully down)", p(x.p_covered), exact(x.p_covered_exact)]);
    h += row(["P(degraded)", p(x.p_degraded), ""]);
    h += row(["P(untouched)", p(x.p_untouched), exact(x.p_untouched_exact)]);
    if (x.expected) h += row([`expected among the other ${Math.max(s.tenants - x.flooders, 0)}`, `${f2(x.expected.fully_down)} down, ${f2(x.expected.degraded)} degraded, ${f2(x.expected.unaffected)} untouched`, ""]);
    h += "</table>";
  }
  if (s.nested) {
    const x = s.nested;
    h += `<h2>users on j = ${x.per_user} of their tenant's k = ${k} buckets (${esc(big(x.subsets))} subsets); one user floods</h2><table>`;
    h += row(["other users: fully down 1/C(k,j)", p(x.p_user_fully_down), exact(x.p_user_fully_down_exact)]);
    h += row(["other users: degraded", p(x.p_user_degraded), exact(x.p_user_degraded_exact)]);
    h += row(["other users: unaffected", p(x.p_user_unaffected), exact(x.p_user_unaffected_exact)]);
    h += row(["other tenants: fully down", p(x.p_tenant_fully_down), exact(x.p_tenant_fully_down_exact)]);
    h += row(["other tenants: degraded", p(x.p_tenant_degraded), ""]);
    h += row(["other tenants: unaffected C(N−j,k)/C(N,k)", p(x.p_tenant_unaffected), exact(x.p_tenant_unaffected_exact)]);
    h += "</table>";
  }
  $("numbers").innerHTML = h;
}

/** The two curves of `shuffle-lab plot`, as inline SVG. */
function renderPlot(plot, k) {
  const W = 500, H = 170, L = 58, R = 12, T = 22, B = 30;
  const pts = plot.points, kmax = plot.per_tenant_max;
  const x = (kk) => L + ((kk - 0.5) / kmax) * (W - L - R);
  const panel = (title, ys, lo, hi, ticks, label, stroke, oy) => {
    const y = (v) => oy + T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
    let g = `<text x="${L}" y="${oy + 14}" font-weight="600">${title}</text>`;
    g += `<line x1="${L}" y1="${oy + H - B}" x2="${W - R}" y2="${oy + H - B}" stroke="#999"/>`;
    g += `<line x1="${L}" y1="${oy + T}" x2="${L}" y2="${oy + H - B}" stroke="#999"/>`;
    for (const t of ticks) {
      g += `<line x1="${L - 4}" y1="${y(t)}" x2="${W - R}" y2="${y(t)}" stroke="#eee"/>`;
      g += `<text x="${L - 6}" y="${y(t) + 4}" text-anchor="end">${label(t)}</text>`;
    }
    const step = Math.ceil(kmax / 16);
    for (let kk = 1; kk <= kmax; kk += step) {
      g += `<text x="${x(kk)}" y="${oy + H - B + 14}" text-anchor="middle">${kk}</text>`;
    }
    g += `<polyline fill="none" stroke="${stroke}" stroke-width="2" points="${pts.map((pt, i) => `${x(pt.per_tenant)},${y(ys[i])}`).join(" ")}"/>`;
    pts.forEach((pt, i) => {
      const here = pt.per_tenant === k;
      g += `<circle cx="${x(pt.per_tenant)}" cy="${y(ys[i])}" r="${here ? 5.5 : 3}" fill="${here ? "#000" : stroke}"/>`;
    });
    return g;
  };
  const id = pts.map((pt) => pt.log10_p_identical);
  const lowest = Math.min(0, ...id);
  const ylo = lowest > -1 ? -1 : Math.floor(lowest);
  const every = Math.max(1, Math.ceil(-ylo / 8));
  const dec = [];
  for (let d = 0; d >= ylo; d -= every) dec.push(d);
  const bl = pts.map((pt) => pt.bucket_blast_radius);
  const bhi = Math.min((kmax / plot.buckets) * 1.1, 1.05);
  // Round ticks: the smallest step that gives at most 5 of them.
  const tick = [0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5].find((t) => bhi / t <= 5) || 0.5;
  const pct = [];
  for (let t = 0; t <= bhi + 1e-9; t += tick) pct.push(t);
  let svg = `<svg id="k-trade" xmlns="http://www.w3.org/2000/svg" width="${W}" height="${2 * H + 16}" role="img" aria-label="the trade-off of k">`;
  svg += panel("P(identical shard) 1/C(N,k), log scale: lower is better", id, ylo, 0, dec, (t) => (t === 0 ? "1" : `1e${t}`), "#1f4fd1", 0);
  svg += panel("bucket blast radius k/N: lower is better", bl, 0, bhi, pct, (t) => `${Math.round(t * 100)}%`, "#d12b1f", H);
  svg += `<text x="${(L + W - R) / 2}" y="${2 * H + 12}" text-anchor="middle">k, buckets per tenant (N = ${plot.buckets}; the black dot is k = ${k})</text></svg>`;
  $("plot").innerHTML = `<h2>the trade-off of k (as <code>shuffle-lab plot --buckets ${plot.buckets}</code>)</h2>${svg}`;
}

function renderSample(s) {
  const k = s.per_tenant;
  if (!s.simulate) {
    $("sample").innerHTML = `<h2>sample assignment</h2><p class="warn" id="sample-note">${esc(s.sample_note)}</p>`;
    return;
  }
  const m = s.simulate;
  let h = `<h2>sample: tenant-0 … tenant-${m.tenants - 1}, salt ${esc(JSON.stringify(s.salt))}${s.seed === undefined ? "" : ` + seed ${s.seed} (8 bytes LE)`}</h2>`;
  if (m.tenants < m.of_tenants) {
    h += `<p class="warn" id="sample-note">drawn for the first ${m.tenants} of ${m.of_tenants} tenants, to keep the page responsive (N × tenants scores); <code>shuffle-lab simulate</code> draws them all</p>`;
  }
  h += `<p>tenant-0 (the flooder) has buckets ${m.bad_tenant_shard.join(", ")}; the others, coloured by how many of its buckets they share:</p>`;
  h += `<table><tr><th class="n">shared</th><th></th><th class="n">observed</th><th class="n">expected</th><th class="n">σ</th><th class="n">z</th></tr>`;
  m.observed.forEach((o, j) => {
    const z = m.z[j];
    h += row([String(j), `<span class="chip" style="display:inline-block;background:${colour(j, k)}"></span>`, String(o), f2(m.expected[j]), f2(m.sigma[j]), Number.isFinite(z) ? f2(z) : "∞"], ["n", "", "n", "n", "n", "n"]);
  });
  h += "</table>";
  const shown = Math.min(s.sample.length, CHIPS_SHOWN);
  let chips = `<div class="chip" style="background:#000" title="tenant-0: ${m.bad_tenant_shard.join(", ")}"></div>`;
  for (let i = 1; i < shown; i++) {
    const j = s.overlap[i];
    chips += `<div class="chip" style="background:${colour(j, k)}" title="tenant-${i}: ${s.sample[i][1].join(", ")} (shares ${j})"></div>`;
  }
  h += `<div class="chips">${chips}</div>`;
  if (shown < s.sample.length) h += `<p class="note">the first ${shown} drawn are shown; all ${s.sample.length} are counted</p>`;
  $("sample").innerHTML = h;
}

// --- state and events ------------------------------------------------------------

function publish(state) {
  const kept = Object.assign({}, state);
  delete kept.overlap;
  if (kept.seed !== undefined) kept.seed = kept.seed.toString();
  $("lab-state").textContent = JSON.stringify(kept);
}

function update() {
  let a;
  try {
    a = readInputs();
    const state = computeState(a);
    state.salt = a.salt;
    if (a.seed !== undefined) state.seed = a.seed;
    $("lab-error").hidden = true;
    renderNumbers(state);
    renderPlot(state.plot, a.per_tenant);
    renderSample(state);
    publish(state);
  } catch (e) {
    const msg = e instanceof LabError ? e.message : `the page failed: ${e}`;
    $("lab-error").textContent = msg;
    $("lab-error").hidden = false;
    // Numbers of earlier inputs would read as answers to these: clear them.
    for (const id of ["numbers", "plot", "sample"]) $(id).innerHTML = "";
    $("lab-state").textContent = JSON.stringify({ error: msg });
  }
  const q = new URLSearchParams();
  for (const f of FIELDS) {
    if ($(f.id).value !== "") q.set(f.id, $(f.id).value);
  }
  $("permalink").href = `?${q}`;
}

let pending = null;
function schedule() {
  if (pending !== null) clearTimeout(pending);
  pending = setTimeout(() => {
    pending = null;
    update();
  }, 120);
}

function init() {
  const q = new URLSearchParams(location.search);
  for (const f of FIELDS) {
    if (q.has(f.id)) $(f.id).value = q.get(f.id);
  }
  const link = (num, slider) => {
    $(slider).addEventListener("input", () => {
      $(num).value = $(slider).value;
      schedule();
    });
    $(num).addEventListener("input", () => {
      const v = Number($(num).value);
      if (Number.isInteger(v)) $(slider).value = String(v);
    });
  };
  link("buckets", "buckets-slider");
  link("per-tenant", "per-tenant-slider");
  $("buckets-slider").value = $("buckets").value;
  $("per-tenant-slider").value = $("per-tenant").value;
  for (const f of FIELDS) $(f.id).addEventListener("input", schedule);
  update();
}

init();
