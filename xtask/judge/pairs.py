"""Builds the labelled pairs of the pair judge from the hand-written groups.

Each line of data/judge/raw/*.jsonl is a group: members that state one claim (the anchor
and its paraphrases) and typed negatives close to it. Pairs:
- every two members: duplicate;
- every negative with the anchor and with one other member (chosen by the seed):
  contradiction (opposite, negation) or related (the other negative kinds);
- the anchor with the anchors of two other groups of the same domain: unique.
A group's split (train / calib / test) comes from the sha256 of its id, so the same group
always lands in the same split and no text crosses splits.

Run as a module of train.py or on its own: `python3 pairs.py DATA_DIR [--BATCH ...]`
prints the counts (one flag per name of BATCHES below).
"""
import glob
import hashlib
import json
import os
import random
import sys

RELATIONS = ["unique", "related", "contradiction", "duplicate"]
CONTRADICTION_KINDS = {"opposite", "negation"}
SPLITS = ("train", "calib", "test")
# The batches written after raw/, in the order they were written (DATA.md): each is a
# folder of data/judge read only when asked for.
BATCHES = ("restated", "nearcopy", "shifts", "polarity", "clauses", "roles")


def split_of(group_id):
    """test: 10 %, calib: 10 %, train: 80 %, by the group id's sha256."""
    bucket = int(hashlib.sha256(group_id.encode("utf-8")).hexdigest()[:8], 16) % 100
    if bucket < 10:
        return "test"
    if bucket < 20:
        return "calib"
    return "train"


def read_excluded(path):
    """The group ids of an exclusion list (leak_check.py --write): the first word of each
    line that is not blank or a # comment."""
    with open(path, encoding="utf-8") as f:
        return {line.split()[0] for line in f if line.strip() and not line.startswith("#")}


def load_groups(data_dir, batches=(), raw=True, exclude=frozenset()):
    """The groups of `raw/*.jsonl` (the first batch, DATA.md) and of each later batch named
    in `batches` (folders of `BATCHES`), read in the order of their file names. `raw=False`
    leaves out the first batch (to sample a later batch alone); groups whose id is in
    `exclude` are left out. Each group's `_batch` is the folder it came from."""
    unknown = set(batches) - set(BATCHES)
    if unknown:
        raise ValueError(f"no batch named {', '.join(sorted(unknown))} (the batches: {', '.join(BATCHES)})")
    groups = []
    folders = (["raw"] if raw else []) + [name for name in BATCHES if name in batches]
    paths = [p for folder in folders for p in glob.glob(os.path.join(data_dir, folder, "*.jsonl"))]
    for path in sorted(paths, key=os.path.basename):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    g = json.loads(line)
                    if g["group"] in exclude:
                        continue
                    g["_source"] = f"{os.path.basename(path)}:{n}"
                    g["_batch"] = os.path.basename(os.path.dirname(path))
                    groups.append(g)
    return groups


def negative_relation(kind):
    """The relation of a negative of `kind` to its group's members."""
    return "contradiction" if kind in CONTRADICTION_KINDS else "related"


def pair(a, b, relation, kind, group, domain, split):
    return {"a": a, "b": b, "relation": relation, "dup": int(relation == "duplicate"),
            "kind": kind, "group": group, "domain": domain, "split": split}


def build_pairs(groups, seed=13):
    """All labelled pairs of `groups`, each with its split."""
    rng = random.Random(seed)
    by_domain_split = {}
    for g in groups:
        by_domain_split.setdefault((g["domain"], split_of(g["group"])), []).append(g)
    out = []
    for g in groups:
        split, gid, domain = split_of(g["group"]), g["group"], g["domain"]
        members = [m["text"] for m in g["members"]]
        for i in range(len(members)):
            for j in range(i + 1, len(members)):
                kind = g["members"][j]["kind"]
                out.append(pair(members[i], members[j], "duplicate", kind, gid, domain, split))
        for neg in g["negatives"]:
            relation = negative_relation(neg["kind"])
            for m in (members[0], rng.choice(members[1:])):
                out.append(pair(m, neg["text"], relation, neg["kind"], gid, domain, split))
        others = [o for o in by_domain_split[(domain, split)] if o["group"] != gid]
        for other in rng.sample(others, min(2, len(others))):
            out.append(pair(members[0], other["members"][0]["text"], "unique", "unrelated", gid, domain, split))
    return out


