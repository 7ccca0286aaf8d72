set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/TinyStories-656K-default/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'TinyStories-656K'
plot 35.00014429015245 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 36.49839613490315
20 40.65631634450974
30 52.11560261627038
40 78.16588871019707
e
