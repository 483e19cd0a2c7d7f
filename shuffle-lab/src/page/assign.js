// The tenant → shard assignment of docs/assignment.md (v1), in the page:
// SHA-256 is written out here because crypto.subtle is missing from file://
// pages, and 64-bit words are pairs of 32-bit halves because BigInt
// arithmetic is far too slow for N × tenants scores.
"use strict";

const MAX_BUCKETS = 65536;
const MAX_PER_TENANT = 8;
// Bounds one update: at most this many scores, and this many tenants drawn.
const SAMPLE_MAX_SCORES = 1 << 20;
const SAMPLE_MAX_TENANTS = 5000;

const SHA_K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

/** SHA-256 (FIPS 180-4) of a Uint8Array, as 8 big-endian 32-bit words. */
function sha256(msg) {
  const len = msg.length;
  const blocks = Math.ceil((len + 9) / 64);
  const buf = new Uint8Array(blocks * 64);
  buf.set(msg);
  buf[len] = 0x80;
  const dv = new DataView(buf.buffer);
  // The bit length as a 64-bit big-endian integer; messages here are short.
  dv.setUint32(buf.length - 8, Math.floor(len / 0x20000000));
  dv.setUint32(buf.length - 4, (len * 8) >>> 0);
  const h = new Uint32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  const w = new Uint32Array(64);
  const rotr = (x, n) => (x >>> n) | (x << (32 - n));
  for (let off = 0; off < buf.length; off += 64) {
    for (let t = 0; t < 16; t++) w[t] = dv.getUint32(off + 4 * t);
    for (let t = 16; t < 64; t++) {
      const a = w[t - 15], b = w[t - 2];
      const s0 = rotr(a, 7) ^ rotr(a, 18) ^ (a >>> 3);
      const s1 = rotr(b, 17) ^ rotr(b, 19) ^ (b >>> 10);
      w[t] = (w[t - 16] + s0 + w[t - 7] + s1) >>> 0;
    }
    let [a, b, c, d, e, f, g, hh] = h;
    for (let t = 0; t < 64; t++) {
      const s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const ch = (e & f) ^ (~e & g);
      const t1 = (hh + s1 + ch + SHA_K[t] + w[t]) >>> 0;
      const s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const maj = (a & b) ^ (a & c) ^ (b & c);
      const t2 = (s0 + maj) >>> 0;
      [hh, g, f, e, d, c, b, a] = [g, f, e, (d + t1) >>> 0, c, b, a, (t1 + t2) >>> 0];
    }
    const add = [a, b, c, d, e, f, g, hh];
    for (let i = 0; i < 8; i++) h[i] = (h[i] + add[i]) >>> 0;
  }
  return h;
}

// mul64 writes its product here: returning a pair would allocate an array
// per call, and one score takes three products.
let mulHi = 0, mulLo = 0;

/** (ah:al) × (bh:bl) mod 2^64, into mulHi:mulLo. */
function mul64(ah, al, bh, bl) {
  const a0 = al & 0xffff, a1 = al >>> 16, b0 = bl & 0xffff, b1 = bl >>> 16;
  const mid = a0 * b1 + a1 * b0;
  const low = a0 * b0 + (mid % 65536) * 65536;
  const carry = Math.floor(low / 4294967296);
  mulHi = (a1 * b1 + Math.floor(mid / 65536) + carry + Math.imul(ah, bl) + Math.imul(al, bh)) >>> 0;
  mulLo = low >>> 0;
}

const GAMMA_HI = 0x9e3779b9, GAMMA_LO = 0x7f4a7c15;
const MIX1_HI = 0xbf58476d, MIX1_LO = 0x1ce4e5b9;
const MIX2_HI = 0x94d049bb, MIX2_LO = 0x133111eb;

/** score(seed, i) of step 2, the seed as sh:sl; returns [hi, lo]. */
function score(sh, sl, i) {
  scoreInto(sh, sl, i);
  return [mulHi, mulLo];
}

/** score(seed, i) into mulHi:mulLo. */
function scoreInto(sh, sl, i) {
  // z = seed + GAMMA × (i + 1); i + 1 <= 65536 fits the low word.
  mul64(GAMMA_HI, GAMMA_LO, 0, i + 1);
  let lo = sl + mulLo;
  let hi = (sh + mulHi + (lo > 0xffffffff ? 1 : 0)) >>> 0;
  lo >>>= 0;
  mul64((hi ^ (hi >>> 30)) >>> 0, (lo ^ ((lo >>> 30) | (hi << 2))) >>> 0, MIX1_HI, MIX1_LO);
  hi = mulHi;
  lo = mulLo;
  mul64((hi ^ (hi >>> 27)) >>> 0, (lo ^ ((lo >>> 27) | (hi << 5))) >>> 0, MIX2_HI, MIX2_LO);
  hi = mulHi;
  lo = mulLo;
  mulHi = (hi ^ (hi >>> 31)) >>> 0;
  mulLo = (lo ^ ((lo >>> 31) | (hi << 1))) >>> 0;
}

