"""Probe of approach (a): contrastive fine-tuning of the embedder with typed hard negatives.

Fine-tunes all-MiniLM-L6-v2 on the train split of data/judge (each pair of a group's
members is a positive; one of the group's typed negatives is its hard negative; the other
pairs of the batch are in-batch negatives; MultipleNegativesRanking loss both ways, word
embeddings frozen), then compares its cosine with the base model's on held-out sets: the
data/judge test split, the labelled fixture files and any public NAME=PATH pair files.
Nothing is exported: shipping a fine-tuned embedder changes every stored vector.

Run with the train-judge virtualenv, e.g.
  ~/.cache/memdedup/train-judge/venv/bin/python xtask/judge/embedder_probe.py \
      --data data/judge --base ~/.cache/memdedup/train-judge/base/model --max-steps 160 \
      --fixture tests/fixtures/labelled/tune.jsonl --fixture tests/fixtures/labelled/holdout.jsonl \
      --fixture tests/fixtures/memories_dev.jsonl --public paws_test=PATH
"""
import argparse
import math
import os
import random
import sys
import time

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibrate as C  # noqa: E402
import pairs as pairdata  # noqa: E402
import train as T  # noqa: E402


def train_embedder(data, base, *, lr=2e-5, batch_size=32, scale=20.0, max_steps=0, max_minutes=0.0,
                   seed=13, threads=2, smoke=False):
    """Fine-tunes the embedder on the train split of `data`; returns (model, tokenizer, steps).

    Each pair of a group's members is a positive; one of the group's typed negatives is its
    hard negative; the other pairs of the batch are in-batch negatives. MultipleNegatives-
    Ranking loss both ways; the word embeddings stay frozen."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModel.from_pretrained(base)
    model.embeddings.word_embeddings.weight.requires_grad_(False)
    groups = [g for g in pairdata.load_groups(data) if pairdata.split_of(g["group"]) == "train"]
    if smoke:
        groups = groups[:80]
    examples = []
    for g in groups:
        members = [m["text"] for m in g["members"]]
        negatives = [n["text"] for n in g["negatives"]]
        for i in range(len(members)):
            for j in range(i + 1, len(members)):
                a, b = (members[i], members[j]) if rng.random() < 0.5 else (members[j], members[i])
                examples.append((a, b, negatives, g["group"]))
    C.log(f"{len(groups)} train groups, {len(examples)} positive pairs")

    def embed(texts):
        enc = tok(texts, truncation=True, max_length=128, padding=True, return_tensors="pt")
        hidden = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1), dim=-1)

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    total = math.ceil(len(examples) / batch_size)
    warmup = max(1, int(0.1 * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1, (s + 1) / warmup) * max(0, (total - s) / max(1, total - warmup)))
    rng.shuffle(examples)
    # Batches without two pairs of one group (they would be each other's false negatives).
    batches, batch, seen = [], [], set()
    for e in examples:
        if e[3] in seen:
            continue
        batch.append(e)
        seen.add(e[3])
        if len(batch) == batch_size:
            batches.append(batch)
            batch, seen = [], set()
    model.train()
    started = time.time()
    steps = 0
    for step, batch in enumerate(batches, 1):
        anchors = embed([e[0] for e in batch])
        others = embed([e[1] for e in batch] + [rng.choice(e[2]) for e in batch if e[2]])
        labels = torch.arange(len(batch))
        loss = torch.nn.functional.cross_entropy(anchors @ others.T * scale, labels)
        loss = loss + torch.nn.functional.cross_entropy(others[:len(batch)] @ anchors.T * scale, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        steps = step
        if step % 25 == 0:
            C.log(f"step {step}/{len(batches)} loss {loss.item():.3f} ({time.time() - started:.0f} s)")
        if max_steps and step >= max_steps:
            break
        if max_minutes and time.time() - started > max_minutes * 60:
            C.log(f"stopping at step {step}: the {max_minutes}-minute budget is spent")
            break
    model.eval()
    return model, tok, steps


class SentenceEmbedding(torch.nn.Module):
    """The encoder with the embedder's mean pooling and L2 norm, for export."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return torch.nn.functional.normalize(pooled, dim=-1)


def export_embedder(model, tok, path):
    """ONNX of the fine-tuned embedder: token ids in, one unit vector per text out (`embedding`)."""
    enc = tok(["a short memory", "another, longer memory text"], padding=True, return_tensors="pt")
    args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
           "token_type_ids": {0: "batch", 1: "seq"}, "embedding": {0: "batch"}}
    torch.onnx.export(SentenceEmbedding(model).eval(), args, path,
                      input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["embedding"],
                      dynamic_axes=dyn, opset_version=17, dynamo=False)


def onnx_embeddings(path, tok, texts, max_len, threads=2):
    """Unit vectors of `texts` from an exported embedder."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    out = np.zeros((len(texts), 384), dtype=np.float32)
    for s in range(0, len(texts), 64):
        enc = tok(texts[s:s + 64], truncation=True, max_length=max_len, padding=True, return_tensors="np")
        out[s:s + 64] = sess.run(["embedding"], {k: enc[k].astype(np.int64) for k in
                                                 ("input_ids", "attention_mask", "token_type_ids")})[0]
    return out


def onnx_cosines(path, tok, pairs_ab, max_len, threads=2):
    texts = sorted({t for ab in pairs_ab for t in ab})
    index = {t: i for i, t in enumerate(texts)}
    v = onnx_embeddings(path, tok, texts, max_len, threads)
    return np.array([float(v[index[a]] @ v[index[b]]) for a, b in pairs_ab])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--fixture", action="append", default=[])
    ap.add_argument("--public", action="append", default=[], help="NAME=PATH")
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--scale", type=float, default=20.0)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: one epoch)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--out", default="", help="save the fine-tuned weights here (optional)")
    args = ap.parse_args()

    model, tok, _ = train_embedder(args.data, args.base, lr=args.lr, batch_size=args.batch_size, scale=args.scale,
                                   max_steps=args.max_steps, seed=args.seed)
    if args.out:
        model.save_pretrained(args.out)
        tok.save_pretrained(args.out)

    tuned = T.Embedder(args.base)
    tuned.model, tuned.tok = model, tok
    base = T.Embedder(args.base)
    all_pairs = pairdata.build_pairs(pairdata.load_groups(args.data), seed=args.seed)
    test = [p for p in all_pairs if p["split"] == "test"]
    sets = [("data/judge test", [(p["a"], p["b"]) for p in test], [p["dup"] for p in test])]
    for path in args.fixture:
        ab, y, _ = C.load_fixture_pairs(path)
        sets.append((os.path.basename(path), ab, y))
    for spec in args.public:
        name, path = spec.split("=", 1)
        ab, y, _ = C.load_public_pairs(path, 3000, args.seed)
        sets.append((name, ab, y))
    print("| set | base cosine AUC | tuned cosine AUC | base best F1 (threshold) | tuned best F1 (threshold) |")
    print("|---|---|---|---|---|")
    for name, ab, y in sets:
        y = np.asarray(y)
        cb, ct = base.cosines(ab), tuned.cosines(ab)
        fb, tb = C.best_cosine(cb, y)
        ft, tt = C.best_cosine(ct, y)
        print(f"| {name} | {C.rounded(C.roc_auc(cb, y))} | {C.rounded(C.roc_auc(ct, y))} | "
              f"{fb:.3f} ({tb}) | {ft:.3f} ({tt}) |", flush=True)


if __name__ == "__main__":
    main()
