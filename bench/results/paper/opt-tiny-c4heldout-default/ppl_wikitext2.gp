set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/opt-tiny-c4heldout-default/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'opt-tiny'
plot 1273.2194583125463 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 1272.3167993672419
20 1272.8724161736818
30 1273.0076622572587
40 1273.588545431354
e
