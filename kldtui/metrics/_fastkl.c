/* kldtui fused compare kernel: the per-row sums of kldtui.metrics.kernels in two passes per row.
 *
 * Compiled at first use by kldtui.metrics.ckernel with the system C compiler (GCC or Clang vector
 * extensions) and loaded with ctypes, which releases the GIL, so Python threads run row blocks in
 * parallel.  Vectors are the machine's native width, chosen at compile time: 8 float64 lanes with
 * AVX-512, 4 with AVX/AVX2, 2 otherwise (SSE2, NEON on aarch64).  Wider-than-native vectors would be
 * split by the compiler and spilled to the stack (measured: 3x slower on AVX2, the argmax pass 10x).
 *
 * For each row, with a = x - max x and b = y - max y (float32 -> float64, exact):
 *   out[0..6] = s_x, s_y, c_x = sum e^a (a-b), h_x = sum e^a a, h_y = sum e^b b,
 *               m = sum n log n with n = e^a + e^b s_x/s_y, c_y = sum e^b (b-a)
 *   out[7], out[8] = a[tok], b[tok]
 *   iout[0..2] = argmax x (first), argmax y (first), #{ y_i > y[argmax x] }
 * Masks: a logit at -inf, or so low that e^a < e^-708 (a < -708), has probability exactly 0 on its
 * side: its own terms are 0 (0 log 0 = 0), and c_x (c_y) is +Inf when the reference (candidate)
 * gives the token a positive probability and the other side 0 (infinite KL; JS stays finite).
 * A row with NaN or +Inf anywhere gets NaN sums (the caller reports it): a is NaN there, or the
 * row's maximum is +Inf and every a (or b) is NaN; a row of -Inf only has a NaN maximum shift too.
 * n log n is 0 for n < 1e-300 (below 1e-290 absolute).
 * Sums are float64 in W lanes, folded into the total every BLOCK elements (error ~ (BLOCK/W +
 * vocab/BLOCK) ulp of the sum of |terms|).
 */
#include <stdint.h>
#include <string.h>
#include <math.h>

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
 * NaN is never the maximum here; a row with NaN or Inf gets non-finite sums anyway. */
static void argmax2(const float *x, const float *y, int64_t n, int64_t *ax, int64_t *ay,
                    float *lx, float *ly) {
    const int L = VBYTES / 4;
    float bx = -INFINITY, by = -INFINITY;
    int64_t kx = -1, ky = -1;
    vf16 mnx, mny;
    for (int j = 0; j < L; j++) { mnx[j] = INFINITY; mny[j] = INFINITY; }
    int64_t i = 0;
    for (; i + ABLOCK <= n; i += ABLOCK) {
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
        }
        float hx = mx[0], hy = my[0];
        for (int j = 1; j < L; j++) { hx = mx[j] > hx ? mx[j] : hx; hy = my[j] > hy ? my[j] : hy; }
        if (hx > bx || kx < 0) { bx = hx; kx = i; }
        if (hy > by || ky < 0) { by = hy; ky = i; }
    }
    float lowx = INFINITY, lowy = INFINITY;
    for (int j = 0; j < L; j++) {
        lowx = mnx[j] < lowx ? mnx[j] : lowx;
        lowy = mny[j] < lowy ? mny[j] : lowy;
    }
    *ax = finish_argmax(x, n, i, &bx, kx, &lowx);
    *ay = finish_argmax(y, n, i, &by, ky, &lowy);
    *lx = lowx;
    *ly = lowy;
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
                /* probability 0 on a side (-inf, or e^a below e^-708): 0 log 0 = 0 in its own
                 * terms, an infinite log-ratio where the other side is positive */
                const vl za = xa == splat(0.0), zb = xb == splat(0.0);
                const vd zero = splat(0.0), inf = splat(INFINITY);
                cx += sel(za, zero, xa * sel(zb, inf, d));
                hx += sel(za, zero, xa * a);
                hy += sel(zb, zero, xb * b);
                if (reverse) cy += sel(zb, zero, xb * sel(za, inf, -d));
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
        if (xa != 0.0) { t_cx += xa * (xb == 0.0 ? INFINITY : d); t_hx += xa * a; }
        if (xb != 0.0) { t_hy += xb * b; if (reverse) t_cy += xb * (xa == 0.0 ? INFINITY : -d); }
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
    *rank_out = rank;
}

void fastkl_rows(const float *x, const float *y, int64_t rows, int64_t vocab, const int64_t *tok,
                 int reverse, double *ea, double *eb, double *out, int64_t *iout) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * vocab;
        const float *yr = y + r * vocab;
        double *o = out + r * 9;
        int64_t *io = iout + r * 3;
        float lx, ly;
        int64_t ax, ay;
        argmax2(xr, yr, vocab, &ax, &ay, &lx, &ly);
        io[0] = ax;
        io[1] = ay;
        const double mx = xr[ax], my = yr[ay];
        const float yt = yr[ax];
        o[7] = (double)xr[tok[r]] - mx;
        o[8] = (double)yr[tok[r]] - my;
        /* exp(a) >= exp(-700) everywhere when both rows span less than 700: no underflow guard */
        const int guard = !((double)lx - mx > -700.0 && (double)ly - my > -700.0);
        int64_t rank = 0;
        const float *xn = r + 1 < rows ? xr + vocab : 0, *yn = r + 1 < rows ? yr + vocab : 0;
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
    }
    return worst;
}
