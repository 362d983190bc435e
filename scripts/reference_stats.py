#!/usr/bin/env python3
"""Independent reference values for the statistics tests of issue 21.

Run with scipy and numpy installed (e.g. `python3 -m venv /tmp/ref && /tmp/ref/bin/pip
install scipy numpy && /tmp/ref/bin/python scripts/reference_stats.py`). Every constant a
Rust test compares against is printed here with the expression that produced it; nothing
here calls tabcontam.
"""
import itertools
import math

import numpy as np
from scipy import stats

print("# one-sided binomial tests (significance::binomial_upper_tail)")
for k, n, p in [(30, 100, 0.5), (60, 100, 0.5), (15, 20, 0.5), (7, 10, 0.5)]:
    print(f"binomtest({k}, {n}, {p}, alternative='greater').pvalue = "
          f"{stats.binomtest(k, n, p, alternative='greater').pvalue!r}")
print(f"binomtest(30, 100, 0.5).pvalue (two-sided, the old membership p) = "
      f"{stats.binomtest(30, 100, 0.5).pvalue!r}")

print("\n# Poisson-binomial cell rules (probe::chance)")
def at_least(rates, need):
    total = 0.0
    for outcome in itertools.product([0, 1], repeat=len(rates)):
        if sum(outcome) >= need:
            total += math.prod(r if o else 1 - r for r, o in zip(rates, outcome))
    return total
print(f"P(>=3 of 5 | 7/8, 3/4 x4) = {at_least([7/8] + [3/4]*4, 3)!r}")
print(f"binom.sf(2, 5, 1/8) (old per-column product 1/8 per trial) = {stats.binom.sf(2, 5, 1/8)!r}")
print(f"binom.sf(2, 5, 0.78125) (issue: three 50/50 columns, 0.78 per trial) = {stats.binom.sf(2, 5, 0.78125)!r}")

print("\n# The guesser on three independent 50/50 yes/no columns, enumerated")
def token_match(line, value):
    edge = ",\n:;!?'"
    return any(value in tok and len(tok.strip(edge)) == len(value) for tok in line.split())
def guess_rate(expected):
    hits = 0
    for guess in itertools.product(["yes", "no"], repeat=3):
        line = " " + ", ".join(f"The {c} is {v}" for c, v in zip("abc", guess))
        hits += all(token_match(line, v) for v in expected)
    return hits / 8
print(f"rate(yes, no, yes) = {guess_rate(['yes', 'no', 'yes'])!r}")
print(f"rate(yes, yes, yes) = {guess_rate(['yes', 'yes', 'yes'])!r}")
avg = np.mean([guess_rate(list(e)) for e in itertools.product(["yes", "no"], repeat=3)])
print(f"mean over expected rows = {avg!r}")
print(f"eight 50/50 columns, test 8: 1 - 2 * 0.5**8 averaged = "
      f"{np.mean([1 - (0.5**8 if len(set(e)) == 1 else 2 * 0.5**8) for e in itertools.product([0, 1], repeat=8)])!r}")

print("\n# AUROC permutation p-value (likelihood::roc)")
pos = [0.9, 0.8, 0.75, 0.7, 0.62, 0.55, 0.4, 0.33]
neg = [0.72, 0.6, 0.5, 0.45, 0.35, 0.3, 0.2, 0.1]
u = stats.mannwhitneyu(pos, neg, alternative="greater", method="exact")
print(f"pos = {pos}\nneg = {neg}")
print(f"AUROC = U / (n m) = {u.statistic / (len(pos) * len(neg))!r}")
print(f"mannwhitneyu(pos, neg, alternative='greater', method='exact').pvalue = {u.pvalue!r}")

print("\n# TPR at FPR < 5 % (strict): negatives 0..19, positives 10..29")
neg20 = np.arange(20.0)
pos20 = np.arange(10.0, 30.0)
best = 0.0
for t in sorted(set(neg20) | set(pos20), reverse=True):
    fpr = np.mean(neg20 >= t)
    tpr = np.mean(pos20 >= t)
    if fpr < 0.05:
        best = max(best, tpr)
print(f"max tpr with fpr < 0.05 = {best!r}")

print("\n# Min-K%++ moments with an impossible token (logit -inf), masked")
logits = np.array([math.log(3.0), 0.0, -np.inf])
finite = logits[np.isfinite(logits)]
logp = finite - np.log(np.sum(np.exp(finite)))
p = np.exp(logp)
mu = np.sum(p * logp)
sigma = math.sqrt(np.sum(p * (logp - mu) ** 2))
print(f"mu = {mu!r}, sigma = {sigma!r}")
print(f"log p(token 0) = {logp[0]!r}; (log p - mu) / sigma = {(logp[0] - mu) / sigma!r}")

print("\n# Wilson 95 % intervals (by formula, z = norm.ppf(0.975))")
z = stats.norm.ppf(0.975)
def wilson(p, n):
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return c - h, c + h
print(f"wilson(60/100, 100) = {wilson(0.6, 100)!r}")
print(f"wilson(60/100, 50) (a share of 100 answers from 50 trials x 2 samples) = {wilson(0.6, 50)!r}")
print(f"wilson(60/120, 120) = {wilson(0.5, 120)!r}")
print(f"pooled 10/10 + 50/100 = {60/110!r}; wilson(60/110, 110) = {wilson(60/110, 110)!r}")

print("\n# Benjamini-Hochberg q-values (significance::benjamini_hochberg; issue 26 item 5)")
bh_1995 = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459,
           0.3240, 0.4262, 0.5719, 0.6528, 0.7590, 1.000]
for p in [[0.01, 0.04, 0.03, 0.005], bh_1995, [0.9, 0.8, 0.05, 0.05, 0.0]]:
    print(f"false_discovery_control({p}, method='bh') = "
          f"{stats.false_discovery_control(p, method='bh').tolist()!r}")
