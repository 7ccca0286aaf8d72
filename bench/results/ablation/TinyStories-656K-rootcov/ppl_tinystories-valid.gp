set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/TinyStories-656K-rootcov/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'TinyStories-656K'
plot 35.00014432771984 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-rootcov'
10 65.91156253799576
20 84.92369867857113
30 126.01546235250218
40 181.4600966412534
e
