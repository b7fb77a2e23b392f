/* kldtui fused compare kernel: per-row divergences and top-token figures, two paths.
 *
 * Compiled at first use by kldtui.metrics.ckernel with the system C compiler (GCC or Clang vector
 * extensions) and loaded with ctypes, which releases the GIL, so Python threads run row blocks in
 * parallel.  Vectors are the machine's native width, chosen at compile time (64 bytes with
 * AVX-512, 32 with AVX/AVX2, 16 otherwise: SSE2, NEON on aarch64).  Wider-than-native vectors would
 * be split by the compiler and spilled to the stack (measured: 3x slower on AVX2).
 *
 * Every row first gets one pass over both sides: argmax (first maximum), minimum, and whether every
 * logit is finite.  Then:
 * - the float32 path (fast_row below) for rows whose logits are all finite and within SPAN (80) of
 *   their row maximum on both sides, i.e. nearly every real row: float32 exps, second-order sums,
 *   KL, reverse KL and JS computed here (iout[3] = 1; out[2..5] = KL, JS, reverse KL, T);
 * - the float64 path (row_sums) for the others (masks at -inf, very wide rows, NaN/Inf): the
 *   first-order sums below, turned into figures by kernels.combine (iout[3] = 0).
 *
 * The float64 path, for each row, with a = x - max x and b = y - max y (float32 -> float64, exact):
 *   out[0..6] = s_x, s_y, c_x = sum e^a (a-b), h_x = sum e^a a, h_y = sum e^b b,
 *               m = sum n log n with n = e^a + e^b s_x/s_y, c_y = sum e^b (b-a)
 *   out[7], out[8] = a[tok], b[tok]
 *   out[9], out[10] = sum e^a a, sum e^b b (both paths: the entropies, H = log s - out[9] / s)
 *   iout[0..2] = argmax x (first), argmax y (first), #{ y_i > y[argmax x] } (both paths)
 * Masks: only a logit at -inf is a mask: c_x (c_y) is +Inf when the reference (candidate) gives
 * the token a positive probability and the other side masks it (infinite KL; JS stays finite). A
 * finite logit so low that e^a < e^-708 (a < -708) has its own terms taken as 0 (0 log 0 = 0), but
 * its log-ratio against the other side is the finite a - b: finite logits give finite KL.
 * A row with NaN or +Inf anywhere gets NaN sums (the caller reports it): a is NaN there, or the
 * row's maximum is +Inf and every a (or b) is NaN; a row of -Inf only has a NaN maximum shift too.
 * n log n is 0 for n < 1e-300 (below 1e-290 absolute).
 * Sums are float64 in W lanes, folded into the total every BLOCK elements (error ~ (BLOCK/W +
 * vocab/BLOCK) ulp of the sum of |terms|).
 */
#include <stdint.h>
#include <string.h>
#include <math.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define VBYTES 64
#elif defined(__AVX__)
#define VBYTES 32
#else
#define VBYTES 16
#endif
#define W (VBYTES / 8) /* float64 lanes */
#define AI __attribute__((always_inline)) /* inlined everywhere: vector arguments never touch memory */
#define BLOCK 1024

typedef double vd __attribute__((vector_size(W * 8)));
typedef int64_t vl __attribute__((vector_size(W * 8)));
typedef uint64_t vu __attribute__((vector_size(W * 8)));
typedef float vf __attribute__((vector_size(W * 4)));
typedef int32_t vi __attribute__((vector_size(W * 4)));

static inline vd splat(double v) { vd r; for (int j = 0; j < W; j++) r[j] = v; return r; }
static inline vl splatl(int64_t v) { vl r; for (int j = 0; j < W; j++) r[j] = v; return r; }

static inline vd loadf(const float *p) {
    vf f;
    memcpy(&f, p, sizeof f);
    return __builtin_convertvector(f, vd);
}

static inline vd as_d(vl v) { vd r; memcpy(&r, &v, sizeof r); return r; }
static inline vl as_l(vd v) { vl r; memcpy(&r, &v, sizeof r); return r; }
static inline vd sel(vl m, vd a, vd b) { return as_d((m & as_l(a)) | (~m & as_l(b))); }

/* Shared by both exp/log variants below. */
#define ROUND_SHIFT 6755399441055744.0 /* 1.5 * 2^52: adding it rounds to an integer in the low bits */
#define LN2_HI 6.93147180369123816490e-01
#define LN2_LO 1.90821492927058770002e-10

/* e^a is 0 below -708: clamp there (with guard) and mark the clamped lanes in *under. */
static inline AI vd clamp_under(vd a, const int guard, vl *under) {
    *under = (vl){0};
    if (!guard) return a;
    *under = a < splat(-708.0);
    return sel(*under, splat(-708.0), a);
}

/* n log n is taken as 0 below 1e-300 (log's exponent trick would meet subnormals): with guard,
 * those lanes become 1 and are marked in *tiny. */
static inline AI vd clamp_tiny(vd n, const int guard, vl *tiny) {
    *tiny = (vl){0};
    if (!guard) return n;
    *tiny = n < splat(1e-300);
    return sel(*tiny, splat(1.0), n);
}

static inline vl exponent_of(vl bits) { return ((bits >> 52) & splatl(0x7ff)) - splatl(1023); }
static inline vd mantissa_of(vl bits) { /* in [1, 2) */
    return as_d((bits & splatl(0x000fffffffffffffLL)) | splatl(0x3ff0000000000000LL));
}
/* e (|e| < 1100) to double: put it in a double's mantissa and subtract the offset */
static inline vd small_int_to_double(vl e) {
    return as_d(e + splatl(0x4338000000000000LL)) - splat(ROUND_SHIFT);
}

/* e^a for a <= ~0; 0 below -708. k = round(a/ln2), r = a - k ln2 (|r| <= 0.35), Taylor to r^13
 * (truncation < 1e-17 relative), 2^k put in the exponent field. */
