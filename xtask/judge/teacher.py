"""Trains a larger cross-encoder (the teacher) on the train split and writes its relation
logits for pairs a smaller judge can then be fitted to (`train.py --distil FILE`).

    python3 xtask/judge/teacher.py --data data/judge --base CHECKPOINT --embedder MINILM_DIR \
        --out FILE.jsonl.gz [--layers 6] [--pairs 0] [--lr 4e-5] [--max-minutes 45] \
        [--neighbours 2] [--siblings] [--save DIR | --load DIR] [--labelled-from FILE] \
        [--batch NAME]... [--batch-negatives NAME]... [--public-train] [--exclude FILE] [--no-scores] \
        [--pooling mean|cls]

The teacher has capacity_probe.py's head (mean pooling, or the first token's state with
--pooling cls; four relation logits; the word embeddings frozen) and trains one epoch in
batches of similar length. It then scores, in the runtime's canonical order (the smaller
text first):
- every pair of the train split (labelled: the student also has their labels);
- with --neighbours K, unlabelled pairs a vector search would put before the judge: each
  train member with its K nearest texts of the other train groups of its domain (cosine by
  the shipped embedder at or above the candidate floor, no ceiling). Their only label is
  the teacher's.
- with --siblings, also unlabelled: each train negative with every member of its group it
  is not already paired with (pairs.py pairs it with the anchor and one other member). They
  are the hard cases (another number, a narrower rule, an opposite) in every wording of the
  group; written before the neighbours, so that `train.py --distil-unlabelled N` keeps them.
--save DIR keeps the trained teacher (its weights and settings); --load DIR scores with a
kept teacher instead of training one. --labelled-from FILE takes the labelled pairs'
logits from an earlier file of the same teacher instead of scoring them again, after
checking on a fixed sample of them that this teacher gives the same logits.
--batch NAME also trains on a later batch of groups (pairs.BATCHES; DATA.md), --batch-negatives
NAME pairs each negative of that batch's train groups with every member (as train.py's
--NAME-negatives), --public-train adds data/judge/public's pairs and --exclude FILE leaves out
the groups close to an evaluation text (leak_check.py), as train.py does. --no-scores trains
(and keeps, with --save) and reports the ranking, but scores no train pair into FILE.
Calib and test pairs and the labelled memory files are never scored into FILE; the
teacher's own ranking of the test split and of the files' candidates is printed and written
beside FILE (FILE minus .jsonl.gz, plus .json) with the run's settings.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import random
import sys
import time

import numpy as np
import torch
from transformers import AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pairs as pairdata  # noqa: E402
from capacity_probe import POOLINGS, Model, report, score, train_step  # noqa: E402
from cosine_probe import embedder  # noqa: E402
from train import batches_by_length, canonical, optimiser  # noqa: E402
from train import load_teacher as read_teacher_file  # noqa: E402


@torch.no_grad()
def relation_logits(model, tok, ab, max_len, batch=64):
    """The four relation logits of each pair, fed in canonical order, batches of similar length."""
    model.eval()
    canon = [canonical(a, b) for a, b in ab]
    out = np.zeros((len(canon), len(pairdata.RELATIONS)), dtype=np.float32)
    order = sorted(range(len(canon)), key=lambda i: len(canon[i][0]) + len(canon[i][1]))
    start = time.time()
    for n, s in enumerate(range(0, len(order), batch)):
        idx = order[s:s + batch]
        enc = tok([canon[i][0] for i in idx], [canon[i][1] for i in idx], truncation="longest_first",
                  max_length=max_len, padding=True, return_tensors="pt")
        out[idx] = model(enc).numpy()
        if (n + 1) % 100 == 0:
            print(f"scored {s + len(idx)}/{len(canon)} {(time.time() - start) / 60:.1f} min", flush=True)
    return canon, out


def unlabelled_neighbours(groups, embed_texts, per_text, floor, known):
    """Each train member with its `per_text` nearest texts of other train groups of its
    domain (cosine >= floor), minus pairs already labelled (`known`, canonical)."""
    mined = pairdata.mine_neighbours(groups, embed_texts, per_text, floor, ceiling=1.01)
    out, seen = [], set(known)
    for p in mined:
        key = canonical(p["a"], p["b"])
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def sibling_pairs(groups, train, known):
    """Each train negative with every member of its group not already paired with it
    (pairs.every_member_negatives over every group; canonical, minus `known`)."""
    out, seen = [], set(known)
    for p in pairdata.every_member_negatives(groups, train, None):
        key = canonical(p["a"], p["b"])
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


SAME_TEACHER_SAMPLE = 256
SAME_TEACHER_TOLERANCE = 0.02


def reuse_labelled(model, tok, labelled, path, max_len, seed):
    """The labelled pairs' logits from `path`, once a fixed sample of them, scored again by
    this teacher, matches within SAME_TEACHER_TOLERANCE (the file rounds to 0.001)."""
    earlier, _ = read_teacher_file(path)
    missing = [k for k in labelled if k not in earlier]
    if missing:
        sys.exit(f"--labelled-from {path}: {len(missing)} of the {len(labelled)} labelled train pairs are "
                 f"not in it (another data/judge?); score them again without --labelled-from")
    sample = random.Random(seed).sample(labelled, min(SAME_TEACHER_SAMPLE, len(labelled)))
    _, again = relation_logits(model, tok, sample, max_len)
    worst = float(np.max(np.abs(again - np.array([earlier[k] for k in sample], dtype=np.float32))))
    print(f"--labelled-from {path}: {len(sample)} pairs scored again, largest logit difference {worst:.4f}",
          flush=True)
    if worst > SAME_TEACHER_TOLERANCE:
        sys.exit(f"--labelled-from {path}: this teacher's logits differ from the file's by up to {worst:.3f} "
                 f"(more than {SAME_TEACHER_TOLERANCE}): not the same teacher; score them again without it")
    return np.array([earlier[k] for k in labelled], dtype=np.float32), worst


def sha256_dir(path):
    h = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isfile(full) and name.endswith((".safetensors", ".bin", ".json", ".txt")):
            h.update(name.encode())
            with open(full, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def train_teacher(model, tok, fit, rng, args):
    """One epoch over `fit` in batches of similar length, the word embeddings frozen."""
    model.encoder.embeddings.word_embeddings.weight.requires_grad_(False)
    examples = [((p["a"], p["b"]) if rng.random() < 0.5 else (p["b"], p["a"]), pairdata.RELATIONS.index(p["relation"]))
                for p in fit]
    batches = batches_by_length(examples, [len(a) + len(b) for (a, b), _ in examples], args.batch_size, rng)
    opt, sched = optimiser(model, args.lr, len(batches))
    model.train()
    start, steps = time.time(), 0
    for batch in batches:
        items = [examples[i] for i in batch]
        loss = train_step(model, tok, items, args.max_len, opt, sched)
        steps += 1
        if steps % 25 == 0:
            print(f"step {steps}/{len(batches)} loss {loss.item():.3f} {(time.time() - start) / 60:.1f} min", flush=True)
        if args.max_minutes and time.time() - start > args.max_minutes * 60:
            print(f"stopped at the time budget, step {steps}/{len(batches)}", flush=True)
            break
    train_minutes = (time.time() - start) / 60
    seen = min(len(fit), steps * args.batch_size)
    print(f"trained {steps} steps ({seen} pairs) in {train_minutes:.1f} min", flush=True)
    return steps, seen, train_minutes


TEACHER_WEIGHTS = "teacher.pt"
TEACHER_SETTINGS = "teacher.json"
# What a kept teacher must share with the run that loads it.
KEPT_SETTINGS = ("layers", "max_len", "seed", "data_sha256", "pooling")
# What a teacher kept before a setting existed had.
KEPT_DEFAULTS = {"pooling": "mean"}


def data_sha256(data_dir, batches=(), public=False, exclude=None):
    """The sha256 of what the teacher was trained on: data/judge's raw groups, then each later
    batch read, the public pairs and the exclusion list when given (raw alone hashes as it
    always did, so a teacher kept before the later batches still loads)."""
    h = hashlib.sha256()
    folders = ["raw"] + list(batches) + (["public"] if public else [])
    for folder in folders:
        for name in sorted(os.listdir(os.path.join(data_dir, folder))):
            with open(os.path.join(data_dir, folder, name), "rb") as f:
                h.update(((folder + "/") if folder != "raw" else "").encode() + name.encode() + b"\0" + f.read())
    if exclude:
        with open(exclude, "rb") as f:
            h.update(b"exclude\0" + f.read())
    return h.hexdigest()


def kept_settings(args):
    return {"layers": args.layers, "max_len": args.max_len, "seed": args.seed, "pooling": args.pooling,
            "data_sha256": data_sha256(args.data, args.batch, args.public_train, args.exclude),
            "checkpoint_sha256": sha256_dir(args.base)}


def data_settings(args):
    """What the teacher was trained on, beyond raw/ (recorded with the kept teacher and the run)."""
    return {"pooling": args.pooling, "batches": args.batch, "batch_negatives": args.batch_negatives,
            "public_train": args.public_train, "exclude": args.exclude and os.path.basename(args.exclude),
            "sampled_pairs": args.pairs}


def write_json(path, obj):
    """`obj` as indented JSON at `path`, through a temporary file and a rename."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def save_teacher(model, folder, args, steps, seen, train_minutes):
    os.makedirs(folder, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(folder, TEACHER_WEIGHTS + ".tmp"))
    os.replace(os.path.join(folder, TEACHER_WEIGHTS + ".tmp"), os.path.join(folder, TEACHER_WEIGHTS))
    meta = dict(kept_settings(args), **data_settings(args), train_steps=steps, train_pairs=seen,
                train_minutes=round(train_minutes, 1), lr=args.lr, batch_size=args.batch_size)
    write_json(os.path.join(folder, TEACHER_SETTINGS), meta)
    print(f"kept the teacher in {folder}", flush=True)