const DOMAIN = new TextEncoder().encode("shuffle-limiter/assign/v1");

/** The bytes before the tenant in step 1's message: D ‖ L ‖ salt. */
function messagePrefix(salt) {
  const p = new Uint8Array(DOMAIN.length + 8 + salt.length);
  p.set(DOMAIN);
  const dv = new DataView(p.buffer);
  dv.setUint32(DOMAIN.length, Math.floor(salt.length / 4294967296));
  dv.setUint32(DOMAIN.length + 4, salt.length >>> 0);
  p.set(salt, DOMAIN.length + 8);
  return p;
}

/** The shard of step 3, highest score first, for N buckets and k per tenant. */
function shardOf(prefix, tenant, n, k) {
  const m = new Uint8Array(prefix.length + tenant.length);
  m.set(prefix);
  m.set(tenant, prefix.length);
  const h = sha256(m);
  const sh = h[0], sl = h[1];
  const bh = [], bl = [], bi = [];
  for (let i = 0; i < n; i++) {
    scoreInto(sh, sl, i);
    const zh = mulHi, zl = mulLo;
    const c = bi.length;
    if (c === k && (zh < bh[c - 1] || (zh === bh[c - 1] && zl <= bl[c - 1]))) continue;
    // Insert in order, highest first; a later index loses a tie.
    let p = c === k ? c - 1 : c;
    while (p > 0 && (zh > bh[p - 1] || (zh === bh[p - 1] && zl > bl[p - 1]))) {
      bh[p] = bh[p - 1];
      bl[p] = bl[p - 1];
      bi[p] = bi[p - 1];
      p--;
    }
    bh[p] = zh;
    bl[p] = zl;
    bi[p] = i;
  }
  return bi;
}

/** The salt `simulate` uses: the salt's UTF-8, then the seed as 8 LE bytes (none without a seed). */
function simulateSalt(salt, seed) {
  const s = new TextEncoder().encode(salt);
  if (seed === undefined) return s;
  const out = new Uint8Array(s.length + 8);
  out.set(s);
  let x = seed;
  for (let i = 0; i < 8; i++) {
    out[s.length + i] = Number(x & 0xffn);
    x >>= 8n;
  }
  return out;
}

/**
 * A sample of the assignment: the shards of tenant-0 … tenant-(S−1) and, as
 * `simulate` counts them, how many of the others share j buckets with
 * tenant-0, beside the expectation and σ. Throws a LabError when it cannot
 * be drawn; `pmf` is the overlap distribution of the size report.
 */
function sample(a, pmf) {
  const n = a.buckets, k = a.per_tenant, t = a.tenants;
  if (n > MAX_BUCKETS) {
    fail(`no sample: --buckets ${n} is more than a limiter supports (${MAX_BUCKETS}); ` +
      `the numbers above are exact all the same`);
  }
  if (k > MAX_PER_TENANT) {
    fail(`no sample: --per-tenant ${k} is more than a limiter supports (${MAX_PER_TENANT})`);
  }
  if (t === undefined || t < 2) {
    fail("no sample: set tenants to at least 2, the flooder and one other");
  }
  const drawn = Math.min(t, SAMPLE_MAX_TENANTS, Math.max(2, Math.floor(SAMPLE_MAX_SCORES / n)));
  const prefix = messagePrefix(simulateSalt(a.salt, a.seed));
  const enc = new TextEncoder();
  const shards = [];
  for (let i = 0; i < drawn; i++) {
    shards.push([i, shardOf(prefix, enc.encode(`tenant-${i}`), n, k)]);
  }
  const bad = new Set(shards[0][1]);
  const overlap = shards.map(([, s]) => s.filter((b) => bad.has(b)).length);
  const observed = new Array(k + 1).fill(0);
  for (let i = 1; i < drawn; i++) observed[overlap[i]]++;
  const others = drawn - 1;
  const expected = pmf.map((q) => others * q);
  const sigma = pmf.map((q) => Math.sqrt(others * q * (1.0 - q)));
  const z = observed.map((o, j) => {
    const d = o - expected[j];
    if (sigma[j] > 0) return d / sigma[j];
    return Math.abs(d) < 0.5 ? 0 : Infinity;
  });
  return {
    sample: shards,
    overlap,
    simulate: {
      tenants: drawn,
      of_tenants: t,
      bad_tenant_shard: shards[0][1],
      observed,
      expected,
      sigma,
      z,
    },
  };
}
