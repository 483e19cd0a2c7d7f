// The exact blast-radius math of `shuffle-lab size`, in BigInt: the same
// formulas as the library's `blast` module, every f64 rounded once from the
// exact value as `Fraction::to_f64` does, so the numbers equal `size --json`.
"use strict";

const MAX_K = 4096;
const MAX_SHARD_BITS = 16384;
const MAX_NOISY_BITS = 65536;
// The page's own budget, tighter than the CLI's: exact fractions are reduced
// with a plain Euclid gcd, so their total size bounds the time of one update.
const PAGE_MAX_EXACT_BITS = 1 << 22;
// Reducing the noisy fractions costs the square of their size.
const PAGE_MAX_NOISY_BITS = 16384;
const LOG10_2 = 0.3010299956639812;
const DEFAULT_LENDER_RESERVE = 0.5;

/** Bits of a BigInt > 0. */
function bitLen(x) {
  if (x === 0n) return 0;
  const h = x.toString(16);
  return (h.length - 1) * 4 + (32 - Math.clz32(parseInt(h[0], 16)));
}

/** C(n, r) exactly (n, r plain integers); 0 when r > n. */
function binom(n, r) {
  if (r > n) return 0n;
  r = Math.min(r, n - r);
  let acc = 1n;
  for (let i = 0; i < r; i++) {
    acc = (acc * BigInt(n - i)) / BigInt(i + 1);
  }
  return acc;
}

function gcd(a, b) {
  while (b !== 0n) {
    [a, b] = [b, a % b];
  }
  return a;
}

/** `n/d` in lowest terms, printed as the CLI prints a Fraction. */
function fracStr(n, d) {
  const g = gcd(n, d);
  return g === 1n ? `${n}/${d}` : `${n / g}/${d / g}`;
}

/** 2^e for -1022 <= e <= 1023, built from its bits so it is exact. */
function pow2(e) {
  const v = new DataView(new ArrayBuffer(8));
  v.setUint32(0, (e + 1023) << 20);
  v.setUint32(4, 0);
  return v.getFloat64(0);
}

/** n/d (d > 0) as the nearest f64, round half to even: `ratio_to_f64`. */
function ratio(n, d) {
  if (n === 0n) return 0;
  const diff = bitLen(n) - bitLen(d);
  const atLeast = diff >= 0 ? n >= d << BigInt(diff) : n << BigInt(-diff) >= d;
  const e = atLeast ? diff : diff - 1;
  if (e > 1023) return Infinity;
  if (e < -1076) return 0;
  const lsb = Math.max(e - 52, -1074);
  let q, r, div;
  if (lsb <= 0) {
    const nn = n << BigInt(-lsb);
    [q, r, div] = [nn / d, nn % d, d];
  } else {
    div = d << BigInt(lsb);
    [q, r] = [n / div, n % div];
  }
  const twice = r << 1n;
  if (twice > div || (twice === div && (q & 1n) === 1n)) q += 1n;
  let x = Number(q);
  let shift = lsb;
  while (shift !== 0) {
    const step = Math.max(-1000, Math.min(1000, shift));
    x *= pow2(step);
    shift -= step;
  }
  return x;
}

/** A finite x >= 0 exactly, as [numer, denom]: `Fraction::from_f64`. */
function fromF64(x) {
  const v = new DataView(new ArrayBuffer(8));
  v.setFloat64(0, Math.abs(x));
  const hi = v.getUint32(0), lo = v.getUint32(4);
  const exp = hi >>> 20;
  let mant = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
  let e;
  if (exp === 0) {
    e = -1074;
  } else {
    mant |= 1n << 52n;
    e = exp - 1075;
  }
  if (e >= 0) return [mant << BigInt(e), 1n];
  let d = 1n << BigInt(-e);
  const g = gcd(mant, d);
  return [mant / g, d / g];
}

/** log10 of a count > 0, as `Count::log10`. */
function log10Count(c) {
  const drop = Math.max(bitLen(c) - 64, 0);
  return Math.log10(Number(c >> BigInt(drop))) + drop * LOG10_2;
}

/** log2 C(n, k), summed as the CLI sums it. */
function shardBits(n, k) {
  const r = Math.min(k, n - k);
  let s = 0;
  for (let i = 0; i < r; i++) s += Math.log2((n - i) / (i + 1));
  return s;
}

class LabError extends Error {}

function fail(msg) {
  throw new LabError(msg);
}

