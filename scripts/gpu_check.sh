#!/usr/bin/env bash
# GPU check: the vLLM tests on CUDA, one bf16 training iteration of a Qwen2.5-0.5B-shaped model
# built from a config (vLLM rollouts), rollout/learner tokens/s and MFU, and the rollout modes
# (lock-step, continuous, continuous with async k=1) on that model -> results/gpu.md.
# Needs a CUDA device, a CUDA build of torch and vLLM:  pip install -e ".[dev,vllm]"
# Each stage has its own time limit (about 13 minutes at most in all); without CUDA it stops at once
# with exit code 1. See agentrl/bench/gpu.py.
# It updates the committed report (--update); pass --out DIR to write elsewhere instead.
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
  case "$arg" in
    --out | --out=*) exec python -m agentrl.bench gpu "$@" ;;
  esac
done
exec python -m agentrl.bench gpu --update "$@"