RESTATED_KINDS = {"periphrasis", "number_form"}
NEARCOPY_KINDS = {"filler", "format", "light_edit"}
SHIFT_KINDS = {"scope_form"}


def every_member_negatives(groups, pairs, kinds=RESTATED_KINDS, batch=None):
    """More train pairs for the groups with a member of one of `kinds` (by default those that
    restate the anchor by description or another number form; `NEARCOPY_KINDS` for the
    near-copies; None for every group): each negative with every member it is not yet paired with. Such a group's
    negatives are written in the same styles, and paired with two members only they are
    outnumbered by its duplicate pairs, so the model learns that another wording (or a small
    edit) may hide another number or thing less than that it may hide the same one. With
    `batch`, only the groups of that folder (load_groups' `_batch`)."""
    have = {(p["a"], p["b"]) for p in pairs}
    out = []
    for g in groups:
        split, gid, domain = split_of(g["group"]), g["group"], g["domain"]
        if split != "train" or (kinds is not None and not any(m["kind"] in kinds for m in g["members"])):
            continue
        if batch is not None and g.get("_batch") != batch:
            continue
        for neg in g["negatives"]:
            relation = negative_relation(neg["kind"])
            for m in g["members"]:
                if (m["text"], neg["text"]) not in have:
                    out.append(pair(m["text"], neg["text"], relation, neg["kind"], gid, domain, split))
    return out


PREFIXES = ["Note: ", "Lesson: ", "Remember: ", "- ", "* ", "FYI ", "TIL: ", "Reminder - "]
CONTRACTIONS = [("do not", "don't"), ("does not", "doesn't"), ("is not", "isn't"), ("are not", "aren't"),
                ("cannot", "can't"), ("will not", "won't"), ("should not", "shouldn't"), ("it is", "it's"),
                ("we are", "we're"), ("they are", "they're"), ("I am", "I'm"), ("was not", "wasn't")]
SHORTHANDS = [(" and ", " & "), (" with ", " w/ "), (" without ", " w/o "), ("for example", "e.g."),
              ("that is,", "i.e.,"), (" versus ", " vs "), (" minutes", " min"), (" seconds", " sec")]


def surface_variant(text, rng):
    """The same statement with its surface changed: case, final stop, a note prefix, a
    contraction or shorthand, dropped articles, a typo. The meaning is untouched (no word
    that carries it is replaced), so the pair is a duplicate whose words overlap a lot,
    which the hand-written negatives (small edits that change the claim) outnumber."""
    out = text
    ops = rng.sample(["case", "stop", "prefix", "contract", "shorthand", "article", "typo", "user"], 2)
    for op in ops:
        if op == "case":
            out = out[:1].lower() + out[1:] if out[:1].isupper() else out[:1].upper() + out[1:]
        elif op == "stop":
            out = out[:-1] if out.endswith(".") else (out + "." if out[-1:].isalnum() else out)
        elif op == "prefix":
            out = rng.choice(PREFIXES) + out[:1].lower() + out[1:] if not out.startswith(("I ", "I'")) else rng.choice(PREFIXES) + out
        elif op == "contract":
            pairs = [(a, b) for a, b in CONTRACTIONS if a in out] + [(b, a) for a, b in CONTRACTIONS if b in out]
            if pairs:
                a, b = rng.choice(pairs)
                out = out.replace(a, b, 1)
        elif op == "shorthand":
            pairs = [(a, b) for a, b in SHORTHANDS if a in out]
            if pairs:
                a, b = rng.choice(pairs)
                out = out.replace(a, b, 1)
        elif op == "article":
            words = out.split(" ")
            idx = [i for i, w in enumerate(words[:-1]) if w.lower() in ("the", "a", "an")]
            if idx:
                i = rng.choice(idx)
                words.pop(i)
                if i == 0 and words:
                    words[0] = words[0][:1].upper() + words[0][1:]
                out = " ".join(words)
        elif op == "typo":
            words = out.split(" ")
            idx = [i for i, w in enumerate(words) if len(w) >= 6 and w.isalpha() and w.islower()]
            if idx:
                i = rng.choice(idx)
                w = words[i]
                k = rng.randrange(1, len(w) - 2)
                words[i] = w[:k] + w[k + 1] + w[k] + w[k + 2:]
                out = " ".join(words)
        elif op == "user":
            for a, b in (("The user's ", "User's "), ("The user ", "User "), ("the user's ", "user's "),
                         ("the user ", "user ")):
                if a in out:
                    out = out.replace(a, b, 1)
                    break
    return out if out != text else None


