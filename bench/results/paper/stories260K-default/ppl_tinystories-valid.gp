set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/stories260K-default/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'stories260K'
plot 3.8157717070243145 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 4.714312658415244
20 7.75088337964652
30 14.698724694252324
40 26.330067307450427
e
