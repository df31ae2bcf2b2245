"""How an exported judge does where the targets are: with few hard negatives merged.

    python3 xtask/judge/tail_probe.py --base TOKENIZER_DIR JUDGE_DIR [JUDGE_DIR ...] [--list N]

JUDGE_DIR holds a judge.json and its ONNX file (models/pair-judge, or a train.py --out
directory). Over the candidate pairs (cosine >= 0.30 by the shipped embedder in
TOKENIZER_DIR) of the labelled memory files (tune, holdout, holdout2, memories_dev), each
judge's decision probability (its model's duplicate log-odds and cosine, through its own
fitted decision; no nearest-k limit and no review hold, so the counts differ a little from
train.py's evaluation) is cut at two thresholds:

- its own duplicate threshold;
- the threshold that merges at most CAP (2 %) of tune.jsonl's hard negatives: tune.jsonl
  is calibration data, so this is a threshold a calibration rule could choose, and
  holdout.jsonl and memories_dev.jsonl show what it does on data it never saw.

`--list N` prints the N highest-scored negatives of tune.jsonl (calibration data only).

`--equal-hard N[,N...]` compares rankings apart from where each judge puts its threshold:
on each held-out file, the share of duplicates a judge finds at the threshold where it
merges N hard-negative pairs (chosen on that file, so a reading of the ranking, not a
setting anyone could use).

`--bootstrap N` tells a difference from the luck of the sample: for each judge after the
first, N resamples (with replacement, seed 13) of each file's candidate pairs give the
5th to 95th percentile of its F1 minus the first judge's, both at their own thresholds,
how often it comes out ahead, and the same interval for the hard negatives it merges
more. Pairs share memories, so resampling pairs understates the spread: read an interval
that includes zero as no difference.

`--teacher DIR --teacher-base CHECKPOINT` also reads a teacher kept by `teacher.py --save`
(CHECKPOINT its base, e.g. all-mpnet-base-v2) the same way, with a decision like train.py's
fitted on tune.jsonl (its duplicate log-odds and cosine, logistic; its own threshold the
best F0.5 there): how far the judges it teaches are from it where the targets are.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
from transformers import AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibrate as C  # noqa: E402
from capacity_probe import FIXTURES, Model, fixture_candidates  # noqa: E402
from cosine_probe import embedder  # noqa: E402
from teacher import read_kept, relation_logits  # noqa: E402
from train import dup_log_odds, onnx_logits  # noqa: E402


def teacher_judge(folder, base, sets, threads):
    """A kept teacher's decision probabilities over `sets`, and its own threshold."""
    meta, state = read_kept(folder, "--teacher")
    torch.set_num_threads(threads)
    model = Model(base, meta["layers"], meta.get("pooling", "mean"))
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        sys.exit(f"--teacher {folder}: its weights do not fit --teacher-base {base} ({e})")
    tok = AutoTokenizer.from_pretrained(base)
    feats = {}
    for name, (ab, _, _, cos) in sets.items():
        _, logits = relation_logits(model, tok, ab, meta["max_len"])
        feats[name] = C.features(dup_log_odds(logits), cos)
    head = C.fit_logistic(feats["tune"], sets["tune"][1].astype(float))
    probs = {name: C.probability(head, x) for name, x in feats.items()}
    own, _ = C.f_beta_threshold(probs["tune"], sets["tune"][1], 0.5)
    return probs, round(own, 4)


def onnx_judge(judge_dir, tok, sets, threads):
    """An exported judge's decision probabilities over `sets`, and its own threshold."""
    with open(os.path.join(judge_dir, "judge.json")) as f:
        judge = json.load(f)
    head = np.array(judge["decision"]["weights"]), judge["decision"]["bias"]
    model = os.path.join(judge_dir, judge["model_file"])
    probs = {}
    for name, (ab, _, _, cos) in sets.items():
        lo = dup_log_odds(onnx_logits(model, tok, ab, judge["max_len"], threads, 1))
        probs[name] = C.probability(head, C.features(lo, cos))
    return probs, judge["duplicate_threshold"]


SHORT = {"tune.jsonl": "tune", "holdout.jsonl": "holdout", "memories_dev.jsonl": "dev", "holdout2.jsonl": "holdout2"}


def cut(p, y, hard, threshold):
    merged = p >= threshold
    m = C.prf(merged, y)
    return (f"{m['precision']:.3f} / {m['recall']:.3f} / {m['f1']:.3f}, "
            f"{int((merged & hard).sum())} of {int(hard.sum())} hard")


