"""The second, independent labelling pass over a sample of the judge's pairs.

  python3 review.py sample DATA_DIR N OUT_BLIND OUT_KEY [BATCH [SEED]]
                               # pairs to label, without labels; BATCH (a name of
                               # pairs.BATCHES) samples that later batch alone
  python review.py neighbours DATA_DIR BASE N OUT_BLIND OUT_KEY
                               # the same for mined neighbour pairs (train.py --neighbours;
                               # needs the train-judge virtualenv and the base checkpoint)
  python3 review.py compare OUT_KEY LABELS                # agreement with the first pass
  python3 review.py agreement SECOND_PASS                 # the same, from the merged file

The blind file has {"id", "a", "b"} per line, in random order, each pair in random order;
the key file adds the first pass's relation, kind and group. A reviewer writes LABELS as
{"id", "relation"} lines (relation: duplicate, related, contradiction, unique) without
seeing the key. `compare` prints agreement on duplicate / not duplicate (what the judge
decides), on the four relations, Cohen's kappa, and every disagreement.
"""
import json
import random
import sys

import pairs as pairdata


def sample(data_dir, n, blind_path, key_path, batch=None, seed=29):
    rng = random.Random(seed)
    if batch is None:
        groups = pairdata.load_groups(data_dir)
    elif batch in pairdata.BATCHES:
        groups = pairdata.load_groups(data_dir, batches=(batch,), raw=False)
    else:
        sys.exit(f"review.py sample: batch {batch!r} is not one of {', '.join(pairdata.BATCHES)}")
    if not groups:
        sys.exit(f"review.py sample: no groups in {data_dir} for batch {batch or 'raw'}")
    all_pairs = pairdata.build_pairs(groups)
    by_relation = {}
    for p in all_pairs:
        by_relation.setdefault(p["relation"], []).append(p)
    # Duplicates and contradictions are oversampled relative to their share: they are the
    # labels a wrong merge or a missed one hinges on.
    quota = {"duplicate": 0.4, "contradiction": 0.2, "related": 0.3, "unique": 0.1}
    chosen = []
    for relation, share in quota.items():
        pool = by_relation.get(relation, [])
        chosen += rng.sample(pool, min(len(pool), round(n * share)))
    rng.shuffle(chosen)
    write_sample(chosen, rng, blind_path, key_path)


def sample_neighbours(data_dir, base, n, blind_path, key_path, seed=31):
    """N of the pairs `train.py --neighbours 1` mines, to check that two groups' look-alike
    texts are indeed not duplicates."""
    import torch
    import train
    torch.set_num_threads(1)
    embedder = train.Embedder(base)
    mined = pairdata.mine_neighbours(pairdata.load_groups(data_dir), embedder.embed, 1, 0.30)
    rng = random.Random(seed)
    chosen = rng.sample(mined, min(n, len(mined)))
    write_sample(chosen, rng, blind_path, key_path)


def write_sample(chosen, rng, blind_path, key_path):
    with open(blind_path, "w", encoding="utf-8") as blind, open(key_path, "w", encoding="utf-8") as key:
        for i, p in enumerate(chosen, 1):
            a, b = (p["a"], p["b"]) if rng.random() < 0.5 else (p["b"], p["a"])
            rid = f"r{i:04d}"
            blind.write(json.dumps({"id": rid, "a": a, "b": b}, ensure_ascii=False) + "\n")
            key.write(json.dumps({"id": rid, "a": a, "b": b, "relation": p["relation"], "kind": p["kind"],
                                  "group": p["group"]}, ensure_ascii=False) + "\n")
    print(f"wrote {len(chosen)} pairs to {blind_path} (key: {key_path})")


def kappa(x, y):
    labels = sorted(set(x) | set(y))
    n = len(x)
    po = sum(a == b for a, b in zip(x, y)) / n
    pe = sum((x.count(l) / n) * (y.count(l) / n) for l in labels)
    return (po - pe) / (1 - pe) if pe < 1 else 1.0


def compare(key_path, labels_path):
    key = {r["id"]: r for r in map(json.loads, open(key_path, encoding="utf-8"))}
    second = {r["id"]: r["relation"] for r in map(json.loads, open(labels_path, encoding="utf-8"))}
    report(key, second)


def agreement(merged_path):
    """data/judge/review/second_pass.jsonl: both passes' relations on one line per pair."""
    rows = [json.loads(line) for line in open(merged_path, encoding="utf-8")]
    report({r["id"]: dict(r, relation=r["first"]) for r in rows}, {r["id"]: r["second"] for r in rows})


def report(key, second):
    missing = sorted(set(key) - set(second))
    ids = sorted(set(key) & set(second))
    first_rel = [key[i]["relation"] for i in ids]
    second_rel = [second[i] for i in ids]
    first_dup = [r == "duplicate" for r in first_rel]
    second_dup = [r == "duplicate" for r in second_rel]
    agree_dup = sum(a == b for a, b in zip(first_dup, second_dup))
    agree_rel = sum(a == b for a, b in zip(first_rel, second_rel))
    print(f"{len(ids)} pairs labelled twice ({len(missing)} missing)")
    print(f"duplicate / not: {agree_dup}/{len(ids)} agree ({agree_dup / len(ids):.3f}), "
          f"kappa {kappa(first_dup, second_dup):.3f}")
    print(f"four relations:  {agree_rel}/{len(ids)} agree ({agree_rel / len(ids):.3f}), "
          f"kappa {kappa(first_rel, second_rel):.3f}")
    for i in ids:
        if first_dup[ids.index(i)] != second_dup[ids.index(i)]:
            k = key[i]
            print(json.dumps({"id": i, "first": k["relation"], "kind": k["kind"], "second": second[i],
                              "group": k["group"], "a": k["a"], "b": k["b"]}, ensure_ascii=False))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if sys.argv[1] == "sample":
        sample(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5],
               sys.argv[6] if len(sys.argv) > 6 else None, int(sys.argv[7]) if len(sys.argv) > 7 else 29)
    elif sys.argv[1] == "neighbours":
        sample_neighbours(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6])
    elif sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "agreement":
        agreement(sys.argv[2])
    else:
        sys.exit(__doc__)