def read_kept(folder, flag):
    """The settings and weights --save kept in `folder` (`flag` names it in the error)."""
    try:
        with open(os.path.join(folder, TEACHER_SETTINGS), encoding="utf-8") as f:
            meta = json.load(f)
        state = torch.load(os.path.join(folder, TEACHER_WEIGHTS), map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError) as e:
        sys.exit(f"{flag} {folder}: no kept teacher there ({e}); train one with teacher.py --save")
    return meta, state


def load_teacher(model, folder, args):
    """The weights --save kept, once its settings match this run's."""
    meta, state = read_kept(folder, "--load")
    want = kept_settings(args)
    for key in KEPT_SETTINGS + ("checkpoint_sha256",):
        if meta.get(key, KEPT_DEFAULTS.get(key)) != want[key]:
            sys.exit(f"--load {folder}: its {key} is {meta.get(key)!r}, this run's is {want[key]!r}; "
                     "train the teacher again with --save")
    model.load_state_dict(state)
    print(f"loaded the teacher kept in {folder} ({meta['train_steps']} steps)", flush=True)
    return meta["train_steps"], meta["train_pairs"], 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="data/judge")
    ap.add_argument("--base", required=True, help="the teacher's checkpoint (safetensors, tokenizer)")
    ap.add_argument("--embedder", required=True, help="the shipped embedder, for the candidate floor and mining")
    ap.add_argument("--out", required=True, help="FILE.jsonl.gz to write")
    ap.add_argument("--layers", type=int, default=0, help="keep only the first N transformer layers (0: all)")
    ap.add_argument("--pairs", type=int, default=0, help="train on a random sample of this many pairs (0: all)")
    ap.add_argument("--neighbours", type=int, default=2, help="unlabelled neighbours scored per train member")
    ap.add_argument("--lr", type=float, default=4e-5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=96)
    ap.add_argument("--max-minutes", type=float, default=0, help="training time budget (0: none)")
    ap.add_argument("--floor", type=float, default=0.30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--siblings", action="store_true",
                    help="also score each train negative with every member of its group not yet paired with it")
    ap.add_argument("--save", default=None, help="keep the trained teacher in this folder")
    ap.add_argument("--load", default=None, help="score with a teacher kept by --save instead of training one")
    ap.add_argument("--labelled-from", default=None,
                    help="an earlier file of the same teacher: take the labelled pairs' logits from it")
    ap.add_argument("--pooling", choices=POOLINGS, default="mean",
                    help="what the relation layer reads: the mean of the pair's tokens, or the first token's state")
    ap.add_argument("--batch", action="append", default=[], choices=pairdata.BATCHES,
                    help="also train on this later batch of groups (repeatable)")
    ap.add_argument("--batch-negatives", action="append", default=[], choices=pairdata.BATCHES,
                    help="pair each negative of this batch's train groups with every member (repeatable)")
    ap.add_argument("--public-train", action="store_true", help="also train on data/judge/public's pairs")
    ap.add_argument("--exclude", default=None, help="leave out the groups listed in this file (leak_check.py)")
    ap.add_argument("--no-scores", action="store_true",
                    help="score no train pair into FILE (train, keep and report only)")
    ap.add_argument("--smoke", action="store_true", help="a tiny slice, to check the pipeline runs")
    args = ap.parse_args()
    for name in args.batch_negatives:
        if name not in args.batch:
            ap.error(f"--batch-negatives {name}: read the batch with --batch {name}")
    if args.exclude and not os.path.isfile(args.exclude):
        ap.error(f"--exclude {args.exclude}: no such file (write it with xtask/judge/leak_check.py --write)")
    if not args.out.endswith(".jsonl.gz"):
        sys.exit(f"--out {args.out}: the teacher's file must end in .jsonl.gz")
    if args.save and args.load:
        sys.exit("--save and --load: a loaded teacher is already kept; give one of them")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    excluded = pairdata.read_excluded(args.exclude) if args.exclude else frozenset()
    groups = pairdata.load_groups(args.data, batches=args.batch, exclude=excluded)
    if args.smoke:
        groups = groups[:60]
    all_pairs = pairdata.build_pairs(groups, seed=args.seed)
    train = [p for p in all_pairs if p["split"] == "train"]
    if args.public_train:
        train += pairdata.load_public_train(args.data)
    for name in args.batch_negatives:
        train += pairdata.every_member_negatives(groups, train, None, batch=name)
    print(f"{len(groups)} groups, {len(train)} train pairs", flush=True)
    fit = random.Random(args.seed).sample(train, args.pairs) if 0 < args.pairs < len(train) else list(train)
    if args.smoke:
        fit, train = fit[:64], train[:128]
    test = [p for p in all_pairs if p["split"] == "test"]
    test = random.Random(args.seed).sample(test, min(2000, len(test)))

    tok = AutoTokenizer.from_pretrained(args.base)
    model = Model(args.base, args.layers, args.pooling)
    if args.load:
        steps, seen, train_minutes = load_teacher(model, args.load, args)
    else:
        steps, seen, train_minutes = train_teacher(model, tok, fit, rng, args)
    if args.save:
        save_teacher(model, args.save, args, steps, seen, train_minutes)

    results = report(lambda ab: score(model, tok, ab, args.max_len), test, args.embedder, smoke=args.smoke)

    meta_path = args.out[:-len(".jsonl.gz")] + ".json"
    if args.no_scores:
        write_json(meta_path, dict(data_settings(args), train_pairs=seen, train_steps=steps,
                                   train_minutes=round(train_minutes, 1), scored=False, evaluation=results))
        print(f"wrote {meta_path} (--no-scores: no pair scored into {args.out})", flush=True)
        return
    labelled = sorted({canonical(p["a"], p["b"]) for p in train})
    siblings = sibling_pairs(groups, train, labelled) if args.siblings else []
    embed = embedder(args.embedder)
    mined = (unlabelled_neighbours(groups, embed, args.neighbours, args.floor, labelled + siblings)
             if args.neighbours else [])
    if args.smoke:
        siblings, mined = siblings[:32], mined[:32]
    unlabelled = siblings + mined
    t0 = time.time()
    reused = None
    if args.labelled_from:
        labelled_logits, reused = reuse_labelled(model, tok, labelled, args.labelled_from, args.max_len, args.seed)
        print(f"scoring {len(siblings)} unlabelled siblings and {len(mined)} unlabelled neighbours", flush=True)
        canon, logits = relation_logits(model, tok, unlabelled, args.max_len) if unlabelled else ([], None)
        canon = labelled + list(canon)
        logits = labelled_logits if logits is None else np.concatenate([labelled_logits, logits])
    else:
        print(f"scoring {len(labelled)} labelled train pairs, {len(siblings)} unlabelled siblings and "
              f"{len(mined)} unlabelled neighbours", flush=True)
        canon, logits = relation_logits(model, tok, labelled + unlabelled, args.max_len)
    score_minutes = (time.time() - t0) / 60
    tmp = args.out + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    # No name or time in the gzip header: the same run writes the same bytes.
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as gz, \
            io.TextIOWrapper(gz, encoding="utf-8") as f:
        for k, ((a, b), row) in enumerate(zip(canon, logits)):
            f.write(json.dumps({"a": a, "b": b, "logits": [round(float(x), 3) for x in row],
                                "labelled": k < len(labelled)}, ensure_ascii=False) + "\n")
    os.replace(tmp, args.out)
    meta = {"checkpoint": os.path.basename(os.path.normpath(args.base)), "checkpoint_sha256": sha256_dir(args.base),
            "layers": args.layers or None, **data_settings(args), "train_pairs": seen, "train_steps": steps, "lr": args.lr,
            "batch_size": args.batch_size, "max_len": args.max_len, "seed": args.seed,
            "train_minutes": round(train_minutes, 1), "score_minutes": round(score_minutes, 1),
            "labelled_pairs": len(labelled), "unlabelled_pairs": len(unlabelled), "sibling_pairs": len(siblings),
            "neighbour_pairs": len(mined), "neighbours": args.neighbours, "floor": args.floor,
            "labelled_from": (os.path.basename(args.labelled_from) if args.labelled_from else None),
            "labelled_from_max_difference": (round(reused, 4) if reused is not None else None),
            "loaded": bool(args.load), "evaluation": results}
    write_json(meta_path, meta)
    print(f"wrote {args.out} ({len(canon)} pairs) and {meta_path}", flush=True)


if __name__ == "__main__":
    main()