def augment_train(groups, seed=13):
    """Extra train-split pairs (never calib or test): per group two members with a surface
    variant of themselves (duplicate, kind "surface") and one negative with a surface
    variant of the anchor (its usual relation), so that surface noise alone decides
    nothing."""
    rng = random.Random(seed + 1)
    out = []
    for g in groups:
        split, gid, domain = split_of(g["group"]), g["group"], g["domain"]
        if split != "train":
            continue
        members = [m["text"] for m in g["members"]]
        for m in rng.sample(members, min(2, len(members))):
            v = surface_variant(m, rng)
            if v:
                out.append(pair(m, v, "duplicate", "surface", gid, domain, split))
        if g["negatives"]:
            neg = rng.choice(g["negatives"])
            v = surface_variant(members[0], rng)
            if v:
                relation = negative_relation(neg["kind"])
                out.append(pair(v, neg["text"], relation, neg["kind"], gid, domain, split))
    return out


def mine_neighbours(groups, embed, per_text, floor, ceiling=0.75, related_from=0.5):
    """Extra train-split pairs (never calib or test): each member of a train group with its
    `per_text` most similar texts (base cosine from `floor` up to `ceiling`) among the other
    train groups of its domain (kind "neighbour"): related from a cosine of `related_from`,
    else unique. The hand-written unique pairs join two anchors at random, which a vector
    search would rarely put before the judge; these are the look-alike memories it does.
    Every group is a different topic; above the ceiling, two groups' texts can be one
    claim told shorter ("TF state in S3, locks in DynamoDB."), so such pairs are left out."""
    out = []
    by_domain = {}
    for g in groups:
        if split_of(g["group"]) == "train":
            by_domain.setdefault(g["domain"], []).append(g)
    for domain, gs in sorted(by_domain.items()):
        texts, owner, member_at = [], [], []
        for k, g in enumerate(gs):
            for n, m in enumerate(g["members"] + g["negatives"]):
                if n < len(g["members"]):
                    member_at.append(len(texts))
                texts.append(m["text"])
                owner.append(k)
        vecs = embed(texts)
        for i in member_at:
            k, g = owner[i], gs[owner[i]]
            sims = vecs @ vecs[i]
            taken = 0
            for j in sorted(range(len(texts)), key=lambda j: -sims[j]):
                if taken == per_text or sims[j] < floor:
                    break
                if owner[j] == k or sims[j] > ceiling:
                    continue
                relation = "related" if sims[j] >= related_from else "unique"
                out.append(pair(texts[i], texts[j], relation, "neighbour", g["group"], domain, "train"))
                taken += 1
    return out


def fixture_components(rows):
    """The memories of a labelled file (`tests/fixtures/...`) in connected components: two
    clusters are one component when one names the other as `near` (a hard negative written
    against it), so a rule and its look-alikes always fall on the same side of a split.
    Returns, for each cluster id, its component's key: the smallest cluster id in it."""
    parent = {r["cluster"]: r["cluster"] for r in rows}

    def find(c):
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    for r in rows:
        if r.get("near") in parent:
            a, b = find(r["cluster"]), find(r["near"])
            parent[max(a, b)] = min(a, b)
    return {c: find(c) for c in parent}


