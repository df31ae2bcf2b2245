"""Which contradictions of a public NLI set each exported judge merges, and whether two
judges' counts differ beyond luck.

    python3 xtask/judge/contradiction_probe.py --base TOKENIZER_DIR --pairs FILE \
        [--kind contradiction] [--show] JUDGE_DIR [JUDGE_DIR ...]

FILE holds `{"a", "b", "kind"}` per line (the AmbiEnt test disambiguations as
data/judge/DATA.md builds them); the pairs of one `kind` are read. JUDGE_DIR holds a
judge.json and its ONNX file (models/pair-judge, or a train.py --out directory). Each
judge's decision probability (its model's duplicate log-odds and the cosine of the shipped
embedder in TOKENIZER_DIR, through its own fitted decision, as tail_probe.py reads it) is
cut at its own duplicate threshold, and a pair at or above it counts as merged.

For each judge after the first, the pairs are compared one by one with the first judge's:
merged by both, by the first alone, by this one alone, and the two-sided exact McNemar p
of the pairs merged by one alone (a binomial test at one half). A count that differs by a
few pairs is luck when the discordant pairs split nearly evenly. `--show` lists every
merged pair with each judge's probability (a star where it merges).
"""
import argparse
import json
import os
import sys
from math import comb

import numpy as np
from transformers import AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cosine_probe import cosines, embedder  # noqa: E402
from tail_probe import onnx_judge  # noqa: E402


def mcnemar_exact(only_a, only_b):
    """The two-sided exact McNemar p for `only_a` and `only_b` discordant pairs."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the shipped embedder and tokenizer")
    ap.add_argument("--pairs", required=True, help='JSONL with "a", "b" and "kind"')
    ap.add_argument("--kind", default="contradiction")
    ap.add_argument("--show", action="store_true", help="list the merged pairs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("judges", nargs="+")
    args = ap.parse_args()

    with open(args.pairs, encoding="utf-8") as f:
        rows = [r for r in map(json.loads, f) if r.get("kind") == args.kind]
    if not rows:
        sys.exit(f"{args.pairs}: no pair of kind {args.kind!r}")
    ab = [(r["a"], r["b"]) for r in rows]
    cos = cosines(embedder(args.base), ab)
    tok = AutoTokenizer.from_pretrained(args.base)
    sets = {"pairs": (ab, np.zeros(len(ab)), np.zeros(len(ab), bool), cos)}
    probs, merged = {}, {}
    for judge in args.judges:
        p, threshold = onnx_judge(judge, tok, sets, args.threads)
        probs[judge], merged[judge] = p["pairs"], p["pairs"] >= threshold
        print(f"{judge}: {int(merged[judge].sum())} of {len(rows)} {args.kind} pairs merged (threshold {threshold:.4f})")
    first = args.judges[0]
    for judge in args.judges[1:]:
        a, b = merged[first], merged[judge]
        only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
        print(f"{judge} against {first}: both {int((a & b).sum())}, {first} alone {only_a}, "
              f"{judge} alone {only_b}; exact McNemar p = {mcnemar_exact(only_a, only_b):.2f}")
    if args.show:
        for i, (a, b) in enumerate(ab):
            if any(merged[j][i] for j in args.judges):
                marks = " ".join(f"{probs[j][i]:.2f}{'*' if merged[j][i] else ' '}" for j in args.judges)
                print(f"{marks} cos {cos[i]:.2f} | {a} || {b}")


if __name__ == "__main__":
    main()
