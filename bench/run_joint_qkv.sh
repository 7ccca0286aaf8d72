#!/usr/bin/env bash
# Joint Q-K-V and split heads against LatentLLM's joint Q-K and local ASVD at equal parameters (the paper's
# appendix "Activation-Aware Joint QKV Compression" and "Split-Head Compression"): TinyStories-656K compressed
# with 64 C4 calibration windows of 256 tokens (seed 0) so that its compressed modules (the linear modules of
# attention and MLP) keep 80, 70, 60 and 50 % of their weights (--ratio 0.2 … 0.5; --joint qkv counts the
# shared A once, --split-heads B's head blocks only). Rows: latentllm's default (joint qk,ud), --joint none
# (local ASVD for every module), --joint qkv (the rest local, as --joint none), --joint qkv,ud (beside the
# default: qk replaced by qkv), --joint none --split-heads; each with the preset's global rank
# allocation and with --rank-alloc uniform. Perplexity on the held-out TinyStories test stories (117-232,
# `ppl --dataset tinystories-test`); the parameters achieved (`compress --json` params / dense_params); the
# layer-wise losses: the summed output error of q_proj, k_proj, v_proj over the calibration tokens
# (Σ ‖W_i·X − B_i·A_i·X‖², ModuleReport::loss, all layers; for joint qk its per-module losses) and the mean
# relative loss of q, k and v each (loss / Σ‖W_i·X‖²). Writes bench/results/joint_qkv.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/latentllm
SHARED=${LATENTLLM_SHARED:-../shared}
C4=$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl
ST=$SHARED/data/tinystories/TinyStories-valid.stories0001-0232.clean.txt
MODEL=$SHARED/models/TinyStories-656K
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
CSV=bench/results/joint_qkv.csv

row() {  # ratio alloc label args...
  local ratio=$1 alloc=$2 label=$3
  shift 3
  "$BIN" compress --model "$MODEL" --out "$TMP/out" --force --calib c4 --calib-data "$C4" --nsamples 64 \
    --seqlen 256 --seed 0 --json --ratio "$ratio" --rank-alloc "$alloc" "$@" > "$TMP/json" 2> "$TMP/log"
  local ppl stats
  ppl=$("$BIN" ppl --model "$TMP/out" --dataset tinystories-test --data "$ST" 2>/dev/null | awk '$1 == "ppl" { print $2 }')
  stats=$(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
mods = j["modules"]
attn = [m for m in mods if m["name"].split(".")[-1] in ("q_proj", "k_proj", "v_proj")]
rel = lambda p: sum(m["loss_rel"] for m in attn if m["name"].endswith(p)) / max(1, sum(1 for m in attn if m["name"].endswith(p)))
ranks = "/".join(str(m["rank"]) for m in attn[:3])
print("%.4f,%.6e,%.5f,%.5f,%.5f,%s" % (1 - j["params"] / j["dense_params"], sum(m["loss"] for m in attn),
      rel("q_proj"), rel("k_proj"), rel("v_proj"), ranks))' "$TMP/json")
  echo "$ratio,$alloc,$label,$stats,$ppl"
}

dense=$("$BIN" ppl --model "$MODEL" --dataset tinystories-test --data "$ST" 2>/dev/null | awk '$1 == "ppl" { print $2 }')
{
  echo "ratio,rank_alloc,method,params_saved,qkv_loss,q_loss_rel,k_loss_rel,v_loss_rel,layer0_qkv_ranks,ppl"
  echo "0,-,dense,0,0,0,0,0,-,$dense"
  for r in 0.2 0.3 0.4 0.5; do
    for alloc in global uniform; do
      row "$r" "$alloc" "latentllm (joint qk+ud)" --method latentllm
      row "$r" "$alloc" "joint none (local ASVD)" --method latentllm --joint none
      row "$r" "$alloc" "joint qkv" --method latentllm --joint qkv
      row "$r" "$alloc" "joint qkv+ud" --method latentllm --joint qkv,ud
      row "$r" "$alloc" "joint none + split heads" --method latentllm --joint none --split-heads
    done
  done
} | tee "$CSV"
