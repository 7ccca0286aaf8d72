set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/opt-tiny-rootcov/ppl_ptb.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (ptb)'
set title 'opt-tiny'
plot 796.6734254339709 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-rootcov'
10 795.2441631726172
20 795.1647807653062
30 795.9228064363605
40 794.5634758748911
e