static inline AI vd vexp(vd a, const int guard) {
    const vd shift = splat(ROUND_SHIFT);
    vl under;
    a = clamp_under(a, guard, &under);
    vd kd = a * splat(1.4426950408889634) + shift;
    vl ki = as_l(kd) - as_l(shift);
    kd = kd - shift;
    vd r = a - kd * splat(LN2_HI);
    r = r - kd * splat(LN2_LO);
    vd p = splat(1.0 / 6227020800.0);
    p = p * r + splat(1.0 / 479001600.0);
    p = p * r + splat(1.0 / 39916800.0);
    p = p * r + splat(1.0 / 3628800.0);
    p = p * r + splat(1.0 / 362880.0);
    p = p * r + splat(1.0 / 40320.0);
    p = p * r + splat(1.0 / 5040.0);
    p = p * r + splat(1.0 / 720.0);
    p = p * r + splat(1.0 / 120.0);
    p = p * r + splat(1.0 / 24.0);
    p = p * r + splat(1.0 / 6.0);
    p = p * r + splat(0.5);
    p = p * r + splat(1.0);
    p = p * r + splat(1.0);
    vd v = as_d((vl)((vu)as_l(p) + ((vu)ki << 52)));
    return guard ? sel(under, splat(0.0), v) : v;
}

/* n log n for n >= 0 (0 for n < 1e-300, where log's exponent trick would meet subnormals).
 * n = 2^e m, m in [sqrt(1/2), sqrt 2); log m = 2 atanh(s), s = (m-1)/(m+1), |s| < 0.172,
 * series to s^23 (truncation < 1e-18). */
static inline AI vd vnlogn(vd n, const int guard) {
    vl tiny;
    n = clamp_tiny(n, guard, &tiny);
    vl bits = as_l(n);
    vl e = exponent_of(bits);
    vd m = mantissa_of(bits);
    vl big = m > splat(1.4142135623730951);
    m = sel(big, m * splat(0.5), m);
    e = e + (big & splatl(1));
    vd ed = small_int_to_double(e);
    vd s = (m - splat(1.0)) / (m + splat(1.0));
    vd s2 = s * s;
    vd p = splat(2.0 / 23.0);
    p = p * s2 + splat(2.0 / 21.0);
    p = p * s2 + splat(2.0 / 19.0);
    p = p * s2 + splat(2.0 / 17.0);
    p = p * s2 + splat(2.0 / 15.0);
    p = p * s2 + splat(2.0 / 13.0);
    p = p * s2 + splat(2.0 / 11.0);
    p = p * s2 + splat(2.0 / 9.0);
    p = p * s2 + splat(2.0 / 7.0);
    p = p * s2 + splat(2.0 / 5.0);
    p = p * s2 + splat(2.0 / 3.0);
    vd lm = s * s2 * p + splat(2.0) * s;
    vd lg = ed * splat(LN2_HI) + (lm + ed * splat(LN2_LO));
    return guard ? sel(tiny, splat(0.0), n * lg) : n * lg;
}

#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__) && !defined(FASTKL_NO_TABLES)
/* AVX-512 with GCC: 16-entry tables read with one two-register permute (vpermt2pd), which makes
 * the polynomials shorter and the log division-free. */
#define FASTKL_TABLES 1
static const double EXP2_16[16] = {
    1.0, 1.0442737824274138, 1.0905077326652577, 1.1387886347566916,
    1.189207115002721, 1.241857812073484, 1.2968395546510096, 1.3542555469368927,
    1.4142135623730951, 1.4768261459394993, 1.5422108254079407, 1.6104903319492543,
    1.681792830507429, 1.7562521603732995, 1.8340080864093424, 1.9152065613971474};
/* 1/c_j rounded, c_j = 1 + (j + 1/2)/16, and -log of that double (40-digit arithmetic, rounded) */
static const double LOG_INVC[16] = {
    0.9696969696969697, 0.9142857142857143, 0.8648648648648649, 0.8205128205128205,
    0.7804878048780488, 0.7441860465116279, 0.7111111111111111, 0.6808510638297872,
    0.6530612244897959, 0.6274509803921569, 0.6037735849056604, 0.5818181818181818,
    0.5614035087719298, 0.5423728813559322, 0.5245901639344263, 0.5079365079365079};
static const double LOG_LOGC[16] = {
    0.03077165866675366, 0.08961215868968717, 0.14518200984449783, 0.19782574332991992,
    0.2478361639045812, 0.2954642128938359, 0.3409265869705932, 0.38441169891033206,
    0.42608439531090014, 0.46608972992459924, 0.5045560107523953, 0.5415972824327444,
    0.5773153650348236, 0.6118015411059929, 0.6451379613735847, 0.6773988235918061};

static inline AI vd lut16(const double *t, vl j) {
    vd t0, t1;
    memcpy(&t0, t, sizeof t0);
    memcpy(&t1, t + W, sizeof t1);
    return __builtin_shuffle(t0, t1, j);
}

/* e^a for a <= ~0, 0 below -708: K = round(16 a / ln 2), r = a - K ln2/16 (|r| <= 0.0217),
 * Taylor to r^6 (truncation < 4.5e-16 relative, an odd function of r: ~2 ulp), times 2^((K mod 16)/16) from the table, 2^(K div 16) in the
 * exponent field. */
static inline AI vd vexp_t(vd a, const int guard) {
    const vd shift = splat(ROUND_SHIFT);
    vl under;
    a = clamp_under(a, guard, &under);
    vd kd = a * splat(23.083120654223414) + shift;
    vl ki = as_l(kd) - as_l(shift);
    kd = kd - shift;
    vd r = a - kd * splat(LN2_HI / 16.0);
    r = r - kd * splat(LN2_LO / 16.0);
    vd p = splat(1.0 / 720.0);
    p = p * r + splat(1.0 / 120.0);
    p = p * r + splat(1.0 / 24.0);
    p = p * r + splat(1.0 / 6.0);
    p = p * r + splat(0.5);
    p = p * r + splat(1.0);
    p = p * r + splat(1.0);
    p = p * lut16(EXP2_16, ki & splatl(15));
    vd v = as_d((vl)((vu)as_l(p) + ((vu)(ki >> 4) << 52)));
    return guard ? sel(under, splat(0.0), v) : v;
}

