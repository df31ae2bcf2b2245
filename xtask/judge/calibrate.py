"""The decision of memdedup's pair judge and how it is measured: the logistic over the
model's duplicate log-odds and the cosine, the thresholds and review contrasts chosen on the
calibration data, the number of nearest neighbours read, and the pairwise evaluation of a
labelled set (the fixture files, the public pairs). train.py runs these after it exports
the model; the other scripts of this folder measure with them too.
"""
import json
import random
import subprocess
import time

import numpy as np


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def features(log_odds, cos):
    return np.stack([log_odds, cos], axis=1)


def fit_logistic(x, y, l2=1e-3, iters=500):
    """Logistic regression by Newton's method; returns (weights, bias)."""
    xb = np.concatenate([x, np.ones((len(x), 1))], axis=1)
    w = np.zeros(xb.shape[1])
    for _ in range(iters):
        p = 1 / (1 + np.exp(-xb @ w))
        grad = xb.T @ (p - y) + l2 * np.r_[w[:-1], 0]
        hess = (xb * (p * (1 - p))[:, None]).T @ xb + l2 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return w[:-1], w[-1]


def probability(head, feats):
    w, b = head
    return 1 / (1 + np.exp(-(feats @ w + b)))


# The least recall a precision-led threshold must keep on the calibration data to count as
# reaching its precision: one model reached 0.98 with 22 pairs above P 0.857, a threshold
# that found 1.7 % of the held-out duplicates and none of another file's.
MIN_RECALL = 0.10


def threshold_for_precision(p, y, target, min_recall=MIN_RECALL):
    """The lowest threshold whose precision on (p, y) reaches target with at least 20 pairs
    and `min_recall` of the positives above it; when none does, the threshold of the
    highest precision reached with 20 pairs above it."""
    order = np.argsort(-p)
    tp = np.cumsum(y[order])
    k = np.arange(1, len(p) + 1)
    prec = tp / k
    best, fallback = None, (0.0, 1.0)
    for i in range(len(p)):
        if k[i] >= 20 and (i + 1 == len(p) or p[order[i + 1]] < p[order[i]]):
            if prec[i] >= target and tp[i] >= min_recall * y.sum():
                best = p[order[i]]
            if prec[i] > fallback[0]:
                fallback = (prec[i], p[order[i]])
    if best is None:
        log(f"no threshold reaches precision {target} on the calibration data; the best is "
            f"{fallback[0]:.3f} at {fallback[1]:.4f}")
        return float(fallback[1]), False
    return float(best), True


def roc_auc(score, y):
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(len(score))
    ranks[order] = np.arange(1, len(score) + 1)
    # ties get their mean rank
    s_sorted = score[order]
    i = 0
    while i < len(s_sorted):
        j = i
        while j + 1 < len(s_sorted) and s_sorted[j + 1] == s_sorted[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j + 2) / 2
        i = j + 1
    pos = y.sum()
    neg = len(y) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


def rounded(x, digits=4):
    """x rounded, or None (JSON null) when it is not a number (an AUC of one class)."""
    return None if x != x else round(float(x), digits)


def prf(pred, y):
    tp = int((pred & (y == 1)).sum())
    fp = int((pred & (y == 0)).sum())
    fn = int((~pred & (y == 1)).sum())
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4), "tp": tp, "fp": fp, "fn": fn}


def best_cosine(cos, y):
    best = (0.0, 0.0)
    for t in np.arange(0.30, 0.991, 0.01):
        f = prf(cos >= t, y)["f1"]
        if f > best[0]:
            best = (f, round(float(t), 2))
    return best


