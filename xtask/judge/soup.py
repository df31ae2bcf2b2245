"""A weight soup: the float weights of fp32 ONNX exports of one judge architecture,
averaged, then quantised as train.py quantises its export (dynamic int8, per channel).

    python3 xtask/judge/soup.py OUT_FP32 OUT_INT8 FP32 FP32 [FP32 ...]

Each FP32 is a `pair_judge.fp32.onnx` that train.py --out wrote, all fine-tuned from the
same checkpoint (their graphs must match initializer for initializer). OUT_INT8 can be put
in a directory with one parent's judge.json and metrics.json and calibrated with
`train.py --model DIR` (docs/MODEL.md, "What was tried", a weight soup).
"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    out_fp32, out_int8, *inputs = sys.argv[1:]
    models = [onnx.load(path) for path in inputs]
    soup = models[0]
    by_name = [{init.name: init for init in m.graph.initializer} for m in models]
    for path, names in zip(inputs, by_name):
        if names.keys() != by_name[0].keys():
            sys.exit(f"{path}: its initializers differ from {inputs[0]}'s: not the same architecture")
    averaged = 0
    for init in soup.graph.initializer:
        arrays = [numpy_helper.to_array(names[init.name]) for names in by_name]
        if arrays[0].dtype.kind != "f":
            continue
        if any(a.shape != arrays[0].shape for a in arrays):
            sys.exit(f"initializer {init.name}: shapes differ across the inputs")
        if not all(np.array_equal(arrays[0], a) for a in arrays[1:]):
            averaged += 1
        mean = np.mean(np.stack(arrays), axis=0).astype(arrays[0].dtype)
        init.CopyFrom(numpy_helper.from_array(mean, init.name))
    onnx.save(soup, out_fp32)
    quantize_dynamic(out_fp32, out_int8, weight_type=QuantType.QInt8, per_channel=True)
    print(f"averaged {averaged} of {len(soup.graph.initializer)} initializers; wrote {out_fp32} and {out_int8}")


if __name__ == "__main__":
    main()