/* n log n: n = 2^e m, m in [1, 2), j = top 4 bits of m, r = m/c_j - 1 (|r| < 0.031, one FMA),
 * log m = log c_j + log1p(r), log1p to r^9 (truncation < 7e-17 absolute). 0 for n < 1e-300. */
static inline AI vd vnlogn_t(vd n, const int guard) {
    vl tiny;
    n = clamp_tiny(n, guard, &tiny);
    vl bits = as_l(n);
    vl e = exponent_of(bits);
    vd m = mantissa_of(bits);
    vl j = (bits >> 48) & splatl(15);
    vd r = m * lut16(LOG_INVC, j) - splat(1.0);
    vd ed = small_int_to_double(e);
    vd p = splat(-1.0 / 9.0);
    p = p * r + splat(1.0 / 8.0);
    p = p * r + splat(-1.0 / 7.0);
    p = p * r + splat(1.0 / 6.0);
    p = p * r + splat(-1.0 / 5.0);
    p = p * r + splat(1.0 / 4.0);
    p = p * r + splat(-1.0 / 3.0);
    p = p * r + splat(0.5);
    vd l1p = r - r * r * p;
    vd lg = ed * splat(LN2_HI)
            + ((lut16(LOG_LOGC, j) + ed * splat(LN2_LO)) + l1p);
    return guard ? sel(tiny, splat(0.0), n * lg) : n * lg;
}
#define VEXP vexp_t
#define VNLOGN vnlogn_t
#else
#define FASTKL_TABLES 0
#define VEXP vexp
#define VNLOGN vnlogn
#endif

static inline double hsum(vd v) {
    double t = 0.0;
    for (int j = 0; j < W; j++) t += v[j];
    return t;
}

typedef float vf16 __attribute__((vector_size(VBYTES))); /* native-width float32 */
typedef int32_t vi16 __attribute__((vector_size(VBYTES)));

#define ABLOCK 1024
static inline AI vf16 vmaxf(vf16 a, vf16 b) { vi16 g = a > b; return (vf16)((g & (vi16)a) | (~g & (vi16)b)); }
static inline AI vf16 vminf(vf16 a, vf16 b) { vi16 g = a < b; return (vf16)((g & (vi16)a) | (~g & (vi16)b)); }

/* first index of the maximum in v[blk .. blk + ABLOCK) or, when the tail beats every block, in
 * the tail; best and low cover the blocks on entry and the whole row on return */
static int64_t finish_argmax(const float *v, int64_t n, int64_t i, float *best, int64_t blk, float *low) {
    int64_t tail = -1;
    for (int64_t k = i; k < n; k++) {
        if (v[k] > *best || (blk < 0 && tail < 0)) { *best = v[k]; tail = k; }
        if (v[k] < *low) *low = v[k];
    }
    if (tail >= 0) return tail;
    for (int64_t k = blk; k < blk + ABLOCK; k++)
        if (v[k] == *best) return k;
    return blk;
}

/* argmax (first maximum) and minimum of both rows in one pass over the two streams: a vectorised
 * max per block of ABLOCK values, then a scalar search in the first block reaching the maximum.
 * NaN is never the maximum here; a row with NaN or Inf gets non-finite sums anyway.  Incremental:
 * amx_blocks scans whole blocks up to a position (the float32 path scans the next row's blocks
 * while its compute-bound second pass runs, instead of only prefetching them), amx_finish the
 * rest of the row. */
typedef struct {
    float bx, by;       /* the largest block maximum so far */
    int64_t kx, ky;     /* the first block reaching it (-1: none yet) */
    int64_t pos;        /* blocks scanned: [0, pos) */
    vf16 mnx, mny, nf;  /* minima; NaN once a NaN or an infinity was met */
} amx_t;

static void amx_init(amx_t *st) {
    st->bx = st->by = -INFINITY;
    st->kx = st->ky = -1;
    st->pos = 0;
    for (int j = 0; j < VBYTES / 4; j++) { st->mnx[j] = INFINITY; st->mny[j] = INFINITY; st->nf[j] = 0.0f; }
}

/* whole blocks of x and y (rows of n values) from st->pos up to position `upto` */
static void amx_blocks(amx_t *st, const float *x, const float *y, int64_t n, int64_t upto) {
    const int L = VBYTES / 4;
    vf16 mnx = st->mnx, mny = st->mny, nf = st->nf, zero = {0};
    int64_t i = st->pos;
    for (; i + ABLOCK <= n && i + ABLOCK <= upto; i += ABLOCK) {
        vf16 mx, my;
        for (int j = 0; j < L; j++) { mx[j] = -INFINITY; my[j] = -INFINITY; }
        for (int64_t k = i; k < i + ABLOCK; k += L) {
            vf16 t, u;
            memcpy(&t, x + k, sizeof t);
            memcpy(&u, y + k, sizeof u);
            mx = vmaxf(t, mx);
            my = vmaxf(u, my);
            mnx = vminf(t, mnx);
            mny = vminf(u, mny);
            nf += t * zero + u * zero;
        }
        float hx = mx[0], hy = my[0];
        for (int j = 1; j < L; j++) { hx = mx[j] > hx ? mx[j] : hx; hy = my[j] > hy ? my[j] : hy; }
        if (hx > st->bx || st->kx < 0) { st->bx = hx; st->kx = i; }
        if (hy > st->by || st->ky < 0) { st->by = hy; st->ky = i; }
    }
    st->pos = i;
    st->mnx = mnx;
    st->mny = mny;
    st->nf = nf;
}

