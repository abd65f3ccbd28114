// numpy's default random generator, numpy.random.default_rng(seed).random(n): SeedSequence
// (numpy/random/bit_generator.pyx) seeding PCG64 (XSL-RR 128/64), doubles from the top 53 bits.
// The same seed gives the Python runtime's draws, so sampling chooses the same ids.

const M32 = 0xffffffffn;
const M64 = (1n << 64n) - 1n;
const M128 = (1n << 128n) - 1n;
const PCG_MULT = 0x2360ed051fc65da44385df649fccf645n;
const INIT_A = 0x43b0d7e5;
const MULT_A = 0x931e8875;
const INIT_B = 0x8b51f9dd;
const MULT_B = 0x58f38ded;
const MIX_MULT_L = 0xca01f9dd;
const MIX_MULT_R = 0x4973f715;
const POOL_SIZE = 4;

const mul32 = (a, b) => Math.imul(a, b) >>> 0;

/** The 32-bit words of a non-negative integer seed, least significant first ([0] for 0). */
function words(seed) {
  let s = BigInt(seed);
  const out = [];
  do {
    out.push(Number(s & M32));
    s >>= 32n;
  } while (s > 0n);
  return out;
}

/** SeedSequence(entropy).generate_state(n_words, uint32). */
function seedState(entropy, nWords) {
  let hashConst = INIT_A;
  const hashmix = (value) => {
    value = (value ^ hashConst) >>> 0;
    hashConst = mul32(hashConst, MULT_A);
    value = mul32(value, hashConst);
    return (value ^ (value >>> 16)) >>> 0;
  };
  const mix = (x, y) => {
    const r = (mul32(MIX_MULT_L, x) - mul32(MIX_MULT_R, y)) >>> 0;
    return (r ^ (r >>> 16)) >>> 0;
  };
  const pool = new Array(POOL_SIZE);
  for (let i = 0; i < POOL_SIZE; i++) pool[i] = hashmix(i < entropy.length ? entropy[i] : 0);
  for (let src = 0; src < POOL_SIZE; src++) {
    for (let dst = 0; dst < POOL_SIZE; dst++) if (src !== dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
  }
  for (let src = POOL_SIZE; src < entropy.length; src++) {
    for (let dst = 0; dst < POOL_SIZE; dst++) pool[dst] = mix(pool[dst], hashmix(entropy[src]));
  }
  let h = INIT_B;
  const out = [];
  for (let i = 0; i < nWords; i++) {
    let v = (pool[i % POOL_SIZE] ^ h) >>> 0;
    h = mul32(h, MULT_B);
    v = mul32(v, h);
    out.push((v ^ (v >>> 16)) >>> 0);
  }
  return out;
}

export class PCG64 {
  /** seed: a non-negative integer (as numpy's default_rng(seed)), or null: a fresh one. */
  constructor(seed = null) {
    if (seed === null) {
      const fresh = new Uint32Array(4);
      // Node 18 has no global crypto without a flag: Math.random's entropy is enough for a seed
      if (globalThis.crypto?.getRandomValues) globalThis.crypto.getRandomValues(fresh);
      else for (let i = 0; i < 4; i++) fresh[i] = Math.floor(Math.random() * 2 ** 32);
      seed = fresh.reduce((acc, w) => (acc << 32n) | BigInt(w), 0n);
    }
    const w = seedState(words(seed), 8); // generate_state(4, uint64): little-endian word pairs
    const u64 = (i) => (BigInt(w[2 * i + 1]) << 32n) | BigInt(w[2 * i]);
    const initState = (u64(0) << 64n) | u64(1);
    const initSeq = (u64(2) << 64n) | u64(3);
    this.inc = ((initSeq << 1n) | 1n) & M128;
    this.state = 0n;
    this.step();
    this.state = (this.state + initState) & M128;
    this.step();
  }

  step() {
    this.state = (this.state * PCG_MULT + this.inc) & M128;
  }

  /** The next 64-bit output (XSL-RR), as a BigInt. */
  next64() {
    this.step();
    const s = this.state;
    const x = ((s >> 64n) ^ s) & M64;
    const rot = s >> 122n;
    return ((x >> rot) | (x << ((64n - rot) & 63n))) & M64;
  }

  /** n doubles in [0, 1), as Generator.random(n). */
  random(n) {
    const out = new Float64Array(n);
    for (let i = 0; i < n; i++) out[i] = Number(this.next64() >> 11n) * 2 ** -53;
    return out;
  }
}
