set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/rope_window/TinyStories-656K-w0/ppl_text.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (text)'
set title 'TinyStories-656K'
plot 30.528541760761556 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
20 44.992026532244815
40 113.64055321760418
e
