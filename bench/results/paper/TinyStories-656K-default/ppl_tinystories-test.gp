set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/TinyStories-656K-default/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'TinyStories-656K'
plot 27.73304930091331 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 28.894121239424308
20 33.299933725265014
30 43.50697891715709
40 68.01647765783298
e
