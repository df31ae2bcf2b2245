"""Exported judges on the held-out test split of the judge's data, by batch and by kind.

    python3 xtask/judge/split_probe.py --data data/judge --base BASE_DIR [--BATCH ...] \
        [--exclude LIST] JUDGE_DIR [JUDGE_DIR ...]      (--BATCH: one flag per name of pairs.BATCHES)

JUDGE_DIR holds a judge.json and its ONNX file (models/pair-judge, or a train.py --out
directory). Each judge scores every test-split pair of the groups read (the first batch,
plus the later batches named) as the runtime does: one pair at a time in canonical order,
its decision probability from its model's duplicate log-odds and the cosine of the shipped
embedder in BASE_DIR, cut at its own duplicate threshold (no review hold, so the numbers
differ a little from train.py's). Printed per batch: P / R / F1 and ROC AUC; per negative
kind: how many of its test pairs are merged. The same pairs for every judge, so judges
trained on different batches are compared on equal ground. Only reads data.
"""
import argparse
import os
import sys

import numpy as np
from transformers import AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibrate as C  # noqa: E402
import pairs as pairdata  # noqa: E402
from cosine_probe import cosines, embedder  # noqa: E402
from tail_probe import onnx_judge  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--base", required=True, help="the shipped embedder and tokenizer")
    for batch in pairdata.BATCHES:
        ap.add_argument(f"--{batch}", action="store_true", help=f"also read DATA/{batch}/ (as train.py --{batch})")
    ap.add_argument("--exclude", default=None, help="leave out the groups listed (as train.py --exclude)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("judges", nargs="+")
    args = ap.parse_args()
    excluded = pairdata.read_excluded(args.exclude) if args.exclude else frozenset()
    groups = pairdata.load_groups(args.data, batches=[b for b in pairdata.BATCHES if getattr(args, b)],
                                  exclude=excluded)
    test = [p for p in pairdata.build_pairs(groups) if p["split"] == "test"]
    if not test:
        sys.exit(f"{args.data}: no test-split pairs in the groups read")
    ab = [(p["a"], p["b"]) for p in test]
    y = np.array([p["dup"] for p in test])
    cos = cosines(embedder(args.base), ab)
    tok = AutoTokenizer.from_pretrained(args.base)
    batch_of = {g["group"]: g["_batch"] for g in groups}
    batches = np.array([batch_of[p["group"]] for p in test])
    kinds = np.array([p["kind"] for p in test])
    sets = {"test": (ab, y, None, cos)}
    for judge in args.judges:
        probs, own = onnx_judge(judge, tok, sets, args.threads)
        p = probs["test"]
        merged = p >= own
        print(f"{judge}: threshold {own}")
        for name in ["all"] + sorted(set(batches)):
            sel = np.ones(len(y), bool) if name == "all" else batches == name
            m = C.prf(merged[sel], y[sel])
            print(f"  {name:9} {int(sel.sum()):5} pairs  P / R / F1 {m['precision']:.3f} / {m['recall']:.3f} / "
                  f"{m['f1']:.3f}  ROC AUC {C.roc_auc(p[sel], y[sel]):.3f}")
        for name in sorted(set(batches)):
            sel = (batches == name) & (y == 0)
            row = [f"{k} {int((merged & sel & (kinds == k)).sum())}/{int((sel & (kinds == k)).sum())}"
                   for k in sorted(set(kinds[sel]))]
            print(f"  {name} negatives merged: {', '.join(row)}")


if __name__ == "__main__":
    main()
