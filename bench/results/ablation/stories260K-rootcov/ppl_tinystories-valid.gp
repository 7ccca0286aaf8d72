set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/stories260K-rootcov/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'stories260K'
plot 3.815771676102655 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-rootcov'
10 22.581624342675802
20 42.877175929138936
30 75.3162386970035
40 118.02892043671704
e
