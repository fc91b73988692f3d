#!/bin/bash
# Replay tables for the chain-draft defaults (local_weight 6, max_waste 8) and their ablation.
# Usage: experiments/chain-drafts/run.sh TRACE NAME   (TRACE: a .jsonl or .jsonl.gz trace)
# Writes NAME.md (every method, defaults) and NAME-{max_waste64,local_weight1,before}.md (specdraft
# with one change, or both, turned off) to benchmarks/results/chain-drafts/, each with its .json
# and .png.
set -e
trace=$1; name=$2; out=$(dirname "$0")/../../benchmarks/results/chain-drafts
replay() { ${PYTHON:-python} -m specdraft.cli replay --traces "$trace" --cost-model gpu "$@"; }
replay --methods specdraft-suffix specdraft-tree specdraft-tree-path arctic-suffix vllm-ngram \
  hf-prompt-lookup --json "$out/$name.json" --markdown "$out/$name.md"
ablate() {  # suffix options
  replay --methods specdraft-suffix specdraft-tree specdraft-tree-path --specdraft-options "$2" \
    --json "$out/$name-$1.json" --markdown "$out/$name-$1.md"
}
ablate max_waste64 '{"max_waste": 64}'
ablate local_weight1 '{"local_weight": 1}'
ablate before '{"local_weight": 1, "max_waste": 64}'