static void amx_finish(amx_t *st, const float *x, const float *y, int64_t n, int64_t *ax, int64_t *ay,
                       float *lx, float *ly, int *finite) {
    const int L = VBYTES / 4;
    amx_blocks(st, x, y, n, n);
    float lowx = INFINITY, lowy = INFINITY, fin = 0.0f;
    for (int j = 0; j < L; j++) {
        lowx = st->mnx[j] < lowx ? st->mnx[j] : lowx;
        lowy = st->mny[j] < lowy ? st->mny[j] : lowy;
        fin += st->nf[j];
    }
    for (int64_t k = st->pos; k < n; k++) fin += x[k] * 0.0f + y[k] * 0.0f;
    *finite = fin == 0.0f;
    *ax = finish_argmax(x, n, st->pos, &st->bx, st->kx, &lowx);
    *ay = finish_argmax(y, n, st->pos, &st->by, st->ky, &lowy);
    *lx = lowx;
    *ly = lowy;
}

/* ---- The float32 path: rows whose logits are all finite and within SPAN of their maximum ----
 *
 * Per element, with P = e^a (float32), Q = e^b s_x/s_y (so that P/Q = p/q) and r = log p - log q
 * = (x - y) - C, C = (max x - max y) + log(s_x/s_y) (r from an exact float32 difference: TwoSum,
 * then C split into two floats), the sums are second-order forms whose terms are >= 0:
 *   KL(p||q) = sum p g(r),  g(r) = r - 1 + e^-r = r^2 h(r)     (because sum p e^-r = sum q = 1)
 *   KL(q||p) = sum q g(-r)
 *   JS       = 1/2 sum (p + q) phi(r), phi(r) = log 2 - H(1/(1 + e^-r)) = r^2 k(r^2)  (phi even)
 * For |r| < 2, h and k are polynomials (relative error < 1e-8 on [-2, 2]); beyond,
 * p g(r) = p (r - 1) + q and phi = log 2 - log1p(u) - |r| u/(1+u), u = e^-|r|.  Alongside,
 * T = sum p (e^-r - 1) (= 0 in exact arithmetic) measures how far the float32 normalisers are off:
 * KL = sum p g(r) - (T - log1p T) is exact for the distributions the float32 exps describe (their
 * rounding changes KL by a relative ~1e-7, however small KL is), and JS loses log1p(T)^2/8.
 * Sums: float32 terms, two at a time, added into float64 lanes. */
#define L32 (VBYTES / 4) /* float32 lanes */
#define CH (2 * L32)     /* elements per step: two vectors */
#define FBLOCK 256       /* elements whose far test is shared */
#define SPAN 80.0        /* e^a >= e^-80: a normal float32 */
typedef float vs __attribute__((vector_size(VBYTES)));
typedef int32_t vsi __attribute__((vector_size(VBYTES)));
typedef uint32_t vsu __attribute__((vector_size(VBYTES)));
typedef float vsh __attribute__((vector_size(VBYTES / 2)));

static inline AI vs fsplat(float v) { vs r; for (int j = 0; j < L32; j++) r[j] = v; return r; }
static inline AI vsi fbits(vs v) { vsi r; memcpy(&r, &v, sizeof r); return r; }
static inline AI vs ffrom(vsi v) { vs r; memcpy(&r, &v, sizeof r); return r; }
static inline AI vs fsel(vsi m, vs a, vs b) { return ffrom((m & fbits(a)) | (~m & fbits(b))); }
static inline AI vs fabsv(vs v) { return ffrom(fbits(v) & ((vsi){0} + 0x7fffffff)); }
static inline AI vs loadv(const float *p) { vs v; memcpy(&v, p, sizeof v); return v; }

/* error of s = fl(a + b): a + b = s + err exactly (TwoSum) */
static inline AI vs two_sum_err(vs a, vs b, vs s) {
    vs z = s - a;
    return (a - (s - z)) + (b - z);
}

/* e^(s + err) for s in [-89, 0], |err| <= ulp(s): k = round(s/ln2), r = s - k ln2 + err (Cody-Waite,
 * ln2's high part has 16 bits: k ln2_hi is exact), minimax degree 6 on |r| <= ln2/2 (2e-9),
 * 2^k put in the exponent field; ~1 ulp. */
static inline AI vs vexpf(vs s, vs err) {
    const vs shift = fsplat(12582912.0f); /* 1.5 * 2^23 */
    vs kd = s * fsplat(1.44269504088896341f) + shift;
    vsi ki = fbits(kd) - fbits(shift);
    kd = kd - shift;
    vs r = s - kd * fsplat(0.693145751953125f);
    r = r - kd * fsplat(1.428606820309417232e-6f);
    r = r + err;
    /* Estrin's scheme: a shorter dependency chain than Horner's (the loops are latency-bound) */
    const vs r2 = r * r, r4 = r2 * r2;
    const vs p01 = fsplat(1.000000036e+00f) * r + fsplat(1.0f);
    const vs p23 = fsplat(1.666642007e-01f) * r + fsplat(4.999999207e-01f);
    const vs p45 = fsplat(8.374824027e-03f) * r + fsplat(4.166822629e-02f);
    const vs p = (p23 * r2 + p01) + r4 * (fsplat(1.383683018e-03f) * r2 + p45);
    return ffrom((vsi)((vsu)fbits(p) + ((vsu)ki << 23)));
}

/* h(r) = (e^-r - 1 + r) / r^2 on [-2, 2], minimax degree 9 (relative error 8e-9), by Estrin's
 * scheme from r, r^2, r^4, r^8 */
