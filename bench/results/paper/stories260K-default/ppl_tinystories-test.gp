set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/stories260K-default/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'stories260K'
plot 4.1208321378379855 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 5.069704167865875
20 8.169466231026888
30 15.553013898110201
40 26.977496172620235
e
