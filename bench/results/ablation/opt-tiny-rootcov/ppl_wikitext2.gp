set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/opt-tiny-rootcov/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'opt-tiny'
plot 1273.2194605085567 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-rootcov'
10 1277.9257120879515
20 1280.0206089264166
30 1280.443388395507
40 1282.5203936408536
e
