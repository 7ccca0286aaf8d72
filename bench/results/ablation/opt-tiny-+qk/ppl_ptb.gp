set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/opt-tiny-+qk/ppl_ptb.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (ptb)'
set title 'opt-tiny'
plot 796.6734254339709 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 796.6705515655913
20 795.7366732000078
30 795.4199995498673
40 795.3012351817125
e
