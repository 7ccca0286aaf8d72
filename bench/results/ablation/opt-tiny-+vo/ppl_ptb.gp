set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/opt-tiny-+vo/ppl_ptb.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (ptb)'
set title 'opt-tiny'
plot 796.6734254339709 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 796.6428378556552
20 797.6090756813109
30 797.5759500729486
40 797.7919195946691
e
