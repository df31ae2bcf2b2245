"""Times exported forms of the pair judge on memory-like pairs, one pair at a time and in
batches of 16: 256 random pairs of texts of tests/fixtures/labelled/holdout.jsonl, fed in
canonical order and by length, tokenising included, ONNX Runtime on 2 threads.

    python3 xtask/judge/time_forms.py TOKENIZER_DIR MODEL.onnx [MODEL.onnx ...]

Run it with the train-judge virtualenv's python (it has onnxruntime and transformers).
"""
import json
import os
import random
import sys
import time

import numpy as np
import onnxruntime as ort
from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    tok = AutoTokenizer.from_pretrained(sys.argv[1])
    with open(os.path.join(ROOT, "tests/fixtures/labelled/holdout.jsonl"), encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    rng = random.Random(1)
    pairs = [(rng.choice(texts), rng.choice(texts)) for _ in range(256)]
    pairs = [(a, b) if a <= b else (b, a) for a, b in pairs]
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    for path in sys.argv[2:]:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        for batch in (1, 16):
            started = time.time()
            for k in range(0, len(order), batch):
                idx = order[k:k + batch]
                enc = tok([pairs[i][0] for i in idx], [pairs[i][1] for i in idx], truncation="longest_first",
                          max_length=96, padding=True, return_tensors="np")
                sess.run(["logits"], {x: enc[x].astype(np.int64) for x in ("input_ids", "attention_mask", "token_type_ids")})
            ms = (time.time() - started) * 1000 / len(pairs)
            print(f"{os.path.basename(path)} batch {batch}: {ms:.2f} ms/pair")


if __name__ == "__main__":
    main()
