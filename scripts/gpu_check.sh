#!/usr/bin/env bash
# GPU check: the vLLM tests on CUDA, one bf16 training iteration of a Qwen2.5-0.5B-shaped model
# built from a config (vLLM rollouts), rollout/learner tokens/s and MFU -> results/gpu.md.
# Needs a CUDA device, a CUDA build of torch and vLLM:  pip install -e ".[dev,vllm]"
# Each stage has its own time limit (about 7 minutes in all); without CUDA it stops at once
# with exit code 1. See agentrl/bench/gpu.py.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m agentrl.bench gpu "$@"
