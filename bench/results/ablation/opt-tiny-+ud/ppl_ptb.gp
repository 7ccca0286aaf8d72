set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/opt-tiny-+ud/ppl_ptb.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (ptb)'
set title 'opt-tiny'
plot 796.6734254339709 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 796.6637668479732
20 795.7801744648012
30 795.4592964260049
40 795.7181254934001
e
