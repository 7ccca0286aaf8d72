# Sourced by the bench scripts that tabulate `latentllm sweep` results (run_paper.sh, run_c4_heldout.sh).

# ppl_of results.json method ratio dataset: the perplexity of one run, rounded to 2 decimals (empty when
# the sweep has no such run).
ppl_of() {
  jq -r --arg m "$2" --argjson r "$3" --arg d "$4" \
    '.runs[] | select(.method == $m and ((.ratio - $r) | fabs) < 1e-9) | .ppl[$d] | . * 100 | round / 100' "$1"
}
