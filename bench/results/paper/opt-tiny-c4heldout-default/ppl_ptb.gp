set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/opt-tiny-c4heldout-default/ppl_ptb.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (ptb)'
set title 'opt-tiny'
plot 796.6734260877166 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 797.0024118837364
20 796.9153033986357
30 797.2262560729749
40 797.0219592302459
e