/** The messages of `common::radius` and `blast_failure`, flag for flag. */
function checkSize(n, k) {
  const bf = "--buckets", kf = "--per-tenant";
  if (k > MAX_K) {
    fail(`${kf} ${k} is more than this tool handles (${MAX_K}); lower ${kf}`);
  }
  if (n === 0) {
    fail(`${bf} is 0: a limiter needs at least 1 bucket; set ${bf} to 1 or more`);
  }
  if (k === 0) {
    fail(`${kf} is 0: every tenant needs at least 1 bucket; set ${kf} between 1 and ${bf} (${n})`);
  }
  if (k > n) {
    fail(`${kf} ${k} is more than ${bf} ${n}: a shard cannot hold more buckets than exist; ` +
      `lower ${kf} to at most ${n} or raise ${bf} to at least ${k}`);
  }
  const bits = shardBits(n, k);
  if (bits > MAX_SHARD_BITS) {
    fail(`C(${n}, ${k}) has about ${bits.toFixed(0)} bits, more than this tool handles ` +
      `(${MAX_SHARD_BITS}); lower ${kf} or ${bf}`);
  }
  if (bits * (k + 1) > PAGE_MAX_EXACT_BITS) {
    fail(`C(${n}, ${k}) has about ${bits.toFixed(0)} bits: its ${k + 1} exact overlap ` +
      `fractions are more than this page computes at once; lower ${kf} or ${bf}, or run ` +
      `shuffle-lab size --buckets ${n} --per-tenant ${k}`);
  }
  return bits;
}

/**
 * The report of `shuffle-lab size` for the inputs `a` ({buckets, per_tenant,
 * tenants?, borrow_from?, lender_reserve?, noisy?, per_user?}), as the object
 * `size --json` prints, key for key.
 */
function sizeReport(a) {
  const n = a.buckets, k = a.per_tenant;
  checkSize(n, k);
  const shards = binom(n, k);
  const disjoint = binom(n - k, k);
  const first = Math.max(2 * k - n, 0);
  const pmfExact = [];
  const pmf = [];
  for (let j = 0; j < first; j++) {
    pmfExact.push("0/1");
    pmf.push(0);
  }
  let ca = binom(k, first), cb = binom(n - k, k - first);
  for (let j = first; j <= k; j++) {
    const x = ca * cb;
    pmf.push(ratio(x, shards));
    pmfExact.push(fracStr(x, shards));
    if (j < k) {
      ca = (ca * BigInt(k - j)) / BigInt(j + 1);
      cb = (cb * BigInt(k - j)) / BigInt(n + j + 1 - 2 * k);
    }
  }
  const r = {
    buckets: n,
    per_tenant: k,
    shards: shards.toString(),
    p_identical: ratio(1n, shards),
    p_disjoint: ratio(disjoint, shards),
    p_any_overlap: ratio(shards - disjoint, shards),
    overlap_pmf: pmf,
    overlap_pmf_exact: pmfExact,
    bucket_blast_radius: k / n,
  };
  const others = a.tenants === undefined ? null : BigInt(Math.max(a.tenants - 1, 0));
  if (others !== null) {
    const total = (x) => ratio(x * others, shards);
    r.tenants = a.tenants;
    r.expected_fully_down = total(1n);
    r.expected_degraded = total(shards - disjoint - 1n);
    r.expected_unaffected = total(disjoint);
    if (n % k === 0) {
      const groups = BigInt(n / k);
      r.fixed_shards = {
        fully_down: ratio(others, groups),
        degraded: 0,
        unaffected: ratio((groups - 1n) * others, groups),
      };
    } else {
      r.fixed_shards = null;
    }
    r.shared_pool = { fully_down: Number(others), degraded: 0, unaffected: 0 };
  }
  const borrowing = borrowSection(a, n, k, shards, others);
  if (borrowing) r.borrowing = borrowing;
  const noisy = noisySection(a, n, k, shards);
  if (noisy) r.noisy = noisy;
  const nested = nestedSection(a, n, k, shards, others);
  if (nested) r.nested = nested;
  return r;
}

function borrowSection(a, n, k, shards, others) {
  const d = a.borrow_from;
  if (d === undefined) {
    if (a.lender_reserve !== undefined) {
      fail(`--lender-reserve ${a.lender_reserve} has no effect without --borrow-from: add ` +
        `--borrow-from D (spill buckets per tenant, at most ${n - k}) or drop --lender-reserve`);
    }
    return null;
  }
  const rv = a.lender_reserve === undefined ? DEFAULT_LENDER_RESERVE : a.lender_reserve;
  if (d > n - k) {
    fail(`--borrow-from ${d} with --per-tenant ${k} gives each tenant ${k + d} buckets, ` +
      `more than --buckets ${n}: lower --borrow-from to at most ${n - k} or raise --buckets ` +
      `to at least ${k + d}`);
  }
  if (!(rv >= 0 && rv < 1)) {
    fail(`--lender-reserve ${rv} is not a share of a bucket's burst: set --lender-reserve ` +
      `from 0 (lend everything) up to but not including 1, such as 0.5`);
  }
  const [rn, rd] = fromF64(rv);
  const sets = binom(n - k, d);
  const pairs = shards * sets;
  const down = rn === 0n ? binom(k + d, d) : 1n;
  const untouched = binom(n - k - d, k) * sets;
  const s = {
    spill: d,
    reserve: rv,
    spill_sets: sets.toString(),
    p_fully_down: ratio(down, pairs),
    p_fully_down_exact: fracStr(down, pairs),
    p_degraded: ratio(pairs - down - untouched, pairs),
    p_unaffected: ratio(untouched, pairs),
    sustained_share: ratio(BigInt(k + d), BigInt(n)),
    sustained_share_exact: fracStr(BigInt(k + d), BigInt(n)),
  };
  const bn = rd * BigInt(k) + (rd - rn) * BigInt(d), bd = rd * BigInt(n);
  s.burst_share = ratio(bn, bd);
  s.burst_share_exact = fracStr(bn, bd);
  s.owners_keep = rv;
  if (others !== null) {
    s.expected = {
      fully_down: ratio(down * others, pairs),
      degraded: ratio((pairs - down - untouched) * others, pairs),
      unaffected: ratio(untouched * others, pairs),
    };
  }
  return s;
}