static inline AI vs vh(vs r, vs r2, vs r4, vs r8) {
    const vs p01 = fsplat(-1.666666578e-01f) * r + fsplat(5.000000035e-01f);
    const vs p23 = fsplat(-8.333361246e-03f) * r + fsplat(4.166661907e-02f);
    const vs p45 = fsplat(-1.983913844e-04f) * r + fsplat(1.388989282e-03f);
    const vs p67 = fsplat(-2.759977699e-06f) * r + fsplat(2.472887554e-05f);
    const vs p89 = fsplat(-2.556983802e-08f) * r + fsplat(2.967222007e-07f);
    return ((p23 * r2 + p01) + r4 * (p67 * r2 + p45)) + r8 * p89;
}

/* k(t) = phi(sqrt t) / t on [0, 4], minimax degree 7 (relative error 8.5e-9), Estrin's scheme
 * from t, t^2, t^4 */
static inline AI vs vk(vs t, vs t2, vs t4) {
    const vs p01 = fsplat(-1.562496633e-02f) * t + fsplat(1.249999989e-01f);
    const vs p23 = fsplat(-1.840959244e-04f) * t + fsplat(1.735932787e-03f);
    const vs p45 = fsplat(-1.764549196e-06f) * t + fsplat(1.884406925e-05f);
    const vs p67 = fsplat(-4.968205582e-09f) * t + fsplat(1.280828444e-07f);
    return (p23 * t2 + p01) + t4 * (p67 * t2 + p45);
}

/* log1p(u) for u in [0, e^-2], u times a minimax degree 5 (relative error 3e-10) */
static inline AI vs vlog1p_small(vs u) {
    vs p = fsplat(-1.196060587e-01f);
    p = p * u + fsplat(1.933402835e-01f);
    p = p * u + fsplat(-2.495492965e-01f);
    p = p * u + fsplat(3.333193370e-01f);
    p = p * u + fsplat(-4.999998398e-01f);
    p = p * u + fsplat(9.999999997e-01f);
    return u * p;
}

#if VBYTES == 64
#define LO_HALF 0, 1, 2, 3, 4, 5, 6, 7
#define HI_HALF 8, 9, 10, 11, 12, 13, 14, 15
#elif VBYTES == 32
#define LO_HALF 0, 1, 2, 3
#define HI_HALF 4, 5, 6, 7
#else
#define LO_HALF 0, 1
#define HI_HALF 2, 3
#endif

/* float32 lanes added into float64 accumulators acc[0] (low half) and acc[1] (high half); GCC 12
 * splits a generic 4-float -> 4-double conversion in two, so x86 uses the instruction directly */
static inline AI void acc_f(vd *acc, vs v) {
#if defined(__clang__) || __GNUC__ >= 12
    vsh lo = __builtin_shufflevector(v, v, LO_HALF);
    vsh hi = __builtin_shufflevector(v, v, HI_HALF);
#else
    vsh lo, hi;
    memcpy(&lo, &v, sizeof lo);
    memcpy(&hi, (const char *)&v + sizeof lo, sizeof hi);
#endif
#if defined(__AVX512F__) && VBYTES == 64
    acc[0] += (vd)_mm512_cvtps_pd((__m256)lo);
    acc[1] += (vd)_mm512_cvtps_pd((__m256)hi);
#elif defined(__AVX__) && VBYTES == 32
    acc[0] += (vd)_mm256_cvtps_pd((__m128)lo);
    acc[1] += (vd)_mm256_cvtps_pd((__m128)hi);
#else
    acc[0] += __builtin_convertvector(lo, vd);
    acc[1] += __builtin_convertvector(hi, vd);
#endif
}

static inline int any_lane(vsi m) {
    int32_t t = 0;
    for (int j = 0; j < L32; j++) t |= m[j];
    return t != 0;
}

typedef struct { vs kl, klr, js, t, tr; } terms_t;

/* the terms of one vector: P, Q as above, x, y the logits; far = 0: the polynomials only (valid
 * where |r| < 2; *farm gets the lanes beyond), far = 1: every lane right */
static inline AI terms_t vterms(vs xv, vs yv, vs P, vs Q, vs ch, vs cl, const int reverse,
                                const int far, vsi *farm) {
    terms_t o;
    const vs ny = -yv;
    const vs d = xv + ny;
    const vs r = (d - ch) + (two_sum_err(xv, ny, d) - cl);
    const vs r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    const vs g = r2 * vh(r, r2, r4, r8);
    o.kl = P * g;
    o.t = o.kl - P * r; /* P (e^-r - 1); T needs no more than float32 accuracy */
    o.klr = o.tr = fsplat(0.0f);
    if (reverse) {
        const vs gr = r2 * vh(-r, r2, r4, r8);
        o.klr = Q * gr;
        o.tr = Q * (gr + r);
    }
    o.js = (P + Q) * (r2 * vk(r2, r4, r8));
    const vsi fm = r2 >= fsplat(4.0f);
    if (!far) {
        *farm |= fm;
        return o;
    }
    const vs ar = fabsv(r);
    const vs one = fsplat(1.0f);
    vs na = -ar;
    na = fsel(na < fsplat(-80.0f), fsplat(-80.0f), na);
    const vs u = vexpf(na, fsplat(0.0f));
    const vs phi = (fsplat(0.693147180559945309f) - vlog1p_small(u)) - ar * (u / (one + u));
    o.js = fsel(fm, (P + Q) * phi, o.js);
    o.kl = fsel(fm, P * (r - one) + Q, o.kl);
    o.t = fsel(fm, Q - P, o.t);
    if (reverse) {
        o.klr = fsel(fm, Q * (-r - one) + P, o.klr);
        o.tr = fsel(fm, P - Q, o.tr);
    }
    return o;
}

/* T - log1p(T) >= 0 without cancellation */
static double corr(double t) {
    if (fabs(t) < 1e-3) return t * t * (0.5 - t * (1.0 / 3.0 - t * (0.25 - t * 0.2)));
    return t - log1p(t);
}