def evaluate(name, pairs_ab, y, kinds, cos, prob, settings, held=None, rank=None):
    """Metrics of the judge and of cosine on one evaluation set; `held` marks the pairs a
    review contrast holds for review; `rank` (fixture files: see `neighbour_ranks`) leaves
    out the pairs the judge does not read, neither memory being among the other's
    `candidates` nearest."""
    y = np.asarray(y)
    read = cos >= settings["candidate_floor"]
    if rank is not None:
        read &= rank <= settings["candidates"]
    reaches = (prob >= settings["duplicate_threshold"]) & read
    dup = reaches & ~held if held is not None else reaches
    unsure = (prob >= settings["uncertain_threshold"]) & ~dup & read
    res = {"set": name, "pairs": int(len(y)), "positives": int(y.sum()),
           "judge": prf(dup, y), "judge_without_review_contrasts": prf(reaches, y),
           "judge_auc": rounded(roc_auc(prob, y)),
           "cosine_auc": rounded(roc_auc(cos, y)), "uncertain": int(unsure.sum())}
    f, t = best_cosine(cos, y)
    res["best_cosine"] = {"f1": round(f, 4), "threshold": t}
    cand = cos >= settings["candidate_floor"]
    best_judge = max((prf((prob >= q) & cand, y)["f1"], round(float(q), 3)) for q in np.arange(0.05, 1.0, 0.025))
    res["judge_best_in_hindsight"] = {"f1": best_judge[0], "threshold": best_judge[1]}
    res["cosine_0_85"] = prf(cos >= 0.85, y)
    if kinds is not None:
        by_kind = {}
        for k, d, yy in zip(kinds, dup, y):
            if yy == 0 and k:
                n, m = by_kind.get(k, (0, 0))
                by_kind[k] = (n + 1, m + int(d))
        res["negatives_merged"] = {k: f"{m}/{n}" for k, (n, m) in sorted(by_kind.items())}
    return res


def load_fixture_pairs(path):
    """Every pair of memories of one namespace; positive when they share a cluster."""
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    out, y, kinds = [], [], []
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            a, b = rows[i], rows[j]
            if a.get("namespace") != b.get("namespace"):
                continue
            same = a["cluster"] == b["cluster"]
            near = (a.get("near") == b["cluster"]) or (b.get("near") == a["cluster"])
            out.append((a["text"], b["text"]))
            y.append(int(same))
            kinds.append("hard_negative" if near and not same else ("other" if not same else ""))
    return out, y, kinds


def neighbour_ranks(path, cos):
    """For the first len(cos) pairs of a fixture file, in `load_fixture_pairs` order: how
    near the nearer of the two memories puts the other among its neighbours of that
    namespace by cosine (1: the nearest; ties by position), as a check or a scan of the
    file would find it."""
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    index = [(i, j) for i in range(len(rows)) for j in range(i + 1, len(rows))
             if rows[i].get("namespace") == rows[j].get("namespace")][:len(cos)]
    near = {}
    for t, (i, j) in enumerate(index):
        near.setdefault(i, []).append((-cos[t], j, t))
        near.setdefault(j, []).append((-cos[t], i, t))
    rank = np.full(len(index), len(rows) + 1)
    for lst in near.values():
        lst.sort()
        for r, (_, _, t) in enumerate(lst, start=1):
            rank[t] = min(rank[t], r)
    return rank


# The numbers of nearest neighbours `choose_candidates` tries.
CANDIDATE_CHOICES = (1, 2, 3, 4, 5, 6, 8, 12, 16)
DEFAULT_CANDIDATES = 8


def choose_candidates(fixtures, threshold, floor):
    """How many nearest neighbours a check or a scan judges: the number, among
    CANDIDATE_CHOICES, whose merges on the calibration fixtures (each a tuple of P, labels,
    the review hold, cosine and `neighbour_ranks`) have the best F0.5, the smallest on a
    tie; DEFAULT_CANDIDATES without fixtures. Returns it and the table measured."""
    if not fixtures:
        return DEFAULT_CANDIDATES, {}
    table, best = {}, None
    for k in CANDIDATE_CHOICES:
        tp = fp = pos = 0
        for prob, y, held, cos, rank in fixtures:
            merged = (prob >= threshold) & ~held & (cos >= floor) & (rank <= k)
            tp += int((merged & (y == 1)).sum()); fp += int((merged & (y == 0)).sum()); pos += int(y.sum())
        p = tp / (tp + fp) if tp + fp else 0.0
        r = tp / pos if pos else 0.0
        f_half = 1.25 * p * r / (0.25 * p + r) if p + r else 0.0
        table[str(k)] = {"precision": round(p, 4), "recall": round(r, 4), "f0_5": round(f_half, 4)}
        if best is None or f_half > best[1] + 1e-9:
            best = (k, f_half)
    return best[0], table


