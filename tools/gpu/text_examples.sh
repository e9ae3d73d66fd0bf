#!/usr/bin/env bash
# GPU node check for the text module (a minute or two of GPU time):
#  1. the one-shot CUDA example that configs/prompts/end_to_end.txt and infill.txt show the model
#     compiles with load_inline and matches its reference model;
#  2. `dice bench tokenizer` (CPU work, single thread) on this machine, when a tokenizer is at hand
#     (TOKENIZER_DIR, else data/qwen3, else skipped).
# Run at the repo root with the project built in build-gpu/. Results go to $OUT.
set -euo pipefail
OUT=${OUT:-/tmp/dice-text-gpu}
mkdir -p "$OUT"
PY=${PYTHON:-python3}

"$PY" - "$OUT" <<'PYEOF'
import importlib.util, re, sys, time
out = sys.argv[1]
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0))
for name in ("end_to_end", "infill"):
    text = open(f"configs/prompts/{name}.txt").read()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "{" + "reference}" not in b
              and "{" + "prefix}" not in b and "{" + "suffix}" not in b]
    ref_src, new_src = blocks[0], blocks[1]
    if "get_inputs" not in ref_src:  # the infill example omits them: reuse the end-to-end ones
        ref_src += "\n\ndef get_inputs():\n    n = 1 << 20\n    return [torch.randn(n).cuda() for _ in range(3)]\n\n\ndef get_init_inputs():\n    return []\n"
    open(f"{out}/{name}_model.py", "w").write(ref_src)
    open(f"{out}/{name}_new.py", "w").write(new_src)
    def load(path):
        spec = importlib.util.spec_from_file_location(path.split("/")[-1][:-3], path)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        return m
    t0 = time.time()
    ref = load(f"{out}/{name}_model.py")
    new = load(f"{out}/{name}_new.py")
    build_s = time.time() - t0
    x = ref.get_inputs()
    a = ref.Model(*ref.get_init_inputs()).cuda()
    b = new.ModelNew(*ref.get_init_inputs()).cuda()
    err = (a(*x) - b(*x)).abs().max().item()
    print(f"{name}: one-shot example built in {build_s:.1f} s, max abs error {err:.3g}", "OK" if err < 1e-5 else "MISMATCH")
    if err >= 1e-5:
        sys.exit(1)
PYEOF

TOK=${TOKENIZER_DIR:-data/qwen3}
if [[ -f "$TOK/tokenizer.json" && -x build-gpu/src/app/dice ]]; then
  build-gpu/src/app/dice bench tokenizer --tokenizer "$TOK" --mb 8 --reps 3 | tee "$OUT/bench_tokenizer.txt"
else
  echo "bench tokenizer skipped: no $TOK/tokenizer.json or no build-gpu/src/app/dice (set TOKENIZER_DIR to a model folder)"
fi