/* pass 1 over one step (CH elements): P = e^a, e^b into the buffers, their sums, the rank count;
 * tail: px, py are padded copies whose lanes from rem on are not part of the row */
/* the rounding error of s = fl(x + m), m = -max: Fast2Sum (2 operations) where every |x| <= |m| in
 * the row (bounded: the rows of most models), else TwoSum (5) */
static inline AI vs shift_err(vs x, vs m, vs s, const int bounded) {
    return bounded ? x - (s - m) : two_sum_err(x, m, s);
}

static inline AI void step1(const float *px, const float *py, float *pa, float *pb, vs nmx, vs nmy,
                            vs vyt, vd *sx, vd *sy, vd *hx, vd *hy, vsi *cnt, const int tail, int64_t rem,
                            const int bounded) {
    vs e[4], h[4];
    for (int v = 0; v < 2; v++) {
        const vs xv = loadv(px + v * L32), yv = loadv(py + v * L32);
        vsi gt = yv > vyt;
        const vs sa = xv + nmx, sb = yv + nmy;
        vs e1 = vexpf(sa, shift_err(xv, nmx, sa, bounded));
        vs e2 = vexpf(sb, shift_err(yv, nmy, sb, bounded));
        if (tail) {
            vsi lane;
            for (int j = 0; j < L32; j++) lane[j] = v * L32 + j < rem ? -1 : 0;
            e1 = fsel(lane, e1, fsplat(0.0f));
            e2 = fsel(lane, e2, fsplat(0.0f));
            gt &= lane;
        }
        *cnt -= gt;
        memcpy(pa + v * L32, &e1, sizeof e1);
        memcpy(pb + v * L32, &e2, sizeof e2);
        e[v] = e1;
        e[2 + v] = e2;
        h[v] = e1 * sa; /* the entropies' sums (sum e^a a): a to float32 rounding, well within 1e-6 */
        h[2 + v] = e2 * sb;
    }
    acc_f(sx, e[0] + e[1]);
    acc_f(sy, e[2] + e[3]);
    acc_f(hx, h[0] + h[1]);
    acc_f(hy, h[2] + h[3]);
}

typedef struct { vd kl[2], klr[2], js[2]; vs t, tr; vsi farm; } bsum_t;

/* an optimisation barrier: the value is materialised as it is (no operation fused across it) */
#if defined(__x86_64__) || defined(__i386__)
#define OPAQUE(v) __asm__("" : "+v"(v))
#elif defined(__aarch64__)
#define OPAQUE(v) __asm__("" : "+w"(v))
#else
#define OPAQUE(v) __asm__("" : "+m"(v))
#endif

/* pass 2 over steps c0 .. c1 of a row */
static inline AI void steps2(const float *xr, const float *yr, const float *xpad, const float *ypad,
                             int64_t nfull, int64_t c0, int64_t c1, const float *ea, const float *eb,
                             vs vq, vs vch, vs vcl, bsum_t *b, const int reverse, const int far) {
    for (int64_t c = c0; c < c1; c++) {
        const int tail = c == nfull;
        const float *px = tail ? xpad : xr + c * CH, *py = tail ? ypad : yr + c * CH;
        const float *pa = ea + c * CH, *pb = eb + c * CH;
        /* Q rounded once, whatever the compiler fuses around it: with FMA contraction P + e^b q could
         * otherwise become one fused operation when the reverse terms do not need Q on its own, and
         * the forward JS would depend on --reverse */
        vs q0 = loadv(pb) * vq, q1 = loadv(pb + L32) * vq;
        OPAQUE(q0);
        OPAQUE(q1);
        const terms_t t0 = vterms(loadv(px), loadv(py), loadv(pa), q0, vch, vcl, reverse, far, &b->farm);
        const terms_t t1 = vterms(loadv(px + L32), loadv(py + L32), loadv(pa + L32), q1, vch, vcl, reverse,
                                  far, &b->farm);
        acc_f(b->kl, t0.kl + t1.kl);
        acc_f(b->js, t0.js + t1.js);
        b->t += t0.t + t1.t;
        if (reverse) {
            acc_f(b->klr, t0.klr + t1.klr);
            b->tr += t0.tr + t1.tr;
        }
    }
}

static void block2(const float *xr, const float *yr, const float *xpad, const float *ypad,
                   int64_t nfull, int64_t c0, int64_t c1, const float *ea, const float *eb,
                   vs vq, vs vch, vs vcl, bsum_t *b, const int reverse, const int far) {
    memset(b, 0, sizeof *b);
    if (reverse) {
        if (far) steps2(xr, yr, xpad, ypad, nfull, c0, c1, ea, eb, vq, vch, vcl, b, 1, 1);
        else steps2(xr, yr, xpad, ypad, nfull, c0, c1, ea, eb, vq, vch, vcl, b, 1, 0);
    } else {
        if (far) steps2(xr, yr, xpad, ypad, nfull, c0, c1, ea, eb, vq, vch, vcl, b, 0, 1);
        else steps2(xr, yr, xpad, ypad, nfull, c0, c1, ea, eb, vq, vch, vcl, b, 0, 0);
    }
}

