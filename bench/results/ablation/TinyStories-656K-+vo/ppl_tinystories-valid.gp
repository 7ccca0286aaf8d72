set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/TinyStories-656K-+vo/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'TinyStories-656K'
plot 35.00014432771984 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 38.87160628532838
20 49.11482493828333
30 71.16957211759104
40 107.87222465552605
e
