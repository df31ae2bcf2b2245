"""Which texts of a batch of judge data come close to a text the judge is evaluated on.

    python3 xtask/judge/leak_check.py --base BASE_DIR [--cosine 0.85] [--jaccard 0.5] \
        [--public NAME=PATH ...] [--write LIST] BATCH_FILE [BATCH_FILE ...]

BATCH_FILE is a file of groups (data/judge/*/…jsonl). Every text of it is compared with
every text of the labelled memory files (tests/fixtures/labelled/tune.jsonl, holdout.jsonl,
holdout2.jsonl, tests/fixtures/memories_dev.jsonl) and of each public evaluation set
(`{"a", "b"}` per line): by the shared-word ratio (Jaccard of lowercased word sets) and by
the cosine of the shipped embedder in BASE_DIR. A text at or above either bound is
printed with its closest evaluation text, and the groups that hold one are listed at the
end, so that they can be dropped: training data must not restate what the judge is
measured on. `--write LIST` writes them, one `GROUP  closest match` line each, for
`train.py --exclude LIST`. Exits 1 if any group is listed (0 with --write).
"""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capacity_probe import FIXTURES  # noqa: E402
from cosine_probe import ROOT, embedder  # noqa: E402

WORD = re.compile(r"[a-z0-9]+")


def words(text):
    return frozenset(WORD.findall(text.lower()))


def evaluation_texts(publics):
    texts = {}
    for name, rel in FIXTURES:
        with open(os.path.join(ROOT, "tests", "fixtures", rel), encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    texts.setdefault(json.loads(line)["text"], name)
    for name, path in publics:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                if "a" not in row or "b" not in row:
                    sys.exit(f"{path}:{n}: want {{\"a\", \"b\"}} per line")
                texts.setdefault(row["a"], name)
                texts.setdefault(row["b"], name)
    return texts


def batch_texts(paths):
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    g = json.loads(line)
                    for m in g["members"] + g["negatives"]:
                        out.append((g["group"], m["text"]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the shipped embedder (a directory with weights and tokenizer)")
    ap.add_argument("--cosine", type=float, default=0.85)
    ap.add_argument("--jaccard", type=float, default=0.5)
    ap.add_argument("--public", action="append", default=[], help="NAME=PATH of a public evaluation set")
    ap.add_argument("--write", default=None, help="write the flagged groups to this file (for train.py --exclude)")
    ap.add_argument("batch", nargs="+")
    args = ap.parse_args()
    publics = []
    for spec in args.public:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            ap.error(f"--public {spec!r}: want NAME=PATH")
        publics.append((name, path))
    ev = evaluation_texts(publics)
    ev_texts = sorted(ev)
    ev_sizes = np.array([len(words(t)) for t in ev_texts])
    postings = {}
    for i, t in enumerate(ev_texts):
        for w in words(t):
            postings.setdefault(w, []).append(i)
    postings = {w: np.array(ids) for w, ids in postings.items()}
    batch = batch_texts(args.batch)
    embed = embedder(args.base)
    ev_vec = embed(ev_texts)
    vec = embed([t for _, t in batch])
    flagged = {}
    for i, (group, text) in enumerate(batch):
        sims = ev_vec @ vec[i]
        j = int(np.argmax(sims))
        w = words(text)
        shared = [postings[x] for x in w if x in postings]
        inter = np.bincount(np.concatenate(shared), minlength=len(ev_texts)) if shared else np.zeros(len(ev_texts))
        jac = inter / np.maximum(1, len(w) + ev_sizes - inter)
        k = int(np.argmax(jac))
        hits = []
        if sims[j] >= args.cosine:
            hits.append((f"cosine {sims[j]:.2f}", ev_texts[j]))
        if jac[k] >= args.jaccard:
            hits.append((f"words {jac[k]:.2f}", ev_texts[k]))
        for why, other in hits:
            print(f"{group} {why} | {text} || [{ev[other]}] {other}")
            flagged.setdefault(group, []).append(f"{why} [{ev[other]}]")
    print(f"{len(batch)} texts of {len({g for g, _ in batch})} groups against {len(ev_texts)} evaluation texts; "
          f"{len(flagged)} groups flagged: {' '.join(sorted(flagged))}")
    if args.write:
        tmp = args.write + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("# Groups of data/judge close to an evaluation text (xtask/judge/leak_check.py):\n"
                    f"# cosine >= {args.cosine} or shared words >= {args.jaccard}; read by train.py --exclude.\n")
            for group in sorted(flagged):
                best = max(flagged[group], key=lambda w: float(w.split()[1]))
                f.write(f"{group}  {best}\n")
        os.replace(tmp, args.write)
        print(f"wrote {len(flagged)} groups to {args.write}")
        return
    sys.exit(1 if flagged else 0)


if __name__ == "__main__":
    main()
