"""Scores every pair of a folder of groups with an installed pair judge, as memdedup runs it
(one pair per inference, the judge's decision, candidate floor and review contrasts), and
prints P / R / F1, the pairs found or merged by kind, for all pairs and for the test split.

  python xtask/judge/score_groups.py MODEL_DIR DATA_DIR BASE CONTRASTS_BIN

MODEL_DIR holds judge.json (or pair_judge.json) and pair_judge.onnx (models/pair-judge);
DATA_DIR holds raw/*.jsonl (e.g. a folder whose raw/ links to data/judge/nearcopy/*.jsonl);
BASE is the base checkpoint of `cargo xtask train-judge`; CONTRASTS_BIN the xtask binary.
Run it with the train-judge virtualenv's python.
"""
import json
import os
import sys

import numpy as np
from transformers import AutoTokenizer

import calibrate as C
import pairs as pairdata
import train


def main(model_dir, data_dir, base, contrasts_bin):
    settings_path = os.path.join(model_dir, "judge.json")
    if not os.path.exists(settings_path):
        settings_path = os.path.join(model_dir, "pair_judge.json")
    st = json.load(open(settings_path, encoding="utf-8"))
    tok = AutoTokenizer.from_pretrained(base)
    ps = pairdata.build_pairs(pairdata.load_groups(data_dir))
    ab = [(p["a"], p["b"]) for p in ps]
    y = np.array([p["dup"] for p in ps])
    cos = train.Embedder(base).cosines(ab)
    keep = np.where(cos >= st["candidate_floor"])[0]
    logits = train.onnx_logits(os.path.join(model_dir, st["model_file"]), tok, [ab[i] for i in keep], st["max_len"],
                               batch=train.pairs_per_run(st.get("weights", "fp32")))
    w, b = st["decision"]["weights"], st["decision"]["bias"]
    prob = np.zeros(len(ab))
    prob[keep] = 1 / (1 + np.exp(-(b + w[0] * train.dup_log_odds(logits) + w[1] * cos[keep])))
    found = C.contrast_kinds(contrasts_bin, ab)
    held = np.array([any(k in f for k in st.get("review_contrasts", [])) for f in found], dtype=bool)
    read = cos >= st["candidate_floor"]
    dup = (prob >= st["duplicate_threshold"]) & ~held & read
    unsure = (prob >= st["uncertain_threshold"]) & ~dup & read
    kinds = np.array([p["kind"] for p in ps])
    for name, mask in (("all", np.ones(len(ps), bool)), ("test split", np.array([p["split"] == "test" for p in ps]))):
        print(f"{name}: {int(mask.sum())} pairs, {int(y[mask].sum())} duplicates: {C.prf(dup[mask], y[mask])}, "
              f"uncertain {int(unsure[mask].sum())}, ROC AUC {C.rounded(C.roc_auc(prob[mask], y[mask]))}")
        for kind in sorted(set(kinds[mask])):
            m = mask & (kinds == kind)
            what = "found" if y[m].all() else "merged"
            print(f"  {kind:24} {int(dup[m].sum())} of {int(m.sum())} {what}, uncertain {int(unsure[m].sum())}")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
