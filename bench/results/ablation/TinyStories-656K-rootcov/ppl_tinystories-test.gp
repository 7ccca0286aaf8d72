set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/TinyStories-656K-rootcov/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'TinyStories-656K'
plot 27.733049124048073 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-rootcov'
10 56.32374439578635
20 79.54080861965922
30 117.38241859221289
40 172.03744785729253
e