function noisySection(a, n, k, shards) {
  const h = a.noisy;
  if (h === undefined) return null;
  if (h === 0) {
    fail("--noisy 0 is no flood: set --noisy to the number of tenants flooding at once, 1 or more");
  }
  const lbits = log10Count(shards) / LOG10_2;
  if (h * lbits > MAX_NOISY_BITS) {
    fail(`--noisy ${h} with C(${n}, ${k}) ≈ 2^${lbits.toFixed(0)} shards makes exact numbers ` +
      `of ${(h * lbits).toFixed(0)} bits, more than this tool handles (${MAX_NOISY_BITS}); ` +
      `lower --noisy to at most ${Math.floor(MAX_NOISY_BITS / Math.max(lbits, 1))}`);
  }
  if (h * lbits > PAGE_MAX_NOISY_BITS) {
    fail(`--noisy ${h} with C(${n}, ${k}) makes exact numbers of ${(h * lbits).toFixed(0)} bits, ` +
      `more than this page computes at once (${PAGE_MAX_NOISY_BITS}); lower --noisy to at most ` +
      `${Math.floor(PAGE_MAX_NOISY_BITS / Math.max(lbits, 1))}, or run shuffle-lab size --noisy ${h}`);
  }
  const hb = BigInt(h);
  const all = shards ** hb;
  let plus = 0n, minus = 0n, choose = 1n;
  for (let i = 0; i <= k; i++) {
    const term = choose * binom(n - i, k) ** hb;
    if (i % 2 === 0) plus += term;
    else minus += term;
    choose = (choose * BigInt(k - i)) / BigInt(i + 1);
  }
  const covered = plus - minus;
  const untouched = binom(n - k, k) ** hb;
  const degraded = all - covered - untouched;
  const s = {
    flooders: h,
    p_covered: ratio(covered, all),
    p_covered_exact: fracStr(covered, all),
    p_degraded: ratio(degraded, all),
    p_untouched: ratio(untouched, all),
    p_untouched_exact: fracStr(untouched, all),
  };
  if (a.tenants !== undefined) {
    const o = BigInt(Math.max(a.tenants - h, 0));
    s.expected = {
      fully_down: ratio(covered * o, all),
      degraded: ratio(degraded * o, all),
      unaffected: ratio(untouched * o, all),
    };
  }
  return s;
}

function nestedSection(a, n, k, shards, others) {
  const j = a.per_user;
  if (j === undefined) return null;
  if (j === 0 || j > k) {
    fail(`--per-user ${j} is not between 1 and --per-tenant ${k}: a user draws from some of ` +
      `its tenant's k buckets; set --per-user between 1 and ${k}`);
  }
  const subsets = binom(k, j);
  const disjoint = binom(k - j, j);
  const down = j === k ? 1n : 0n;
  const missing = binom(n - j, k);
  const s = {
    per_user: j,
    subsets: subsets.toString(),
    p_user_fully_down: ratio(1n, subsets),
    p_user_fully_down_exact: fracStr(1n, subsets),
    p_user_degraded: ratio(subsets - disjoint - 1n, subsets),
    p_user_degraded_exact: fracStr(subsets - disjoint - 1n, subsets),
    p_user_unaffected: ratio(disjoint, subsets),
    p_user_unaffected_exact: fracStr(disjoint, subsets),
    p_tenant_fully_down: ratio(down, shards),
    p_tenant_fully_down_exact: fracStr(down, shards),
    p_tenant_degraded: ratio(shards - down - missing, shards),
    p_tenant_unaffected: ratio(missing, shards),
    p_tenant_unaffected_exact: fracStr(missing, shards),
  };
  if (others !== null) {
    s.expected_tenants = {
      fully_down: ratio(down * others, shards),
      degraded: ratio((shards - down - missing) * others, shards),
      unaffected: ratio(missing * others, shards),
    };
  }
  return s;
}

/** The points of `shuffle-lab plot --buckets N` (k = 1 ..= min(N, 16)). */
function plotPoints(n) {
  const kmax = Math.min(n, 16);
  const points = [];
  for (let k = 1; k <= kmax; k++) {
    points.push({
      per_tenant: k,
      log10_p_identical: -log10Count(binom(n, k)),
      bucket_blast_radius: k / n,
    });
  }
  return { buckets: n, per_tenant_max: kmax, points };
}
