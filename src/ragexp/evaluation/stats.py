"""Paired statistics for deciding between retrieval configurations. Pure: no I/O, no MLflow.

Two runs R (candidate) and B (baseline) scored on the same questions give per-question
differences ``d_i = R_i - B_i`` (i = 1..n). For each measure and question kind:

- **effect**: ``mean(d)``;
- **interval**: 95% BCa bootstrap interval of ``mean(d)`` (Efron 1987; ``scipy.stats.bootstrap``'s
  numbers, computed from resamples drawn once per question count: ``_bootstrap_ci``;
  10,000 resamples of d, seeded). If BCa is undefined (its acceleration is 0/0 when all but
  one ``d_i`` are equal) the percentile interval is used instead;
- **p**: two-sided paired randomisation (sign-flip) test (Fisher 1935; recommended for IR by
  Smucker, Allan & Carterette, CIKM 2007): under H0 each ``d_i`` is as likely to be ``-d_i``;
  ``scipy.stats.permutation_test`` with 10,000 random flips (all ``2**n`` when that is fewer,
  which makes p exact; the flips are drawn once per question count and applied in numpy,
  to the same p, see ``randomisation_p``). A zero difference's flip changes no mean, so
  where the non-zero differences are few enough to enumerate (``2**m <= 10,000``) p is their
  exact p, which is the whole test's, rather than a random estimate of it;
- **adjusted p**: every table or gate tests a *family* of hypotheses (runs x measures x kinds).
  At alpha = 0.05 one test in twenty of a true null is "significant" by chance, so p-values are
  adjusted over the whole family: Holm's step-down (Holm 1979, controls the family-wise error
  rate; the default) or Benjamini-Hochberg (1995, controls the false discovery rate), both
  computed as ``statsmodels.stats.multitest.multipletests`` computes them (``adjust``);
- **questions needed**: how many questions a paired t-test needs to detect the observed mean
  difference with 80% power at two-sided alpha = 0.05, from the effect size
  ``d_z = mean(d) / sd(d)`` (Cohen 1988, sd with n - 1): the least n whose power by
  statsmodels' ``TTestPower`` (noncentral t) reaches 80%. It is the t-test's number, used as a close guide for the randomisation test;
  when it is far above the golden set's size, that set is too small to decide the difference.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Iterable, Mapping, Sequence

import numpy as np

from ragexp.errors import InvalidValue
from ragexp.records import OVERALL

N_RESAMPLES = 10_000
ALPHA = 0.05
POWER = 0.80
SEED = 0
# Resampled values (R x n) up to which the resample indices and sign flips of a question count
# are drawn once and kept (8 bytes each: 32 MB); above, scipy draws them per test, as it would.
SHARED_MAX = 4_000_000
# name -> statsmodels method. Holm by default.
CORRECTIONS = {"holm": "holm", "bh": "fdr_bh"}
CORRECTION_NAMES = {"holm": "Holm", "bh": "Benjamini-Hochberg"}
ALL = OVERALL  # the "kind" of a test over every question


@dataclass(frozen=True)
class Paired:
    """One paired comparison of a candidate against a baseline.

    ``measure``: ir_measures name (``nDCG@10``); ``kind``: ``"all"`` or a question kind;
    ``n``: paired questions; ``mean_diff``: candidate minus baseline, in the measure's units;
    ``ci_low``/``ci_high``: 95% BCa interval; ``p``: raw two-sided p; ``p_adj``: p adjusted over
    its family (NaN until :func:`adjust_family`); ``n_needed``: questions for 80% power
    (``inf`` when there is no difference to detect, NaN when it is undefined: one question, or
    differences without spread).
    """

    measure: str
    kind: str
    n: int
    mean_diff: float
    ci_low: float
    ci_high: float
    p: float
    n_needed: float
    p_adj: float = math.nan

    def significant(self, alpha: float = ALPHA) -> bool:
        """Adjusted p below alpha (raises if the family was never adjusted)."""
        if math.isnan(self.p_adj):
            raise InvalidValue(f"{self.measure} ({self.kind}): p was never adjusted for its family")
        return self.p_adj < alpha


def _check_pair(run: Sequence[float], base: Sequence[float]) -> np.ndarray:
    r, b = np.asarray(run, float), np.asarray(base, float)
    if r.shape != b.shape or r.ndim != 1:
        raise InvalidValue(f"paired scores need equal 1-d shapes, got {r.shape} and {b.shape}")
    if len(r) == 0:
        raise InvalidValue("no paired questions")
    if not (np.isfinite(r).all() and np.isfinite(b).all()):
        raise InvalidValue("paired scores contain NaN or infinity: a question was not scored")
    return r - b


def randomisation_p(d: np.ndarray, n_resamples: int = N_RESAMPLES, seed: int = SEED) -> float:
    """Two-sided sign-flip p-value of ``mean(d) != 0`` (see module docstring). Exactly 1.0 for
    one difference (its two sign flips give the same ``|mean|``) and when every ``d_i`` is 0.

    The value ``scipy.stats.permutation_test((d,), np.mean, permutation_type="samples",
    n_resamples=n_resamples, random_state=seed)`` gives, to the last digit, computed in one
    numpy pass over the sign flips scipy draws for ``len(d)`` differences (``_sign_flips``,
    drawn once per length: every test of a family pairs the same questions; 3 ms a test
    against scipy's 130 ms at 53 questions): ``p = (2 *
    min(#{null <= obs + g}, #{null >= obs - g}) + a) / (R + a)`` with ``g = 100 eps |obs|``,
    ``a = 0`` when all ``R = 2**n`` flips are enumerated and 1 when they are sampled
    (Phipson & Smyth 2010), clipped to 1.

    Where ``2**n`` flips are too many to enumerate but the ``m`` non-zero differences' ``2**m``
    are not, p is scipy's exact p of those ``m`` alone: a zero's flip changes no mean, so the
    ``2**n`` flips are ``2**(n - m)`` copies of the ``2**m`` and both give one exact p, where
    sampled flips would only estimate it (7 non-zero differences of 26, all negative: exactly
    2/128 = 0.0156, where 10,000 sampled flips read 0.019)."""
    d = np.asarray(d, float)
    if 2 ** min(len(d), 62) > n_resamples:
        nonzero = d[d != 0]
        if 2 ** min(len(nonzero), 62) <= n_resamples:
            d = nonzero  # enumerable: the exact p of the whole test
    if len(d) <= 1 or np.all(d == 0):  # scipy refuses one observation; p is 1 by enumeration
        return 1.0
    if len(d) * min(n_resamples, 2 ** min(len(d), 62)) > SHARED_MAX:  # too big to keep
        # defer heavy import
        from scipy import stats as sps

        return float(sps.permutation_test((d,), np.mean, permutation_type="samples",
                                          vectorized=True, n_resamples=n_resamples,
                                          alternative="two-sided", random_state=seed).pvalue)
    flips, exact = _sign_flips(len(d), n_resamples, seed)
    observed = np.mean(d, axis=-1)
    null = np.mean(flips * d, axis=-1)
    gamma = np.abs(np.finfo(float).eps * 100 * observed)
    a = 0 if exact else 1
    less = (np.count_nonzero(null <= observed + gamma) + a) / (len(null) + a)
    greater = (np.count_nonzero(null >= observed - gamma) + a) / (len(null) + a)
    return float(np.clip(min(less, greater) * 2, 0.0, 1.0))


@lru_cache(maxsize=16)
def _sign_flips(n: int, n_resamples: int, seed: int) -> tuple[np.ndarray, bool]:
    """``(flips, exact)``: the (R, n) matrix of +-1 that ``scipy.stats.permutation_test`` applies
    to ``n`` differences with ``n_resamples`` and ``seed`` (R = ``2**n`` and ``exact`` when that
    is at most ``n_resamples``, else R = ``n_resamples`` drawn), read by running it once on ones
    with a statistic that keeps the array it is given (its layout too, so the means sum in
    scipy's order)."""
    # defer heavy import
    from scipy import stats as sps  # 0.4 s: only the end of a sweep and the decide commands test

    seen: list[np.ndarray] = []

    def keep(x: np.ndarray, axis: int) -> np.ndarray:
        if x.ndim > 1:
            seen.append(x)
        return np.mean(x, axis=axis)

    sps.permutation_test((np.ones(n),), keep, permutation_type="samples", vectorized=True,
                         n_resamples=n_resamples, alternative="two-sided", random_state=seed)
    flips = seen[0] if len(seen) == 1 else np.concatenate(seen, axis=0)
    flips.flags.writeable = False
    return flips, 2 ** n <= n_resamples


def bootstrap_ci(d: np.ndarray, n_resamples: int = N_RESAMPLES, seed: int = SEED,
                 level: float = 0.95) -> tuple[float, float]:
    """``(low, high)`` BCa interval of ``mean(d)``; percentile when BCa is undefined; the point
    itself when every ``d_i`` is equal (no sampling variation to show). Kept per process for the
    same differences and settings: a sweep's comparisons and its page test the same pairs."""
    d = np.asarray(d, float)
    if np.all(d == d[0]):
        return float(d[0]), float(d[0])
    return _bootstrap_ci(d.tobytes(), n_resamples, seed, level)


@lru_cache(maxsize=4096)
def _bootstrap_ci(d_bytes: bytes, n_resamples: int, seed: int,
                  level: float) -> tuple[float, float]:
    """``scipy.stats.bootstrap((d,), np.mean, n_resamples=n_resamples, confidence_level=level,
    method="BCa", random_state=seed)``'s interval, to the last digit, and its percentile
    interval where BCa is undefined, as scipy 1.17 computes them (``_resampling.bootstrap``,
    ``_bca_interval``; Efron & Tibshirani 1993, 14.3 and eq. 14.15): the same resamples
    (``_resample_indices``, drawn once per question count), the same arrays reduced in the
    same order, the quantiles of the same bootstrap distribution as ``scipy.stats.quantile``
    computes them (``quantile_linear``; a test holds the interval equal to scipy's own call, so
    a scipy that computes otherwise fails it). Above ``SHARED_MAX`` resampled values (R x n) the indices are not kept and scipy's
    own call computes the interval."""
    # defer heavy import
    from scipy.special import ndtr, ndtri

    d = np.frombuffer(d_bytes, dtype=float)
    n = len(d)
    if n * max(n_resamples, n) > SHARED_MAX:  # too big to keep: scipy's own call, as before
        # defer heavy import
        from scipy import stats as sps

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy warns when BCa degenerates
            ci = sps.bootstrap((d,), np.mean, n_resamples=n_resamples, confidence_level=level,
                               method="BCa", random_state=seed).confidence_interval
            if not (np.isfinite(ci.low) and np.isfinite(ci.high)):
                ci = sps.bootstrap((d,), np.mean, n_resamples=n_resamples,
                                   confidence_level=level, method="percentile",
                                   random_state=seed).confidence_interval
        return float(ci.low), float(ci.high)
    theta_b = np.mean(d[_resample_indices(n, n_resamples, seed)], axis=-1)  # (R,)
    alpha = (1 - level) / 2
    with np.errstate(divide="ignore", invalid="ignore"):  # BCa degenerates: handled below
        theta_hat = np.expand_dims(np.mean(d, axis=-1), axis=-1)  # (1,)
        below = np.count_nonzero(theta_b < theta_hat, axis=-1) + \
            np.count_nonzero(theta_b <= theta_hat, axis=-1)
        z0 = ndtri(np.asarray(below, dtype=theta_hat.dtype) / (2 * n_resamples))
        theta_i = np.mean(d[_jackknife_indices(n)], axis=-1)  # (n,): d without question i
        u = (float(n) - 1) * (np.mean(theta_i, axis=-1, keepdims=True) - theta_i)
        a_hat = 1 / 6 * (np.sum(u ** 3, axis=-1) / float(n) ** 3) / \
            (np.sum(u ** 2, axis=-1) / float(n) ** 2) ** (3 / 2)
        z_alpha = float(ndtri(alpha))
        num1, num2 = z0 + z_alpha, z0 - z_alpha
        interval = np.stack((ndtr(z0 + num1 / (1 - a_hat * num1)),
                             ndtr(z0 + num2 / (1 - a_hat * num2))), axis=-1)
        ordered = np.sort(theta_b)
        ci = quantile_linear(ordered, interval)
    if np.any(np.isnan(ci)):  # percentile interval of the same resamples
        ci = quantile_linear(ordered, np.stack((np.asarray(alpha), np.asarray(1 - alpha)),
                                               axis=-1))
    return float(ci[..., 0]), float(ci[..., 1])


def quantile_linear(ordered: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``scipy.stats.quantile(x, p)`` (its default ``method="linear"``, Hyndman & Fan 1996
    type 7) of the sorted finite 1-d sample ``ordered`` (``np.sort(x)``) at the probabilities
    ``p`` (1-d float64), computed as scipy 1.17 computes it (``_quantile_iv``,
    ``_quantile_hf``): ``j + 1 = floor(p n + 1 - p)``, ``g = (p n + 1 - p) mod 1``,
    ``(1 - g) y[j] + g y[j + 1]`` with both indices clipped to the sample, NaN where ``p`` is
    NaN or outside [0, 1]. The same floats to the last bit (tests/unit/test_perf.py holds it
    against scipy's own call) in a quarter of its time: scipy's array-API checks cost 1.5 ms a
    call, twice a BCa interval."""
    n = float(len(ordered))
    mask = (p > 1) | (p < 0) | np.isnan(p)
    p = np.where(mask, 0.5, p)
    jg = p * n + (1 - p)
    jp1 = jg // 1
    j = jp1 - 1
    g = np.where(j < 0, 0.0, jg % 1)
    j, jp1 = np.clip(j, 0.0, n - 1), np.clip(jp1, 0.0, n - 1)
    out = (1 - g) * ordered[j.astype(np.int64)] + g * ordered[jp1.astype(np.int64)]
    return np.where(mask, np.nan, out)


@lru_cache(maxsize=16)
def _resample_indices(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """The (R, n) matrix of indices that ``scipy.stats.bootstrap`` with ``n_resamples`` and
    ``random_state=seed`` resamples ``n`` observations by (one draw of R x n: scipy draws its
    resamples in one batch unless asked for ``batch``), read by running it once on
    ``0..n-1``, whose resampled values are the indices themselves. Read-only."""
    # defer heavy import
    from scipy import stats as sps

    seen: list[np.ndarray] = []

    def keep(x: np.ndarray, axis: int) -> np.ndarray:
        if x.ndim > 1:
            seen.append(x)
        return np.mean(x, axis=axis)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sps.bootstrap((np.arange(n, dtype=float),), keep, n_resamples=n_resamples,
                      method="percentile", random_state=seed, vectorized=True)
    idx = np.concatenate(seen, axis=0).astype(np.intp)
    idx.flags.writeable = False
    return idx


@lru_cache(maxsize=16)
def _jackknife_indices(n: int) -> np.ndarray:
    """(n, n - 1): row i holds ``0..n-1`` without i, as scipy's ``_jackknife_resample``
    builds it. Read-only."""
    keep = ~np.eye(n, dtype=bool)
    idx = np.broadcast_to(np.arange(n), (n, n))[keep].reshape(n, n - 1)
    idx.flags.writeable = False
    return idx


def least_testable_n(alpha: float = ALPHA) -> int:
    """The fewest paired questions whose two-sided sign-flip test can reach ``p < alpha``: over
    ``n`` non-zero differences its least p is ``2 / 2**n`` (every sign alike, and the mirror
    image), so 6 at alpha 0.05 (``2/64 = 0.031``; ``2/32 = 0.0625`` at 5). Below it no paired
    test of ragexp can be significant, whatever the difference."""
    if not 0 < alpha < 1:
        raise InvalidValue(f"alpha must be in (0, 1), got {alpha}")
    n = 1
    while 2.0 ** (1 - n) >= alpha:
        n += 1
    return n


def questions_needed(d: Sequence[float], power: float = POWER, alpha: float = ALPHA) -> float:
    """Questions a two-sided paired t-test needs to detect ``mean(d)`` with ``power`` at
    ``alpha``, for effect size ``d_z = mean(d) / sd(d, ddof=1)`` (statsmodels ``TTestPower``),
    and never fewer than the sign-flip test needs to reach ``alpha`` at all
    (``least_testable_n``: the t-test's 2 of a large effect read "2 of the 2 questions needed"
    beside a p of 0.5).

    Returns NaN when ``d_z`` is undefined because the differences have no spread (every
    ``d_i`` equal, zero or not: ``0/0`` or ``x/0``; the t-test's limit of 2 questions would
    claim a power the sign-flip test cannot have, whose least p over 2 questions is 0.5), and
    ``inf`` when ``mean(d) == 0`` with spread (nothing to detect). Needs at least 2
    differences.
    """
    d = np.asarray(d, float)
    if len(d) < 2:
        raise InvalidValue(f"power needs at least 2 paired questions, got {len(d)}")
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if np.all(d == d[0]) or sd <= 1e-12 * abs(mean):  # no spread, up to rounding
        return math.nan
    if mean == 0:
        return math.inf
    return max(_least_n(abs(mean) / sd, power, alpha), float(least_testable_n(alpha)))


# bisection levels whose midpoints one power call evaluates (2**5 - 1 = 31 n's a call)
_LEVELS = 5


@lru_cache(maxsize=4096)
def _least_n(effect: float, power: float, alpha: float) -> float:
    """The least ``n >= 2`` whose two-sided paired t-test power (statsmodels
    ``TTestPower().power``, noncentral t) at effect size ``effect`` reaches ``power``; ``inf``
    past ``2**30`` questions. Power rises with n: n is found by doubling, then bisection
    (statsmodels' ``solve_power`` root finder can fail to converge on very large or very small
    effects). Each power call takes an array of n's (elementwise the same floats as one n at a
    time): every doubling step in one call, then the midpoints of ``_LEVELS`` levels of the
    bisection at once, walked down as the one-n-a-call bisection walks (the same n; 1.5 ms a
    call, against about 40 microseconds an n)."""
    # defer heavy import
    from statsmodels.stats.power import TTestPower

    def enough(ns: list[int]) -> dict[int, bool]:
        pw = TTestPower().power(effect_size=effect, nobs=np.asarray(ns, float), alpha=alpha,
                                alternative="two-sided")
        return dict(zip(ns, (np.asarray(pw, float) >= power).tolist()))

    doubling = [2 ** i for i in range(1, 31)]  # 2**30 is the first above 10**9: no further
    reached = enough(doubling)
    high = next((n for n in doubling if reached[n]), None)
    if high is None:
        return math.inf
    low = high // 2 if high > 2 else 1  # enough(low) is False (or low < 2)
    while high - low > 1:
        mids, spans = [], [(low, high)]
        for _ in range(_LEVELS):  # every midpoint the next levels of bisection can visit
            spans = [part for lo, hi in spans if hi - lo > 1
                     for part in ((lo, (lo + hi) // 2), ((lo + hi) // 2, hi))]
            mids += [hi for lo, hi in spans[::2]]
        reached = enough(sorted(set(mids)))
        for _ in range(_LEVELS):
            if high - low <= 1:
                break
            mid = (low + high) // 2
            low, high = (low, mid) if reached[mid] else (mid, high)
    return float(high)


def paired(run: Sequence[float], base: Sequence[float], measure: str,
           kind: str = ALL, interval: bool = True) -> Paired:
    """Compare per-question scores ``run`` against ``base`` (same questions, same order).
    ``interval=False`` leaves the interval and ``n_needed`` NaN, not computed: for callers that
    read only the difference and p (``tied_with_best``'s ``intervals``).

    Any ``n >= 1`` gives numbers: the exact sign-flip p (1.0 for one question: both signs give
    the same ``|mean|``); ``n_needed`` is NaN (undefined: no spread to estimate) for one
    question, whatever its difference, and as :func:`questions_needed` says for more. Below
    ``least_testable_n`` questions (6) the interval is NaN, not computed: no test can be
    significant there, and a bootstrap of so few values is no 95% interval (at 2 questions BCa
    gives their range, which excluded 0 beside p 0.5). Tables show it as ``n/a``
    (:func:`ragexp.evaluation.significance.format_delta`).
    Raises ``InvalidValue`` on unequal lengths, no questions, or non-finite scores.
    """
    d = _check_pair(run, base)
    if not interval:
        return Paired(measure, kind, len(d), float(d.mean()), math.nan, math.nan,
                      randomisation_p(d), math.nan)
    low, high = bootstrap_ci(d) if len(d) >= least_testable_n() else (math.nan, math.nan)
    if len(d) >= 2:
        n_needed = questions_needed(d)
    else:
        n_needed = math.nan
    return Paired(measure, kind, len(d), float(d.mean()), low, high, randomisation_p(d),
                  n_needed)


def adjust(p: Iterable[float], method: str = "holm") -> np.ndarray:
    """Adjusted p-values, same order as ``p``; ``method`` is ``holm`` or ``bh``.

    Holm: sort ascending, ``p_adj_(i) = max_{j<=i} min(1, (m - j + 1) p_(j))``.
    Benjamini-Hochberg: ``p_adj_(i) = min_{j>=i} min(1, m p_(j) / j)``.
    """
    if method not in CORRECTIONS:
        raise InvalidValue(f"unknown correction {method!r}; choose one of {', '.join(CORRECTIONS)}")
    p = np.asarray(list(p), float)
    if p.size == 0:
        return p
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise InvalidValue(f"p-values must lie in [0, 1], got {p.tolist()}")
    # The arithmetic of statsmodels' multipletests (same floats), without its gc.collect()
    # on every Holm call: 1.3 s a call in a sweep's large process, most of its page's time.
    order = np.argsort(p)
    ranked, m = p[order], len(p)
    if method == "holm":
        adjusted = np.maximum.accumulate(ranked * np.arange(m, 0, -1))
    else:
        adjusted = np.minimum.accumulate((ranked / (np.arange(1, m + 1) / float(m)))[::-1])[::-1]
    adjusted[adjusted > 1] = 1
    out = np.empty_like(adjusted)
    out[order] = adjusted
    return out


def adjust_family(tests: Sequence[Paired], method: str = "holm") -> list[Paired]:
    """The same tests with ``p_adj`` set, adjusting over all of them as one family."""
    adjusted = adjust([t.p for t in tests], method)
    return [replace(t, p_adj=float(a)) for t, a in zip(tests, adjusted)]


def correction_note(method: str, family: str) -> str:
    """One sentence naming the correction and the family it was applied over."""
    return (f"p_adj: {CORRECTION_NAMES[method]}-adjusted over {family}"
            + (" (family-wise error rate)" if method == "holm" else " (false discovery rate)")
            + f"; * marks p_adj < {ALPHA}.")


@dataclass(frozen=True)
class Tied:
    """Outcome of :func:`tied_with_best`: the best run by mean, every run not significantly
    worse than it after correction (the best included), and each run's test against it."""

    best: str
    tied: tuple[str, ...]
    tests: Mapping[str, Paired]


def best_of(means: Mapping[str, float]) -> str:
    """The run of the highest mean; of runs with equal means, the one whose id sorts first. The
    first of equal means in the caller's order was the rule, and the sweep, ``compare`` and the
    page hold their runs in other orders: three runs tied at nDCG@10 1.000 gave two bests."""
    if not means:
        raise InvalidValue("no runs to choose from")
    top = max(means.values())
    return min(r for r, m in means.items() if m == top)


def tied_with_best(scores: Mapping[str, Sequence[float]], measure: str,
                   method: str = "holm", alpha: float = ALPHA, intervals: bool = True) -> Tied:
    """Which runs cannot be told apart from the best one.

    ``scores``: ``{run: per-question scores}``, every array over the same questions in the
    same order. The best run has the highest mean (``best_of``: ties to the first id). Every
    other run is tested against it; the family is those ``len(scores) - 1`` tests. A run is
    tied when its adjusted p is at least ``alpha`` (or it is not worse at all).
    ``intervals=False``: the tests carry no interval or ``n_needed`` (NaN; ``paired``), which
    the choice does not read, for callers that show only the choice (3 of a test's 4 ms).
    """
    if not scores:
        raise InvalidValue("no runs to choose from")
    names = list(scores)
    means = {r: float(np.mean(np.asarray(scores[r], float))) for r in names}
    best = best_of(means)
    others = [r for r in names if r != best]
    tests = adjust_family([paired(scores[r], scores[best], measure, interval=intervals)
                           for r in others], method)
    by_run = dict(zip(others, tests))
    tied = [best] + [r for r in others
                     if not (by_run[r].mean_diff < 0 and by_run[r].p_adj < alpha)]
    return Tied(best, tuple(tied), by_run)


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b of two score lists over the same items (Kendall 1945, ties in both)::

        tau_b = (C - D) / sqrt((C + D + T_x) * (C + D + T_y))

    over the item pairs: ``C`` concordant, ``D`` discordant, ``T_x`` tied in ``x`` only, ``T_y``
    tied in ``y`` only (pairs tied in both count in neither). 1: the same order, -1: reversed;
    NaN when either list is constant. ``scipy.stats.kendalltau``'s default is the reference in
    the tests. Raises ``InvalidValue`` for lists of different lengths or of fewer than 2 items."""
    a, b = np.asarray(x, float), np.asarray(y, float)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 2:
        raise InvalidValue(f"Kendall's tau needs two lists of the same length >= 2, got "
                           f"{a.shape} and {b.shape}")
    i, j = np.triu_indices(len(a), k=1)
    sx, sy = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
    concordant, discordant = np.sum(sx * sy > 0), np.sum(sx * sy < 0)
    tied_x, tied_y = np.sum((sx == 0) & (sy != 0)), np.sum((sy == 0) & (sx != 0))
    denom = np.sqrt(float(concordant + discordant + tied_x) * float(concordant + discordant
                                                                    + tied_y))
    return float((concordant - discordant) / denom) if denom > 0 else float("nan")
