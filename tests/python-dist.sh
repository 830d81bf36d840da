#!/bin/sh
# python-dist.sh: tessera.distributed (Ulysses, ring, hybrid) on 2 and 4 CPU
# processes over gloo, CPU tensors through the CPU plan executor, against
# single-process tessera.attention and the float64 reference; the launch
# and transfer counts of skipped hops; chunked_attention (the ring's merge
# in one process).  tests/python_dist.py says what it covers.  Skips (77)
# without python3, PyTorch or the shared library, and in the sanitizer build
# (tests/python-env.sh).  SEED= repeats a run.
TSR_PY_NEEDS_TORCH=1
. "${TSR_TOP_SRCDIR:-.}/tests/python-env.sh" python-dist
if ! python3 -c "import torch.distributed as d; assert d.is_available() and d.is_gloo_available()" 2>/dev/null; then
  echo "python-dist: this PyTorch has no torch.distributed with gloo"
  exit 77
fi
seed=${SEED:-$(python3 -c 'import random; print(random.randrange(1 << 30))')}
rc=0
for world in 2 4; do
  timeout 600 python3 "$src/tests/python_dist.py" "$world" "$seed" || rc=1
done
exit $rc