/* one row on the float32 path; ea, eb hold at least vocab rounded up to CH floats */
static void fast_row(const float *xr, const float *yr, int64_t vocab, float mx, float my, float yt,
                     int bounded, int reverse, float *ea, float *eb, double *o, int64_t *rank_out,
                     const float *xn, const float *yn, amx_t *next) {
    const int64_t nfull = vocab / CH, rem = vocab % CH;
    const int64_t nch = nfull + (rem ? 1 : 0);
    float xpad[CH], ypad[CH];
    for (int j = 0; j < CH; j++) {
        xpad[j] = j < rem ? xr[nfull * CH + j] : mx;
        ypad[j] = j < rem ? yr[nfull * CH + j] : my;
    }
    /* pass 1 */
    const vs nmx = fsplat(-mx), nmy = fsplat(-my), vyt = fsplat(yt);
    vd sx[2] = {splat(0), splat(0)}, sy[2] = {splat(0), splat(0)};
    vd hx[2] = {splat(0), splat(0)}, hy[2] = {splat(0), splat(0)};
    vsi cnt = {0};
    if (bounded) {
        for (int64_t c = 0; c < nfull; c++)
            step1(xr + c * CH, yr + c * CH, ea + c * CH, eb + c * CH, nmx, nmy, vyt, sx, sy, hx, hy, &cnt, 0,
                  0, 1);
    } else {
        for (int64_t c = 0; c < nfull; c++)
            step1(xr + c * CH, yr + c * CH, ea + c * CH, eb + c * CH, nmx, nmy, vyt, sx, sy, hx, hy, &cnt, 0,
                  0, 0);
    }
    if (rem)
        step1(xpad, ypad, ea + nfull * CH, eb + nfull * CH, nmx, nmy, vyt, sx, sy, hx, hy, &cnt, 1, rem, 0);
    const double s_x = hsum(sx[0] + sx[1]), s_y = hsum(sy[0] + sy[1]);
    int64_t rank = 0;
    for (int j = 0; j < L32; j++) rank += cnt[j];
    /* pass 2: the terms */
    const double ratio = s_x / s_y;
    const float ratio_f = (float)ratio;
    const double cc = ((double)mx - (double)my) + log(ratio);
    const float ch_f = (float)cc, cl_f = (float)(cc - (double)ch_f);
    const vs vq = fsplat(ratio_f), vch = fsplat(ch_f), vcl = fsplat(cl_f);
    vd kl[2] = {splat(0), splat(0)}, klr[2] = {splat(0), splat(0)}, js[2] = {splat(0), splat(0)};
    double t_t = 0.0, t_tr = 0.0;
    const int64_t per = FBLOCK / CH > 0 ? FBLOCK / CH : 1;
    for (int64_t c0 = 0; c0 < nch; c0 += per) {
        const int64_t c1 = c0 + per < nch ? c0 + per : nch;
        if (xn) /* this pass is compute-bound: meanwhile scan the next row's blocks (memory-bound) */
            amx_blocks(next, xn, yn, vocab, c1 * CH);
        bsum_t b;
        block2(xr, yr, xpad, ypad, nfull, c0, c1, ea, eb, vq, vch, vcl, &b, reverse, 0);
        if (any_lane(b.farm)) /* a lane with |r| >= 2: again, with the far terms */
            block2(xr, yr, xpad, ypad, nfull, c0, c1, ea, eb, vq, vch, vcl, &b, reverse, 1);
        for (int h = 0; h < 2; h++) { kl[h] += b.kl[h]; js[h] += b.js[h]; klr[h] += b.klr[h]; }
        for (int j = 0; j < L32; j++) { t_t += b.t[j]; t_tr += b.tr[j]; }
    }
    const double inv = 1.0 / s_x;
    const double tf = t_t * inv;
    o[0] = s_x;
    o[1] = s_y;
    o[2] = hsum(kl[0] + kl[1]) * inv - corr(tf);
    const double dl = log1p(tf);
    o[3] = 0.5 * hsum(js[0] + js[1]) * inv - dl * dl * 0.125;
    o[4] = 0.0;
    if (reverse) {
        const double isg = 1.0 / ((double)ratio_f * s_y); /* 1 / sum Q */
        o[4] = hsum(klr[0] + klr[1]) * isg - corr(t_tr * isg);
    }
    o[5] = tf;
    o[6] = 0.0;
    o[9] = hsum(hx[0] + hx[1]);
    o[10] = hsum(hy[0] + hy[1]);
    *rank_out = rank;
}

