set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/rope_window/TinyStories-656K-w0/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'TinyStories-656K'
plot 708.9919097592066 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
20 709.0312883936509
40 720.3208998718051
e
