set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/opt-tiny-+bi/ppl_ptb.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (ptb)'
set title 'opt-tiny'
plot 796.6734254339709 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 796.6210783675158
20 795.5314391134037
30 795.1484912623538
40 795.1524030762231
e