/* the two passes over a row (see the top of the file); guard = 0 when no exp can underflow */
static inline __attribute__((always_inline)) void row_sums(
        const float *xr, const float *yr, int64_t vocab, double mx, double my, float yt, int reverse,
        double *ea, double *eb, double *o, int64_t *rank_out, const float *xn, const float *yn,
        const int guard) {
    const vd vmx = splat(mx), vmy = splat(my);
    double t_sx = 0, t_sy = 0, t_cx = 0, t_hx = 0, t_hy = 0, t_cy = 0;
    int64_t rank = 0;
    int64_t i = 0;
    const int64_t nvec = vocab - vocab % W;
    while (i < nvec) {
        vd sx = splat(0), sy = sx, cx = sx, hx = sx, hy = sx, cy = sx;
        vi cnt = {0};
        int64_t stop = i + BLOCK < nvec ? i + BLOCK : nvec;
        for (; i < stop; i += W) {
            vf yf;
            memcpy(&yf, yr + i, sizeof yf);
            vi gt = yf > yt;
            cnt -= gt;
            vd a = loadf(xr + i) - vmx;
            vd b = __builtin_convertvector(yf, vd) - vmy;
            vd xa = VEXP(a, guard);
            vd xb = VEXP(b, guard);
            vd d = a - b;
            memcpy(ea + i, &xa, sizeof xa);
            memcpy(eb + i, &xb, sizeof xb);
            sx += xa;
            sy += xb;
            if (guard) {
                /* e^a below e^-708 on a side: 0 log 0 = 0 in its own terms; an infinite log-ratio
                 * only against a mask (-inf) where this side is positive */
                const vl za = xa == splat(0.0), zb = xb == splat(0.0);
                const vl ma = a == splat(-INFINITY), mb = b == splat(-INFINITY);
                const vd zero = splat(0.0), inf = splat(INFINITY);
                cx += sel(za, zero, xa * sel(mb, inf, d));
                hx += sel(za, zero, xa * a);
                hy += sel(zb, zero, xb * b);
                if (reverse) cy += sel(zb, zero, xb * sel(ma, inf, -d));
            } else {
                cx += xa * d;
                hx += xa * a;
                hy += xb * b;
                if (reverse) cy -= xb * d;
            }
        }
        t_sx += hsum(sx); t_sy += hsum(sy); t_cx += hsum(cx);
        t_hx += hsum(hx); t_hy += hsum(hy); t_cy += hsum(cy);
        for (int j = 0; j < W; j++) rank += cnt[j];
    }
    for (; i < vocab; i++) {
        double a = (double)xr[i] - mx, b = (double)yr[i] - my;
        double xa = a < -708.0 ? 0.0 : exp(a), xb = b < -708.0 ? 0.0 : exp(b);
        double d = a - b;
        ea[i] = xa;
        eb[i] = xb;
        t_sx += xa; t_sy += xb;
        if (xa != 0.0) { t_cx += xa * (b == -INFINITY ? INFINITY : d); t_hx += xa * a; }
        if (xb != 0.0) { t_hy += xb * b; if (reverse) t_cy += xb * (a == -INFINITY ? INFINITY : -d); }
        rank += yr[i] > yt;
    }
    const double ratio = t_sx / t_sy;
    const vd vr = splat(ratio);
    double t_m = 0;
    i = 0;
    while (i < nvec) {
        vd m = splat(0);
        int64_t stop = i + BLOCK < nvec ? i + BLOCK : nvec;
        if (xn) {
            /* this pass is compute-bound: meanwhile pull the next row (same range) towards the
             * cache, so that its first, memory-bound pass does not wait on DRAM */
            for (int64_t k = i; k < stop; k += 16) {
                __builtin_prefetch(xn + k, 0, 1);
                __builtin_prefetch(yn + k, 0, 1);
            }
        }
        for (; i < stop; i += W) {
            vd xa, xb;
            memcpy(&xa, ea + i, sizeof xa);
            memcpy(&xb, eb + i, sizeof xb);
            m += VNLOGN(xa + xb * vr, guard);
        }
        t_m += hsum(m);
    }
    for (; i < vocab; i++) {
        double n = ea[i] + eb[i] * ratio;
        if (n >= 1e-300) t_m += n * log(n);
    }
    o[0] = t_sx; o[1] = t_sy; o[2] = t_cx; o[3] = t_hx; o[4] = t_hy; o[5] = t_m; o[6] = t_cy;
    o[9] = t_hx; o[10] = t_hy;
    *rank_out = rank;
}

/* iout[3] = 1 where the row took the float32 path: out[2..5] = KL, JS, reverse KL, T (above);
 * 0: the float64 sums of the top of the file.  11 outputs per row.  ea, eb: vocab + 64 doubles each. */
void fastkl_rows(const float *x, const float *y, int64_t rows, int64_t vocab, const int64_t *tok,
                 int reverse, double *ea, double *eb, double *out, int64_t *iout) {
    amx_t scan;
    amx_init(&scan);
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * vocab;
        const float *yr = y + r * vocab;
        double *o = out + r * 11;
        int64_t *io = iout + r * 4;
        float lx, ly;
        int64_t ax, ay;
        int finite;
        /* the scan this row's predecessor began (float32 path), or a new one */
        amx_finish(&scan, xr, yr, vocab, &ax, &ay, &lx, &ly, &finite);
        amx_init(&scan);
        io[0] = ax;
        io[1] = ay;
        const double mx = xr[ax], my = yr[ay];
        const float yt = yr[ax];
        o[7] = (double)xr[tok[r]] - mx;
        o[8] = (double)yr[tok[r]] - my;
        int64_t rank = 0;
        const float *xn = r + 1 < rows ? xr + vocab : 0, *yn = r + 1 < rows ? yr + vocab : 0;
        const int fast = finite && (double)lx - mx >= -SPAN && (double)ly - my >= -SPAN;
        io[3] = fast;
        if (fast) {
            /* every |x| <= max x (and |y| <= max y): x - max x has a cheaper exact error */
            const int bounded = mx >= 0.0 && my >= 0.0 && lx >= -mx && ly >= -my;
            fast_row(xr, yr, vocab, xr[ax], yr[ay], yt, bounded, reverse, (float *)ea, (float *)eb, o,
                     &rank, xn, yn, &scan);
            io[2] = rank;
            continue;
        }
        /* exp(a) >= exp(-700) everywhere when both rows span less than 700: no underflow guard */
        const int guard = !((double)lx - mx > -700.0 && (double)ly - my > -700.0);
        if (guard)
            row_sums(xr, yr, vocab, mx, my, yt, reverse, ea, eb, o, &rank, xn, yn, 1);
        else
            row_sums(xr, yr, vocab, mx, my, yt, reverse, ea, eb, o, &rank, xn, yn, 0);
        io[2] = rank;
    }
}

/* self-check used after compiling: exp and n log n against libm at a few points */
double fastkl_selfcheck(void) {
    double worst = 0.0;
    for (int k = 0; k < 4000; k++) {
        double a = -700.0 + k * 0.17512345;
        if (a > 0) a = -a * 1e-3;
        vd v = VEXP(splat(a), 1);
        double want = exp(a);
        double err = fabs(v[0] - want) / want;
        if (err > worst) worst = err;
        double n = exp(-690.0 + k * 0.1731) * (k % 2 ? 1.0 : 3.0);
        vd w = VNLOGN(splat(n), 1);
        double wl = n * log(n);
        double e2 = wl != 0.0 ? fabs(w[0] - wl) / fabs(wl) : fabs(w[0]);
        if (e2 > worst) worst = e2;
        double s = -80.0 + k * 0.02;
        if (s > 0) s = -s * 1e-3;
        vs f = vexpf(fsplat((float)s), fsplat(0.0f));
        double e3 = fabs((double)f[0] - exp((double)(float)s)) / exp((double)(float)s);
        if (!(e3 < 3e-7)) worst = 1.0; /* the float32 exp: ~1 ulp */
    }
    return worst;
}
