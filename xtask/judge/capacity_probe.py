"""Does a larger checkpoint read pairs better? Trains a cross-encoder from CHECKPOINT on one
fixed random sample of the train split and measures how it ranks held-out pairs, so that two
checkpoints can be compared on equal data and steps (no export, no calibration, nothing
shipped).

    python3 xtask/judge/capacity_probe.py --base CHECKPOINT --embedder MINILM_DIR \
        [--pairs 8000] [--lr 8e-5] [--layers N] [--max-minutes 50]
    python3 xtask/judge/capacity_probe.py --base TOKENIZER_DIR --embedder MINILM_DIR --onnx FILE

Same head as train.py (mean pooling, four relation logits; the word embeddings frozen),
one epoch, AdamW with linear warm-up and decay. Reported: ROC AUC of the duplicate
log-odds on 2,000 pairs of the data/judge test split, and on the candidate pairs (cosine
>= 0.30 by MINILM_DIR, the embedder memdedup ships) of the labelled memory files: every
candidate pair, and duplicates against hard negatives alone; best F1 in hindsight over the
candidates.
"""
import argparse
import math
import os
import random
import sys
import time

import numpy as np
import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibrate as C  # noqa: E402
import pairs as pairdata  # noqa: E402
from cosine_probe import best_f1, cosines, embedder  # noqa: E402
from train import dup_log_odds, onnx_logits, optimiser  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


POOLINGS = ("mean", "cls")


class Model(nn.Module):
    def __init__(self, base, layers=0, pooling="mean"):
        """`pooling`: what the relation layer reads, the mean over the pair's tokens ("mean")
        or the first token's state ("cls")."""
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r}: want one of {', '.join(POOLINGS)}")
        self.pooling = pooling
        self.encoder = AutoModel.from_pretrained(base)
        if layers:
            # Only the first `layers` transformer layers: less arithmetic per pair.
            self.encoder.encoder.layer = nn.ModuleList(self.encoder.encoder.layer[:layers])
            self.encoder.config.num_hidden_layers = layers
        self.head = nn.Linear(self.encoder.config.hidden_size, len(pairdata.RELATIONS))
        self.dropout = nn.Dropout(0.1)

    def forward(self, enc):
        hidden = self.encoder(**enc).last_hidden_state
        if self.pooling == "cls":
            return self.head(self.dropout(hidden[:, 0]))
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return self.head(self.dropout((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)))


def train_step(model, tok, items, max_len, opt, sched):
    """One optimiser step on `items` (((a, b), relation index), ...); returns the loss."""
    enc = tok([a for (a, _), _ in items], [b for (_, b), _ in items], truncation="longest_first",
              max_length=max_len, padding=True, return_tensors="pt")
    loss = nn.functional.cross_entropy(model(enc), torch.tensor([y for _, y in items]))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad()
    return loss


@torch.no_grad()
def score(model, tok, ab, max_len, batch=64):
    model.eval()
    out = np.zeros(len(ab))
    order = sorted(range(len(ab)), key=lambda i: len(ab[i][0]) + len(ab[i][1]))
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        pairs = [tuple(sorted(ab[i])) for i in idx]  # the runtime's canonical order
        enc = tok([a for a, _ in pairs], [b for _, b in pairs], truncation="longest_first",
                  max_length=max_len, padding=True, return_tensors="pt")
        out[idx] = dup_log_odds(model(enc).numpy())
    return out


FIXTURES = [("tune.jsonl", "labelled/tune.jsonl"), ("holdout.jsonl", "labelled/holdout.jsonl"),
            ("memories_dev.jsonl", "memories_dev.jsonl"), ("holdout2.jsonl", "labelled/holdout2.jsonl")]


def fixture_candidates(embed, path, floor=0.30, limit=None):
    """The candidate pairs (cosine >= `floor` by `embed`) of a labelled memory file: the
    pairs, their labels, which are hard negatives, and their cosines."""
    ab, y, kinds = C.load_fixture_pairs(os.path.join(ROOT, "tests", "fixtures", path))
    ab, y, kinds = ab[:limit], y[:limit], kinds[:limit]
    cos = cosines(embed, ab)
    keep = np.where(cos >= floor)[0]
    return [ab[i] for i in keep], np.asarray(y)[keep], np.asarray(kinds)[keep] == "hard_negative", cos[keep]