def split_fixture(path, out_dir, seed=13):
    """Splits a labelled memories file in two by component (`fixture_components`), half
    and half by the sha256 of the seed and the component's key, and writes the halves as
    `NAME.train.jsonl` and `NAME.calib.jsonl` in `out_dir`. Returns their paths. The train
    half is trained on; the calib half takes the whole file's place in the calibration,
    so no memory is both trained and calibrated on."""
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    rows = [json.loads(line) for line in lines]
    component = fixture_components(rows)
    name = os.path.splitext(os.path.basename(path))[0]
    out = {"train": os.path.join(out_dir, f"{name}.train.jsonl"), "calib": os.path.join(out_dir, f"{name}.calib.jsonl")}
    halves = {"train": [], "calib": []}
    for line, r in zip(lines, rows):
        key = f"{seed}:{component[r['cluster']]}".encode("utf-8")
        half = "train" if int(hashlib.sha256(key).hexdigest()[:8], 16) % 2 == 0 else "calib"
        halves[half].append(line if line.endswith("\n") else line + "\n")
    for half, path_out in out.items():
        with open(path_out + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(halves[half])
        os.replace(path_out + ".tmp", path_out)
    return out["train"], out["calib"]


def fixture_train_pairs(path, embed, neighbours=2, floor=0.30, related_from=0.5):
    """Train pairs from a labelled memories file (the train half `split_fixture` wrote):
    every two memories of one cluster a duplicate; a memory written against a cluster
    (`near`, with its `error` kind) with each of that cluster's memories, a contradiction
    for an opposite and related otherwise; any two memories of different clusters that
    are near the same cluster related (other claims on one topic); and each memory with its
    `neighbours` most similar memories of other components of its namespace (base cosine
    at or above `floor`): related from `related_from`, else unique. These are the real
    memories' own look-alikes, which the hand-written groups only imitate."""
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    component = fixture_components(rows)
    name = os.path.splitext(os.path.basename(path))[0]
    out, seen = [], set()

    def add(i, j, relation, kind):
        key = (min(i, j), max(i, j))
        if i != j and key not in seen:
            seen.add(key)
            a, b = rows[i], rows[j]
            out.append(pair(a["text"], b["text"], relation, kind, f"{name}:{a['cluster']}", "fixture:" + a.get("namespace", ""),
                            "train"))

    by_cluster = {}
    for i, r in enumerate(rows):
        by_cluster.setdefault(r["cluster"], []).append(i)
    for i, r in enumerate(rows):
        for j in by_cluster[r["cluster"]]:
            add(i, j, "duplicate", "fixture")
        if r.get("near") in by_cluster:
            kind = r.get("error", "topic")
            relation = negative_relation(kind)
            for j in by_cluster[r["near"]]:
                add(i, j, relation, kind)
            for j, other in enumerate(rows):
                if other.get("near") == r["near"] and other["cluster"] != r["cluster"]:
                    add(i, j, "related", "topic")
    if neighbours:
        vecs = embed([r["text"] for r in rows])
        for i, r in enumerate(rows):
            sims = vecs @ vecs[i]
            taken = 0
            for j in sorted(range(len(rows)), key=lambda j: -sims[j]):
                if taken == neighbours or sims[j] < floor:
                    break
                if rows[j].get("namespace") != r.get("namespace") or component[rows[j]["cluster"]] == component[r["cluster"]]:
                    continue
                add(i, j, "related" if sims[j] >= related_from else "unique", "neighbour")
                taken += 1
    return out


NLI_RELATIONS = {"contradiction": "contradiction", "neutral": "related"}


def load_public_train(data_dir):
    """Train-split pairs from the public human-labelled sets in DATA_DIR/public/*.jsonl
    (DATA.md gives their sources and licences). A line is a paraphrase pair
    ({"a", "b", "dup"}: duplicate, else related) or an NLI pair ({"a", "b", "label"}):
    a contradiction is a contradiction, a neutral pair related; an entailment is left out,
    since entailing one way (a narrower claim entails the broader) is not saying the same
    thing. These pairs are only ever trained on: no public set is calibrated or tested on
    from here."""
    out = []
    for path in sorted(glob.glob(os.path.join(data_dir, "public", "*.jsonl"))):
        name = os.path.splitext(os.path.basename(path))[0]
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                r = json.loads(line)
                if "dup" in r:
                    relation = "duplicate" if r["dup"] else "related"
                elif r.get("label") in NLI_RELATIONS:
                    relation = NLI_RELATIONS[r["label"]]
                elif r.get("label") == "entailment":
                    continue
                else:
                    raise ValueError(f"{path}:{n}: a public pair needs dup or an NLI label, got {sorted(r)}")
                out.append(pair(r["a"], r["b"], relation, f"public:{name}", f"{name}:{n}", "public", "train"))
    return out


def counts(pairs):
    table = {}
    for p in pairs:
        key = (p["split"], p["relation"])
        table[key] = table.get(key, 0) + 1
    return table


if __name__ == "__main__":
    paths = [a for a in sys.argv[1:] if not a.startswith("--")]
    data_dir = paths[0] if paths else "data/judge"
    groups = load_groups(data_dir, batches=[b for b in BATCHES if f"--{b}" in sys.argv])
    pairs = build_pairs(groups)
    print(f"{len(groups)} groups, {len(pairs)} pairs")
    public = load_public_train(data_dir)
    print(f"{len(public)} public train pairs")
    pairs += public
    for (split, relation), n in sorted(counts(pairs).items()):
        print(f"  {split:5} {relation:13} {n}")
