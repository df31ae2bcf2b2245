"""A plain reference for `memdedup scan FILE --json --threshold T`, for `cargo xtask bench --compare`.

Usage: reference_scan.py MODEL_DIR FILE THRESHOLD

Reads JSONL lines {"id", "text"}, embeds each text with all-MiniLM-L6-v2 (model.onnx and
tokenizer.json from MODEL_DIR: truncation to 256 tokens, padding per batch of 32, mean
pooling over the attention mask, unit length), links every pair whose cosine reaches
THRESHOLD and prints the connected components of two or more ids as
{"groups": [[id, ...], ...]}. Every line is in one namespace.
"""

import json
import sys

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

BATCH = 32
BLOCK = 1024
TOLERANCE = 2e-6  # memdedup counts scores within this of the threshold as reaching it


def embed(model_dir, texts):
    tokenizer = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tokenizer.enable_truncation(256)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest text of each batch
    session = ort.InferenceSession(f"{model_dir}/model.onnx", providers=["CPUExecutionProvider"])
    out = []
    for start in range(0, len(texts), BATCH):
        encodings = tokenizer.encode_batch(texts[start : start + BATCH])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        (hidden,) = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        out.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
    return np.concatenate(out)


def groups(vectors, threshold):
    parent = list(range(len(vectors)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for start in range(0, len(vectors), BLOCK):
        cosines = vectors[start : start + BLOCK] @ vectors.T
        for a, b in zip(*np.nonzero(cosines >= threshold - TOLERANCE)):
            a, b = find(start + int(a)), find(int(b))
            if a != b:
                parent[max(a, b)] = min(a, b)
    components = {}
    for i in range(len(vectors)):
        components.setdefault(find(i), []).append(i)
    return [members for members in components.values() if len(members) >= 2]


def main():
    model_dir, path, threshold = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with open(path, encoding="utf-8") as f:
        items = [json.loads(line) for line in f if line.strip()]
    vectors = embed(model_dir, [item["text"] for item in items])
    found = groups(vectors, threshold)
    print(json.dumps({"groups": [[items[i]["id"] for i in members] for members in found]}))


if __name__ == "__main__":
    main()