def report(scorer, test, embedder_dir, smoke=False):
    """Prints and returns how `scorer` (pairs -> duplicate log-odds) ranks the `test` pairs
    and the candidate pairs (cosine >= 0.30 by `embedder_dir`) of the labelled memory files."""
    s = scorer([(p["a"], p["b"]) for p in test])
    out = {"test_pairs": len(test), "test_roc_auc": round(C.roc_auc(s, np.array([p["dup"] for p in test])), 4)}
    print(f"data/judge test ({len(test)})\tROC AUC {out['test_roc_auc']:.3f}", flush=True)
    embed = embedder(embedder_dir)
    for name, path in FIXTURES:
        ab, y, hard, _ = fixture_candidates(embed, path, limit=300 if smoke else None)
        s = scorer(ab)
        pos_hard = np.r_[s[y == 1], s[hard]]
        auc_hard = C.roc_auc(pos_hard, np.r_[np.ones((y == 1).sum()), np.zeros(hard.sum())])
        f1, _ = best_f1(s, y)
        out[name] = {"candidates": len(ab), "roc_auc": round(C.roc_auc(s, y), 4),
                     "duplicates_vs_hard_negatives": round(auc_hard, 4), "best_f1_in_hindsight": round(f1, 4)}
        print(f"{name}\tcandidates {len(ab)}\tROC AUC {C.roc_auc(s, y):.3f}\tduplicates vs hard negatives "
              f"{auc_hard:.3f}\tbest F1 in hindsight {f1:.3f}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--embedder", required=True, help="the shipped embedder, for the candidate floor")
    ap.add_argument("--pairs", type=int, default=8000)
    ap.add_argument("--layers", type=int, default=0, help="keep only the first N transformer layers (0: all)")
    ap.add_argument("--lr", type=float, default=8e-5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=96)
    ap.add_argument("--max-minutes", type=float, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--onnx", default=None,
                    help="measure this exported judge (e.g. models/pair-judge/pair_judge.onnx, read one pair per run "
                         "as memdedup reads its dynamic int8 form) with --base's tokenizer instead of training")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    all_pairs = pairdata.build_pairs(pairdata.load_groups(os.path.join(ROOT, "data", "judge")), seed=args.seed)
    train = [p for p in all_pairs if p["split"] == "train"]
    train = random.Random(args.seed).sample(train, min(args.pairs, len(train)))
    test = random.Random(args.seed).sample([p for p in all_pairs if p["split"] == "test"], 2000)

    tok = AutoTokenizer.from_pretrained(args.base)
    if args.onnx:
        report(lambda ab: dup_log_odds(onnx_logits(args.onnx, tok, ab, args.max_len, args.threads, batch=1)), test,
               args.embedder)
        return
    model = Model(args.base, args.layers)
    model.encoder.embeddings.word_embeddings.weight.requires_grad_(False)
    examples = [((p["a"], p["b"]) if rng.random() < 0.5 else (p["b"], p["a"]), pairdata.RELATIONS.index(p["relation"]))
                for p in train]
    rng.shuffle(examples)
    total = math.ceil(len(examples) / args.batch_size)
    opt, sched = optimiser(model, args.lr, total)
    model.train()
    start = time.time()
    for step in range(total):
        items = examples[step * args.batch_size:(step + 1) * args.batch_size]
        loss = train_step(model, tok, items, args.max_len, opt, sched)
        if (step + 1) % 25 == 0:
            print(f"step {step + 1}/{total} loss {loss.item():.3f} {(time.time() - start) / 60:.1f} min", flush=True)
        if args.max_minutes and time.time() - start > args.max_minutes * 60:
            print(f"stopped at the time budget, step {step + 1}/{total}", flush=True)
            break
    print(f"trained {len(train)} pairs in {(time.time() - start) / 60:.1f} min", flush=True)

    report(lambda ab: score(model, tok, ab, args.max_len), test, args.embedder)


if __name__ == "__main__":
    main()
