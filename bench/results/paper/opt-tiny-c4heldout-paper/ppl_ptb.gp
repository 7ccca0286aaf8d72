set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/opt-tiny-c4heldout-paper/ppl_ptb.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (ptb)'
set title 'opt-tiny'
plot 796.6734260877166 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 796.5637676767823
20 796.1015691784072
30 796.3906455721896
40 796.8721867479252
e
