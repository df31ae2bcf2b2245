"""How well plain cosine ranks the labelled pair sets, for one or more sentence embedders.

    python3 xtask/judge/cosine_probe.py --embedder minilm=BASE_DIR --embedder mpnet=DIR \
        [--public paws=/path/paws_test.jsonl]

For each embedder (a directory with safetensors weights and a tokenizer; mean pooling,
unit length, as memdedup embeds) and each set: ROC AUC of the cosine, the best F1 over
every threshold (chosen in hindsight), and on the labelled memory files how many hard
negatives reach that threshold and the ROC AUC of duplicates against hard negatives
alone. Only reads data; never trains or calibrates anything.
"""
import argparse
import os
import sys

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibrate as C  # noqa: E402
import pairs as pairdata  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def embedder(path, max_len=128, batch=64):
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()

    @torch.no_grad()
    def embed(texts):
        out = []
        for s in range(0, len(texts), batch):
            enc = tok(texts[s:s + batch], padding=True, truncation=True, max_length=max_len, return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1)
            out.append(torch.nn.functional.normalize(mean, dim=-1).numpy())
        return np.concatenate(out)
    return embed


def cosines(embed, ab):
    texts = sorted({t for p in ab for t in p})
    index = {t: i for i, t in enumerate(texts)}
    vectors = embed(texts)
    return np.array([float(vectors[index[a]] @ vectors[index[b]]) for a, b in ab])


def best_f1(score, y):
    order = np.argsort(-score)
    hits = np.cumsum(y[order])
    f1 = 2 * hits / (np.arange(1, len(y) + 1) + y.sum())
    k = int(f1.argmax())
    return float(f1[k]), float(score[order][k])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--embedder", action="append", required=True, help="NAME=DIR")
    ap.add_argument("--public", action="append", default=[], help="NAME=PATH public pairs")
    ap.add_argument("--public-limit", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    fixtures = os.path.join(ROOT, "tests", "fixtures")
    sets = {name: C.load_fixture_pairs(os.path.join(fixtures, "labelled", f"{name}.jsonl"))
            for name in ("tune", "holdout")}
    sets["memories_dev"] = C.load_fixture_pairs(os.path.join(fixtures, "memories_dev.jsonl"))
    test = [p for p in pairdata.build_pairs(pairdata.load_groups(os.path.join(ROOT, "data", "judge")))
            if p["split"] == "test"]
    sets["data/judge test"] = ([(p["a"], p["b"]) for p in test], [p["dup"] for p in test], ["" for _ in test])
    for spec in args.public:
        name, path = spec.split("=", 1)
        sets[name] = C.load_public_pairs(path, args.public_limit, 13)
    for spec in args.embedder:
        label, path = spec.split("=", 1)
        embed = embedder(path)
        for name, (ab, y, kinds) in sets.items():
            y = np.asarray(y)
            if not y.any():
                continue
            cos = cosines(embed, ab)
            f1, at = best_f1(cos, y)
            line = f"{label}\t{name}\tpairs {len(y)}\tROC AUC {C.roc_auc(cos, y):.3f}\tbest F1 {f1:.3f} at {at:.3f}"
            hard = np.array([k == "hard_negative" for k in kinds])
            if hard.any():
                pos = cos[y == 1]
                auc = C.roc_auc(np.r_[pos, cos[hard]], np.r_[np.ones(len(pos)), np.zeros(hard.sum())])
                line += f"\thard negatives at or above {int((cos[hard] >= at).sum())}/{hard.sum()}" \
                        f"\tduplicates vs hard negatives ROC AUC {auc:.3f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