def bootstrap(reference, other, sets, n, seed=13):
    """Lines comparing two judges' F1 at their own thresholds over `n` paired resamples."""
    rng = np.random.default_rng(seed)
    lines = []
    for name, (_, y, hard, _) in sets.items():
        a, b = reference[name], other[name]
        idx = rng.integers(0, len(y), size=(n, len(y)))
        ya, ha, pa, pb = y[idx] == 1, hard[idx], a[idx], b[idx]

        def f1(pred):
            tp = (pred & ya).sum(axis=1)
            return 2 * tp / np.maximum(pred.sum(axis=1) + ya.sum(axis=1), 1)

        diff = f1(pb) - f1(pa)
        lo, hi = np.percentile(diff, [5, 95])
        more = (pb & ha).sum(axis=1) - (pa & ha).sum(axis=1)
        m_lo, m_hi = np.percentile(more, [5, 95])
        lines.append(f"  {name:8} F1 difference {diff.mean():+.3f} (90 % of resamples {lo:+.3f} to {hi:+.3f}), "
                     f"ahead in {np.mean(diff > 0):.0%}; hard negatives merged {more.mean():+.1f} "
                     f"({m_lo:+.0f} to {m_hi:+.0f})")
    return lines


def hard_cut(p, hard, n):
    """The lowest threshold at which `p` merges at most `n` hard-negative pairs (None when
    there are no more than `n`)."""
    scores = np.sort(p[hard])[::-1]
    return None if n >= len(scores) else float(scores[n]) + 1e-6


def recall_at_hard(p, y, hard, n):
    """The share of duplicates at or above `hard_cut(p, hard, n)`."""
    t = hard_cut(p, hard, n)
    return float("nan") if t is None else float(((p >= t) & (y == 1)).sum() / max(1, y.sum()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the shipped embedder and tokenizer")
    ap.add_argument("judges", nargs="+", help="directories with judge.json and the ONNX file")
    ap.add_argument("--cap", type=float, default=0.02, help="share of tune.jsonl's hard negatives merged")
    ap.add_argument("--floor", type=float, default=0.30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--list", type=int, default=0, help="print the N highest-scored negatives of tune.jsonl")
    ap.add_argument("--bootstrap", type=int, default=0,
                    help="compare each judge with the first over N paired resamples of the pairs")
    ap.add_argument("--equal-hard", default="", help="N[,N...]: recall where each judge merges N hard-negative pairs")
    ap.add_argument("--teacher", default=None, help="a teacher kept by teacher.py --save")
    ap.add_argument("--teacher-base", default=None, help="the teacher's checkpoint (its tokenizer and shape)")
    args = ap.parse_args()
    if bool(args.teacher) != bool(args.teacher_base):
        ap.error("--teacher and --teacher-base go together: the kept weights and the checkpoint they came from")
    tok = AutoTokenizer.from_pretrained(args.base)
    embed = embedder(args.base)
    sets = {SHORT[name]: fixture_candidates(embed, path, args.floor) for name, path in FIXTURES}
    judges = [(d, lambda d=d: onnx_judge(d, tok, sets, args.threads)) for d in args.judges]
    if args.teacher:
        judges.append((f"teacher {args.teacher}",
                       lambda: teacher_judge(args.teacher, args.teacher_base, sets, args.threads)))
    if args.bootstrap < 0:
        ap.error(f"--bootstrap takes a number of resamples, not {args.bootstrap}")
    try:
        equal_hard = [int(n) for n in args.equal_hard.split(",") if n.strip()]
    except ValueError:
        ap.error(f"--equal-hard takes counts separated by commas, not {args.equal_hard!r}")
    if any(n < 0 for n in equal_hard):
        ap.error(f"--equal-hard takes counts of 0 or more, not {args.equal_hard!r}")
    merged = []
    for label, run in judges:
        probs, own = run()
        merged.append((label, {name: probs[name] >= own for name in sets}))
        _, y, hard, _ = sets["tune"]
        capped = hard_cut(probs["tune"], hard, int(args.cap * hard.sum()))
        print(f"{label}: own threshold {own}; "
              f"{args.cap:.0%} of tune's hard negatives: {capped:.4f} (P / R / F1, hard negatives merged)")
        for name, (_, y, hard, _) in sets.items():
            print(f"  {name:8} own {cut(probs[name], y, hard, own)} | "
                  f"capped {cut(probs[name], y, hard, capped)}")
            if equal_hard and name != "tune":
                print("           recall at " + ", ".join(
                    f"{n} hard merged {recall_at_hard(probs[name], y, hard, n):.3f}" for n in equal_hard))
        ab, y, hard, cos = sets["tune"]
        for i in [i for i in np.argsort(-probs["tune"]) if not y[i]][:args.list]:
            kind = "hard" if hard[i] else "other"
            print(f"    {probs['tune'][i]:.3f} {kind:5} cos {cos[i]:.2f} | {ab[i][0]} || {ab[i][1]}")
    if args.bootstrap:
        first, reference = merged[0]
        for label, other in merged[1:]:
            print(f"{label} against {first}, {args.bootstrap} resamples:")
            print("\n".join(bootstrap(reference, other, sets, args.bootstrap)))


if __name__ == "__main__":
    main()
