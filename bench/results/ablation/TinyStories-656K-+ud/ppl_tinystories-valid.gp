set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/TinyStories-656K-+ud/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'TinyStories-656K'
plot 35.00014432771984 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 38.853660303478975
20 49.103586791289295
30 74.03474087040838
40 119.99470265873462
e
