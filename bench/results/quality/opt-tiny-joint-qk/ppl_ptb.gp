set terminal pngcairo size 800,560 noenhanced
set output '/tmp/opt-abl-qk/ppl_ptb.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (ptb)'
set title 'opt-tiny'
plot 796.6734251700406 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
60 797.1160665952473
e