def load_public_pairs(path, limit, seed):
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    if len(rows) > limit:
        rows = random.Random(seed).sample(rows, limit)
    return [(r["a"], r["b"]) for r in rows], [int(r["dup"]) for r in rows], [r.get("kind", r.get("label", "")) for r in rows]


def f_beta_threshold(p, y, beta):
    """The threshold on p that maximises F-beta on (p, y), and that F-beta."""
    order = np.argsort(-p, kind="mergesort")
    tp = np.cumsum(y[order])
    k = np.arange(1, len(p) + 1)
    prec, rec = tp / k, tp / max(1, y.sum())
    b2 = beta * beta
    f = np.where(prec + rec > 0, (1 + b2) * prec * rec / np.maximum(b2 * prec + rec, 1e-12), 0)
    # Only cut between distinct values.
    valid = np.r_[p[order][1:] < p[order][:-1], True]
    i = int(np.argmax(np.where(valid, f, -1)))
    return float(p[order][i]), float(f[i])


def choose_thresholds(p, y, precision):
    """The duplicate threshold, the start of the uncertain band, and how they were chosen.

    The duplicate threshold is the lowest reaching `precision` on the calibration data (and
    keeping MIN_RECALL of its duplicates). When no threshold does, it maximises F0.5 (it favours precision) and the rule says so. The
    uncertain band starts where F1 peaks, so what the judge is unsure of is reviewed, not
    merged."""
    threshold, reached = threshold_for_precision(p, y, precision)
    rule = f"precision {precision} on the calibration data"
    if not reached:
        threshold, f_half = f_beta_threshold(p, y, 0.5)
        rule = (f"precision {precision} is out of reach on the calibration data (with {MIN_RECALL:.0%} of "
                f"its duplicates above the threshold); "
                f"the threshold maximises F0.5 ({f_half:.3f})")
    uncertain, f_one = f_beta_threshold(p, y, 1.0)
    return round(threshold, 4), round(min(uncertain, threshold), 4), rule, f_one


# The contrasts that reverse a claim: the candidates for holding a duplicate for review.
REVERSAL_CONTRASTS = ("opposite_words", "negation_flip")


def contrast_kinds(contrasts_bin, pairs_ab):
    """The text contrasts of each pair, as memdedup finds them (xtask's pair-contrasts
    command runs dedup_core::contrast): a list of sets of kinds."""
    if not pairs_ab:
        return []
    lines = "".join(json.dumps({"a": a, "b": b}) + "\n" for a, b in pairs_ab)
    out = subprocess.run([contrasts_bin, "pair-contrasts"], input=lines, capture_output=True, text=True, check=True)
    kinds = [set(json.loads(line)) for line in out.stdout.splitlines()]
    assert len(kinds) == len(pairs_ab), f"pair-contrasts answered {len(kinds)} lines for {len(pairs_ab)} pairs"
    return kinds


SAME_WORDING = "same_wording"


def same_wording(kinds):
    """Which pairs the judge takes as duplicates without the model (pair-contrasts marks
    them: the same text after normalisation, or the same wording), as a bool array."""
    return np.array([SAME_WORDING in k for k in kinds], dtype=bool)


def choose_review_contrasts(p, y, kinds, threshold, min_flagged=10, margin=0.1):
    """The reversal contrasts that hold a duplicate for review: those whose pairs at or
    above the threshold are, on the calibration data, duplicates clearly less often (by
    `margin`) than all pairs there. Returns the kinds and what was measured."""
    above = p >= threshold
    overall = float(y[above].mean()) if above.any() else 0.0
    chosen, measured = [], {"all": {"pairs": int(above.sum()), "precision": round(overall, 4)}}
    for kind in REVERSAL_CONTRASTS:
        flagged = above & np.array([kind in k for k in kinds])
        precision = float(y[flagged].mean()) if flagged.any() else None
        measured[kind] = {"pairs": int(flagged.sum()), "precision": None if precision is None else round(precision, 4)}
        if flagged.sum() >= min_flagged and precision <= overall - margin:
            chosen.append(kind)
    return chosen, measured
