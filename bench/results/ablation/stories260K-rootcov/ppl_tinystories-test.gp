set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/stories260K-rootcov/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'stories260K'
plot 4.1208321378379855 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-rootcov'
10 22.415229975529478
20 41.33385520685187
30 74.50474054666353
40 108.59966845446091
e
