set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/stories260K-default/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'stories260K'
plot 4.120832117472816 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 5.0816718860459265
20 8.169484424285532
30 15.048922165478404
40 26.644518979186543
e
