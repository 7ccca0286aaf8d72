set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/TinyStories-656K-+qk/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'TinyStories-656K'
plot 35.00014432771984 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 38.77759718491598
20 48.54439832226821
30 73.18460950761109
40 117.4363445892035
e
